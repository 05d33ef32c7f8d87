//! The panel path's product on Intel AMX tiles: the 32 rows of a panel
//! times up to 16 columns, one block of values at a time.
//!
//! The panel's codes are already what `tdpbsud` takes as its B operand:
//! four codes of each of 16 rows side by side, a step of four values a
//! 64-byte tile row (the panel's two halves 64 bytes apart). The
//! activations, quantised one column after another, are the A operand:
//! a column's codes of one block are a tile row. So one block is two
//! tile products, C[column][row] for each half of the panel, whose
//! integer sums then take the block's scales in AVX-512 as in
//! `avx512_vnni::panel_vnni`.

use std::arch::x86_64::*;

use super::operands::PANEL_R;
use crate::kernels::amx::{TILES, TileConfig, TileUnit};
use crate::kernels::matmul::quant_format::Format;

/// Columns of one tile product (rows of its A and C tiles).
pub(super) const AMX_C: usize = 16;

/// Tile numbers: the sums of the panel's two halves, the activations,
/// and the halves' codes.
const C0: u8 = 0;
const C1: u8 = 1;
const A: u8 = 2;
const B0: u8 = 3;
const B1: u8 = 4;

/// Bytes between one step's codes and the next in a panel (its 32 rows).
const PANEL_STEP_BYTES: usize = 4 * PANEL_R;

/// Quantised activation columns, one after another: the codes of column
/// `c` and value `v` at `codes[c * k + v]`, and its block `blk`'s scale,
/// bias and scaled sum at `[c * nblk + blk]` of `d`, `bias` and `sx`
/// (`activation_quant` with tiles of one column).
#[derive(Clone, Copy)]
pub(super) struct ColumnActs {
    pub(super) codes: *const i8,
    pub(super) k: usize,
    pub(super) d: *const f32,
    pub(super) bias: *const i32,
    pub(super) sx: *const f32,
    pub(super) nblk: usize,
}

/// A panel chunk: `nb` blocks of 32 rows' codes in `f`'s format, and
/// their scales and mins (`[block][row]`).
pub(super) struct PanelChunk<'a> {
    pub(super) f: &'a Format,
    pub(super) nb: usize,
    pub(super) codes: *const u8,
    pub(super) dw: *const f32,
    pub(super) mw: *const f32,
}

/// The tile shapes for `cols` columns (1 to [`AMX_C`]) and blocks of `qb`
/// values; `None` where the tiles cannot take them.
pub(super) fn config(cols: usize, qb: usize) -> Option<TileConfig> {
    if cols == 0 || cols > AMX_C || qb % 4 != 0 {
        return None;
    }
    let mut shapes = [(0, 0); TILES];
    shapes[C0 as usize] = (cols, 64);
    shapes[C1 as usize] = (cols, 64);
    shapes[A as usize] = (cols, qb);
    shapes[B0 as usize] = (qb / 4, 64);
    shapes[B1 as usize] = (qb / 4, 64);
    TileConfig::new(shapes)
}

/// `tile[c][r]` = the product of the panel's rows `r` and the `cols`
/// activation columns from `x` over the chunk's blocks (from the
/// columns' block `blk0`), with the tiles shaped by `config`.
///
/// # Safety
/// The processor has AVX-512 F/BW/VL and FMA, and `unit` its tile
/// instructions; `config` is `config(cols, qb)` of the chunk's format;
/// the columns hold the blocks from `blk0` on that the chunk holds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
pub(super) unsafe fn panel_tiles<U: TileUnit>(
    unit: &mut U,
    config: &TileConfig,
    chunk: &PanelChunk,
    x: &ColumnActs,
    blk0: usize,
    cols: usize,
    tile: &mut [[f32; PANEL_R]; AMX_C],
) {
    let PanelChunk {
        f,
        nb,
        codes,
        dw,
        mw,
    } = *chunk;
    let (qb, steps) = (f.qb, f.qb / 4);
    #[repr(align(64))]
    struct Sums([[[i32; 16]; AMX_C]; 2]);
    let mut sums = Sums([[[0; 16]; AMX_C]; 2]);
    let xstride = x.k;
    // SAFETY: the caller's contract; every tile's rows lie in the panel's
    // block, in the columns' block or in `sums`.
    unsafe {
        unit.configure(config);
        for blk in 0..nb {
            let panel = codes.add(blk * steps * PANEL_STEP_BYTES);
            unit.zero::<C0>();
            unit.zero::<C1>();
            unit.load::<A>(x.codes.add((blk0 + blk) * qb) as *const u8, xstride);
            unit.load::<B0>(panel, PANEL_STEP_BYTES);
            unit.load::<B1>(panel.add(PANEL_STEP_BYTES / 2), PANEL_STEP_BYTES);
            unit.dot_signed_unsigned::<C0, A, B0>();
            unit.dot_signed_unsigned::<C1, A, B1>();
            unit.store::<C0>(sums.0[0].as_mut_ptr() as *mut u8, 64);
            unit.store::<C1>(sums.0[1].as_mut_ptr() as *mut u8, 64);
            let d = [
                _mm512_loadu_ps(dw.add(blk * PANEL_R)),
                _mm512_loadu_ps(dw.add(blk * PANEL_R + 16)),
            ];
            let m = [
                _mm512_loadu_ps(mw.add(blk * PANEL_R)),
                _mm512_loadu_ps(mw.add(blk * PANEL_R + 16)),
            ];
            for (c, out) in tile.iter_mut().enumerate().take(cols) {
                let at = c * x.nblk + blk0 + blk;
                let bias = _mm512_set1_epi32(*x.bias.add(at));
                let dx = _mm512_set1_ps(*x.d.add(at));
                let sx = _mm512_set1_ps(*x.sx.add(at));
                for h in 0..2 {
                    let acc = out.as_mut_ptr().add(16 * h);
                    let sum = _mm512_add_epi32(
                        _mm512_load_si512(sums.0[h][c].as_ptr() as *const __m512i),
                        bias,
                    );
                    let scale = _mm512_mul_ps(d[h], dx);
                    let mut v =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, _mm512_loadu_ps(acc));
                    if f.has_min {
                        v = _mm512_fnmadd_ps(m[h], sx, v);
                    }
                    _mm512_storeu_ps(acc, v);
                }
            }
        }
        unit.release();
    }
}
