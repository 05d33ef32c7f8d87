//! BF16 weights times many columns on Intel AMX tiles (`tdpbf16ps`).
//!
//! The weights are the A operand as they lie in memory: a tile is 16
//! rows of 32 values, loaded with the rows' own stride. The columns,
//! rounded to BF16 once per call, are the B operand, laid out as the
//! instruction reads it: 16 columns side by side a pair of values at a
//! time. Each task's 32 rows by 16 columns sum in two f32 tiles over the
//! whole row, and are stored once.
//!
//! The columns are rounded to BF16 as ggml rounds them for its BF16 dot
//! (nearest even); the weights are used as they are. F16 weights are not
//! taken: Sapphire and Emerald Rapids have no FP16 tiles, and BF16 would
//! drop three bits of every F16 weight.

use std::cell::RefCell;

use ggraph_core::DType;
use ggraph_core::quant::f32_to_bf16;

use crate::kernels::amx::{TILES, TileConfig, TileUnit, Unit};
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::parallel::column_split;
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Columns of a tile product.
const COLS: usize = 16;
/// Rows of the weights per task (two tiles of 16).
const ROWS: usize = 32;
/// Values per tile product (a 64-byte tile row of BF16).
const STEP: usize = 32;

/// Tile numbers: the sums of the task's two halves of rows, their
/// weights, and the columns.
const C0: u8 = 0;
const C1: u8 = 1;
const A0: u8 = 2;
const A1: u8 = 3;
const B: u8 = 4;

thread_local! {
    /// The columns in BF16, in pairs (see `pack_pairs`).
    static PAIRS: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// Whether the tiles take the weights `a`: packed BF16 rows of whole
/// 32-value steps.
pub(crate) fn takes(a: &WeightRows) -> bool {
    a.dtype == DType::BF16 && a.elem_stride == 2 && a.k > 0 && a.k % STEP == 0
}

/// The tile shapes of a task of `rows` rows (1 to 32).
fn config(rows: usize) -> Option<TileConfig> {
    let top = rows.min(16);
    let bottom = rows - top;
    let bottom_shape = if bottom > 0 { (bottom, 64) } else { (0, 0) };
    let mut shapes = [(0, 0); TILES];
    shapes[C0 as usize] = (top, 4 * COLS);
    shapes[C1 as usize] = bottom_shape;
    shapes[A0 as usize] = (top, 2 * STEP);
    shapes[A1 as usize] = bottom_shape;
    shapes[B as usize] = (STEP / 2, 4 * COLS);
    TileConfig::new(shapes)
}

/// `out[j][i] = dot(a row i, b[j])` for the `m` rows of `a` ([`takes`])
/// on `unit`'s tiles; `false`, with nothing written, where the tiles
/// cannot be configured for them.
pub(crate) fn gemm(unit: Unit, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) -> bool {
    let (n, k) = (b.0.len(), a.k);
    if !takes(&a) || m == 0 || n == 0 {
        return false;
    }
    let Some(full) = config(ROWS.min(m)) else {
        return false;
    };
    let Some(last) = config(match m % ROWS {
        0 => ROWS.min(m),
        rows => rows,
    }) else {
        return false;
    };
    let groups = n.div_ceil(COLS);
    with_scratch(&PAIRS, groups * COLS * k, |pairs| {
        team::for_each_chunk_mut(pairs, COLS * k, |g, group| pack_pairs(b, g, k, group));
        let pairs = &*pairs;
        let panels = m.div_ceil(ROWS);
        let (col_groups, per_group) = column_split(panels, groups);
        team::for_each(panels * col_groups, |task| {
            let (p, cg) = (task % panels, task / panels);
            let i0 = p * ROWS;
            let rows = ROWS.min(m - i0);
            let config = if rows == ROWS.min(m) { &full } else { &last };
            for g in cg * per_group..((cg + 1) * per_group).min(groups) {
                let j0 = g * COLS;
                let nc = COLS.min(n - j0);
                let mut sums = [[0f32; COLS]; ROWS];
                let x = pairs[g * COLS * k..].as_ptr();
                // SAFETY: the configuration is that of `rows` rows; rows
                // i0..i0 + rows of `a` hold k values; the group holds k
                // values of 16 columns.
                unsafe {
                    on_unit(
                        unit,
                        config,
                        a.row(i0),
                        a.stride,
                        rows > 16,
                        k,
                        x,
                        &mut sums,
                    )
                };
                for c in 0..nc {
                    // SAFETY: output column j0 + c holds m values; rows
                    // i0..i0 + rows of it are this task's.
                    let dst =
                        unsafe { std::slice::from_raw_parts_mut(out.0[j0 + c].add(i0), rows) };
                    for (d, row) in dst.iter_mut().zip(&sums) {
                        *d = row[c];
                    }
                }
            }
        });
    });
    true
}

/// Columns `16 g..16 g + 16` of `b` (zeros past the last), `k` values
/// each, as BF16 pairs: value `v` of column `c` at `group[(v / 2 * 16 + c)
/// * 2 + v % 2]`, so that 32 values of the 16 columns are one B tile.
fn pack_pairs(b: &Cols<f32>, g: usize, k: usize, group: &mut [u16]) {
    for c in 0..COLS {
        let Some(&col) = b.0.get(g * COLS + c) else {
            for pair in 0..k / 2 {
                group[(pair * COLS + c) * 2..][..2].fill(0);
            }
            continue;
        };
        // SAFETY: every column holds k values.
        let x = unsafe { std::slice::from_raw_parts(col, k) };
        for (pair, v) in x.chunks_exact(2).enumerate() {
            let at = (pair * COLS + c) * 2;
            group[at] = f32_to_bf16(v[0]);
            group[at + 1] = f32_to_bf16(v[1]);
        }
    }
}

/// [`product`] on `unit`.
///
/// # Safety
/// As for `product`.
#[allow(clippy::too_many_arguments)]
unsafe fn on_unit(
    unit: Unit,
    config: &TileConfig,
    w: *const u8,
    stride: usize,
    two_halves: bool,
    k: usize,
    x: *const u16,
    sums: &mut [[f32; COLS]; ROWS],
) {
    // SAFETY: the caller's contract.
    unsafe {
        match unit {
            Unit::Hardware(mut hw) => product(&mut hw, config, w, stride, two_halves, k, x, sums),
            #[cfg(test)]
            Unit::Emulated => {
                let mut emulated = crate::kernels::amx::Emulated::default();
                product(&mut emulated, config, w, stride, two_halves, k, x, sums);
                if emulated.fault.is_some() {
                    sums.iter_mut().for_each(|row| row.fill(f32::NAN));
                }
            }
        }
    }
}

/// `sums[r][c]` = the dot of weight row `r` (at `w`, `stride` bytes
/// apart) and column `c` of the pairs at `x`, over `k` values; rows 16
/// to 31 only if `two_halves`.
///
/// # Safety
/// `config` is [`config`]'s for the rows (more than 16 if `two_halves`);
/// the rows hold `k` BF16 values (a multiple of 32), `x` 16 columns of
/// `k` values as `pack_pairs` lays them out.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn product<U: TileUnit>(
    unit: &mut U,
    config: &TileConfig,
    w: *const u8,
    stride: usize,
    two_halves: bool,
    k: usize,
    x: *const u16,
    sums: &mut [[f32; COLS]; ROWS],
) {
    // SAFETY: the caller's contract: each load reads the configured rows
    // of 64 bytes within the weights and the pairs.
    unsafe {
        unit.configure(config);
        unit.zero::<C0>();
        if two_halves {
            unit.zero::<C1>();
        }
        for v in (0..k).step_by(STEP) {
            // 32 values of the 16 columns: 16 pair rows of 64 bytes
            unit.load::<B>(x.add(v * COLS) as *const u8, 4 * COLS);
            unit.load::<A0>(w.add(2 * v), stride);
            unit.dot_bf16::<C0, A0, B>();
            if two_halves {
                unit.load::<A1>(w.add(16 * stride + 2 * v), stride);
                unit.dot_bf16::<C1, A1, B>();
            }
        }
        let row_bytes = 4 * COLS;
        unit.store::<C0>(sums.as_mut_ptr() as *mut u8, row_bytes);
        if two_halves {
            unit.store::<C1>(sums[16..].as_mut_ptr() as *mut u8, row_bytes);
        }
        unit.release();
    }
}
