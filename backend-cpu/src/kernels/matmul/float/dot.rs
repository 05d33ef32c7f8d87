//! The dot path: each weight row read once, straight from the buffer
//! (F16/BF16 widened in registers), and dotted with every column of a
//! small tile of activations. This is the mat-vec of token generation: it
//! streams the weights at memory bandwidth.

use std::cell::RefCell;
use std::ops::Range;

use ggraph_core::DType;

#[cfg(target_arch = "x86_64")]
use super::avx2::dot_tile_avx2;
#[cfg(target_arch = "x86_64")]
use super::avx512::dot_tile_avx512;
use super::dot_portable::dot_range_portable;
#[cfg(target_arch = "x86_64")]
use super::weight_values::{DT_BF16, DT_F16, DT_F32};
use crate::kernels::isa::Isa;
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::matmul::row_streaming::{SHORT_ROW_BYTES, rows_ahead, short_rows_ahead};
use crate::kernels::parallel::par_ranges;
use crate::kernels::scratch::with_scratch;

/// `out[j][i] = dot(a row i, b[j])` for `i < m` and the (at most eight)
/// columns of `b`, rows packed.
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    par_ranges(m, 16, |range| {
        with_scratch(&DOT_ACC, DOT_RB * 8 * 16, |acc| {
            dot_range(isa, &a, b, out, range, acc)
        });
    });
}

/// A dot tile: values `k0..k0 + kc` of R rows times C columns, added to
/// (or, when `first`, stored in) `acc`: one 16-float slot per (row,
/// column), `acc[(r * C + c) * 16..]`, whose lanes sum to the dot. Each
/// row's cache line `ahead` bytes on is prefetched (on AVX2, none when
/// `ahead` is 0).
type DotTile = unsafe fn(
    rows: *const *const u8,
    k0: usize,
    cols: *const *const f32,
    kc: usize,
    acc: *mut f32,
    first: bool,
    ahead: usize,
);

/// Values of k per chunk of the AVX-512 dot path with more than four
/// columns (the columns' chunk stays in L1/L2; 1024 measured best for 8
/// columns, against 256 to 4096, on the first AVX-512 machine).
const DOT_KC: usize = 1024;
/// Rows per block of the dot path (their partial sums stay in L1/L2), a
/// multiple of every tile's row count.
const DOT_RB: usize = 60;

/// The dot tile kernel for `r` rows and `c` columns (c <= 8) of this
/// weight dtype, or None to use the portable loop.
fn dot_tile_fn(isa: Isa, dtype: DType, c: usize) -> Option<(usize, DotTile)> {
    #[cfg(target_arch = "x86_64")]
    {
        // 32 zmm registers: up to 16 accumulators
        macro_rules! pick {
            ($f:ident, $dt:expr) => {
                match c {
                    1 => Some((4, $f::<4, 1, $dt> as DotTile)),
                    2 => Some((4, $f::<4, 2, $dt> as DotTile)),
                    3 => Some((4, $f::<4, 3, $dt> as DotTile)),
                    4 => Some((4, $f::<4, 4, $dt> as DotTile)),
                    5 => Some((3, $f::<3, 5, $dt> as DotTile)),
                    6 => Some((3, $f::<3, 6, $dt> as DotTile)),
                    7 => Some((2, $f::<2, 7, $dt> as DotTile)),
                    _ => Some((2, $f::<2, 8, $dt> as DotTile)),
                }
            };
        }
        // 16 ymm registers: at most 12 accumulators, so that a row, a
        // column and a product stay in registers too
        macro_rules! pick16 {
            ($f:ident, $dt:expr) => {
                match c {
                    1 => Some((4, $f::<4, 1, $dt> as DotTile)),
                    2 => Some((4, $f::<4, 2, $dt> as DotTile)),
                    // 4 x 3 and 3 x 4 need all 16 and run in asm (see
                    // `dot_asm_avx2`)
                    3 => Some((4, $f::<4, 3, $dt> as DotTile)),
                    4 => Some((3, $f::<3, 4, $dt> as DotTile)),
                    5 => Some((2, $f::<2, 5, $dt> as DotTile)),
                    6 => Some((2, $f::<2, 6, $dt> as DotTile)),
                    7 => Some((1, $f::<1, 7, $dt> as DotTile)),
                    _ => Some((1, $f::<1, 8, $dt> as DotTile)),
                }
            };
        }
        return match (isa, dtype) {
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F32) => pick!(dot_tile_avx512, DT_F32),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F16) => pick!(dot_tile_avx512, DT_F16),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::BF16) => pick!(dot_tile_avx512, DT_BF16),
            (Isa::Avx2, DType::F32) => pick16!(dot_tile_avx2, DT_F32),
            (Isa::Avx2, DType::F16) => pick16!(dot_tile_avx2, DT_F16),
            (Isa::Avx2, DType::BF16) => pick16!(dot_tile_avx2, DT_BF16),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = (isa, dtype, c);
        None
    }
}

/// The tile kernel for single rows (the remainder after whole row groups).
fn dot_row_fn(isa: Isa, dtype: DType, c: usize) -> Option<DotTile> {
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! one {
            ($f:ident, $dt:expr) => {
                match c {
                    1 => Some($f::<1, 1, $dt> as DotTile),
                    2 => Some($f::<1, 2, $dt> as DotTile),
                    3 => Some($f::<1, 3, $dt> as DotTile),
                    4 => Some($f::<1, 4, $dt> as DotTile),
                    5 => Some($f::<1, 5, $dt> as DotTile),
                    6 => Some($f::<1, 6, $dt> as DotTile),
                    7 => Some($f::<1, 7, $dt> as DotTile),
                    _ => Some($f::<1, 8, $dt> as DotTile),
                }
            };
        }
        return match (isa, dtype) {
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F32) => one!(dot_tile_avx512, DT_F32),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F16) => one!(dot_tile_avx512, DT_F16),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::BF16) => one!(dot_tile_avx512, DT_BF16),
            (Isa::Avx2, DType::F32) => one!(dot_tile_avx2, DT_F32),
            (Isa::Avx2, DType::F16) => one!(dot_tile_avx2, DT_F16),
            (Isa::Avx2, DType::BF16) => one!(dot_tile_avx2, DT_BF16),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = (isa, dtype, c);
        None
    }
}

thread_local! {
    static DOT_ACC: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Rows `range` of the dot path, with `acc` as the partial sums.
///
/// Rows go in blocks of `DOT_RB` (the partial sums' extent), and the
/// columns in groups: eight with AVX-512's 32 registers, four with AVX2's
/// 16. Each group dots a strip of rows in turn, so that the later groups
/// read the strip from cache; on AVX-512 with more than four columns, in
/// chunks of `DOT_KC` values.
fn dot_range(
    isa: Isa,
    a: &WeightRows,
    b: &Cols<f32>,
    out: &Cols<f32>,
    range: Range<usize>,
    acc: &mut [f32],
) {
    let n = b.0.len();
    let k = a.k;
    if dot_tile_fn(isa, a.dtype, 1).is_none() {
        dot_range_portable(a, b, out, range);
        return;
    }
    let groups = n.div_ceil(if isa >= Isa::Avx512 { 8 } else { 4 });
    let per_group = n.div_ceil(groups);
    // AVX2 (and AVX-512 up to four columns): whole rows, each one long
    // stream that the hardware prefetchers follow, and with several
    // groups, a strip of rows as tall as the tiles that every group reads
    // in turn while it is in L1/L2; on AVX2 measured faster than chunks
    // of 1024 values, on AVX-512 up to four columns faster or level.
    // AVX-512 with five to eight columns: chunks whose columns stay in
    // L1, which measured faster there than whole rows
    // (docs/performance.md).
    let (chunk, strip) = if isa >= Isa::Avx512 && n > 4 {
        (DOT_KC, DOT_RB)
    } else if groups == 1 {
        (k, DOT_RB)
    } else {
        let tile_rows = |c: usize| dot_tile_fn(isa, a.dtype, c).map_or(1, |(r, _)| r);
        let (r_first, r_last) = (
            tile_rows(per_group),
            tile_rows(n - (groups - 1) * per_group),
        );
        (k, lcm(r_first, r_last))
    };
    for i0 in range.clone().step_by(DOT_RB) {
        let i1 = (i0 + DOT_RB).min(range.end);
        for k0 in (0..k).step_by(chunk) {
            let kc = chunk.min(k - k0);
            for s0 in (i0..i1).step_by(strip) {
                let s1 = (s0 + strip).min(i1);
                for j0 in (0..n).step_by(per_group) {
                    let c = per_group.min(n - j0);
                    let slots = &mut acc[dot_slot(j0, c, s0 - i0, 0)..];
                    dot_tiles(isa, a, &b.0[j0..j0 + c], s0..s1, k0, kc, slots);
                }
            }
        }
        // AVX2 tiles fill 8 lanes of a slot, AVX-512 tiles 16
        let lanes = if isa >= Isa::Avx512 { 16 } else { 8 };
        for i in i0..i1 {
            for j0 in (0..n).step_by(per_group) {
                let c = per_group.min(n - j0);
                for jj in 0..c {
                    let at = dot_slot(j0, c, i - i0, jj);
                    let v = lane_sum(&acc[at..at + lanes]);
                    // SAFETY: output column j0 + jj has m values.
                    unsafe { *out.0[j0 + jj].add(i) = v };
                }
            }
        }
    }
}

/// Values `k0..k0 + kc` of weight rows `rows` times the columns `cols`
/// (at most 8), added to (or, from k0 = 0, stored in) `slots`: the rows'
/// slots, row-major, from the first row's.
fn dot_tiles(
    isa: Isa,
    a: &WeightRows,
    cols: &[*mut f32],
    rows: Range<usize>,
    k0: usize,
    kc: usize,
    slots: &mut [f32],
) {
    let c = cols.len();
    let (Some((r, tile)), Some(row1)) = (dot_tile_fn(isa, a.dtype, c), dot_row_fn(isa, a.dtype, c))
    else {
        return;
    };
    let mut col_ptrs = [std::ptr::null::<f32>(); 8];
    for (cp, p) in col_ptrs.iter_mut().zip(cols) {
        *cp = *p as *const f32;
    }
    let row_bytes = a.k * a.dtype.type_size();
    let mut i = rows.start;
    while i < rows.end {
        let (rr, f) = if rows.end - i >= r {
            (r, tile)
        } else {
            (1, row1)
        };
        let mut row_ptrs = [std::ptr::null::<u8>(); 8];
        for (q, row) in row_ptrs.iter_mut().enumerate().take(rr) {
            *row = a.row(i + q);
        }
        let slot = slots[(i - rows.start) * c * 16..].as_mut_ptr();
        // short whole rows: fetch rows PREFETCH_BYTES on; long ones on
        // AVX2: none (0), the hardware prefetchers follow the streams
        // (measured faster without); chunks: the same chunk of the rows
        // of the tiles that come next, whole tiles covering
        // PREFETCH_BYTES of chunk (rather than this row's next chunk,
        // which is read only after the whole strip; measured faster with
        // eight columns on AVX-512, level with five; docs/performance.md)
        let along = kc.min(1024) * a.dtype.type_size();
        let chunk_bytes = kc * a.dtype.type_size();
        let ahead = if kc < a.k {
            short_rows_ahead(rr * chunk_bytes) / chunk_bytes * a.stride
        } else if row_bytes > SHORT_ROW_BYTES && isa == Isa::Avx2 {
            0
        } else {
            rows_ahead(row_bytes, rr * a.stride, along)
        };
        // SAFETY: rows hold k packed values, columns k f32; the slots of
        // rows i.. hold rr * c * 16 floats.
        unsafe {
            f(
                row_ptrs.as_ptr(),
                k0,
                col_ptrs.as_ptr(),
                kc,
                slot,
                k0 == 0,
                ahead,
            )
        };
        i += rr;
    }
}

fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut x: usize, mut y: usize| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    a / gcd(a, b) * b
}

/// The sum of 8 or 16 partial sums, as a tree (independent adds rather
/// than one running sum).
#[inline]
fn lane_sum(v: &[f32]) -> f32 {
    let mut w = [0f32; 16];
    w[..v.len()].copy_from_slice(v);
    let w: [f32; 8] = std::array::from_fn(|l| w[l] + w[l + 8]);
    let w: [f32; 4] = std::array::from_fn(|l| w[l] + w[l + 4]);
    (w[0] + w[2]) + (w[1] + w[3])
}

/// Index in the dot path's partial sums of the slot (16 floats) of row
/// `i` of a block and column `jj` of the group of `c` columns from `j0`:
/// each group's slots are row-major, groups one after the other.
fn dot_slot(j0: usize, c: usize, i: usize, jj: usize) -> usize {
    (j0 * DOT_RB + i * c + jj) * 16
}
