//! F32, F16 and BF16 weights times f32 columns (for F16 and BF16 weights
//! already rounded to F16 or BF16), each dot summed in the order ggml's
//! x86 build sums it, so that every output equals llama.cpp's bit for bit.
//! A product of two F16 (or two BF16) values is exact in f32, and ggml
//! multiplies F32 values with a fused multiply-add, so only the order of
//! the additions matters, and ggml has two:
//!
//! - **eight lanes** (tinyBLAS, which ggml's `mul_mat` runs for two or
//!   more columns when `k` is a multiple of 8 and the rows a multiple of
//!   4): value `t` goes to lane `t % 8`, each lane takes its products by
//!   `fma` from the first on, and the lanes are then summed as `((l0 +
//!   l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`;
//! - **the vector dot** (for one column, whatever tinyBLAS declines, and
//!   every expert of a `mul_mat_id`): `ggml_vec_dot_f16` is
//!   `kernels::half_dot`; `ggml_vec_dot_bf16` has the same four
//!   accumulators, its lanes summed as the eight lanes are and an f64
//!   tail; `ggml_vec_dot_f32` half_dot's accumulators and sum and a tail of
//!   its own ([`VectorDot`]).

use ggraph_core::DType;

use crate::kernels::half_dot::{HalfDotRows, half_at, half_dot_rows};
use crate::kernels::isa::Isa;
use std::ops::Range;

use crate::kernels::matmul::operands::{Cols, ProductOf, WeightRows};
use crate::kernels::matmul::row_streaming::FLOAT_STREAMED_ROW_BYTES;
use crate::kernels::parallel::par_ranges;

/// Which of ggml's two orders sums the dots of `m` rows of `k` values
/// times `n` columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    EightLanes,
    VectorDot,
}

pub(crate) fn order(of: ProductOf, m: usize, k: usize, n: usize) -> Order {
    if of == ProductOf::MulMat && n >= 2 && k % 8 == 0 && m % 4 == 0 {
        Order::EightLanes
    } else {
        Order::VectorDot
    }
}

/// Rows per eight-lane tile (ggml's too: `m` is a multiple of it there).
const TILE_ROWS: usize = 4;
/// Most columns per eight-lane tile: with AVX-512, two rows to a register
/// and six columns, twelve accumulators; on AVX2 and below three columns,
/// twelve accumulators in AVX2's sixteen registers.
const TILE_COLS: usize = 6;
/// Row tiles a task takes before the columns move on: 64 rows, which stay
/// in L2 while every column passes over them.
const CHUNK_TILES: usize = 16;
/// Bytes of rows the vector dots take before the columns move on.
const VECTOR_CHUNK_BYTES: usize = 256 << 10;
/// Most rows and columns per vector-dot tile: with AVX-512, two rows and
/// six columns, each dot's four accumulators in two registers (24 of 32);
/// with AVX2 one row and three columns (12 of 16).
const DOT_TILE_ROWS: usize = 2;
const DOT_TILE_COLS: usize = 6;

/// `out[j][i] = dot(a row i, b[j])` for `i < m`: F32, F16 or BF16 rows,
/// columns of F16 and BF16 rows holding values already rounded to F16
/// (BF16).
pub(crate) fn gemm(
    isa: Isa,
    of: ProductOf,
    a: WeightRows,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let n = b.0.len();
    let k = a.k;
    let kernels = Kernels::for_rows(isa, a.dtype, k * a.dtype.type_size());
    let row_bytes = (k * a.dtype.type_size()).max(1);
    match order(of, m, k, n) {
        Order::EightLanes => {
            par_ranges(m / TILE_ROWS, 4, |range| {
                for chunk in range.clone().step_by(CHUNK_TILES) {
                    for j0 in (0..n).step_by(kernels.cols) {
                        let nc = kernels.cols.min(n - j0);
                        let cols: [*const f32; TILE_COLS] =
                            std::array::from_fn(|c| b.0[j0 + c.min(nc - 1)] as *const f32);
                        for t in chunk..(chunk + CHUNK_TILES).min(range.end) {
                            let i0 = t * TILE_ROWS;
                            let rows: [*const u8; TILE_ROWS] =
                                std::array::from_fn(|r| a.row(i0 + r));
                            // SAFETY: rows i0.. hold k values each, the columns
                            // k values; k is a multiple of 8.
                            let dots = unsafe { (kernels.eight_lanes[nc - 1])(rows, cols, k) };
                            for (c, col) in dots.iter().take(nc).enumerate() {
                                for (r, &v) in col.iter().enumerate() {
                                    // SAFETY: output column j0 + c holds m
                                    // values; this task owns rows i0..i0 + 4.
                                    unsafe { *out.0[j0 + c].add(i0 + r) = v };
                                }
                            }
                        }
                    }
                }
            })
        }
        Order::VectorDot => {
            // with several columns (a mul_mat_id's expert), a chunk of
            // rows at a time, which stays in cache while every column
            // passes over it; whole groups of the row kernels' rows, so
            // that no chunk leaves a row to the one-row tail (on 28 KiB
            // rows a chunk of nine had left a ninth of the rows to it)
            let chunk = (VECTOR_CHUNK_BYTES / row_bytes).max(1).next_multiple_of(4);
            par_ranges(m, 16, |range| {
                for c0 in range.clone().step_by(chunk) {
                    let rows = c0..(c0 + chunk).min(range.end);
                    match kernels.dot_tile {
                        Some(tile) if n >= 2 => vector_dot_tiles(tile, a, rows, b, out),
                        _ => {
                            for (&col, &o) in b.0.iter().zip(&out.0) {
                                // SAFETY: the rows and the column hold k
                                // values; the outputs of range are this
                                // task's.
                                unsafe {
                                    (kernels.vector_dot)(
                                        a.row(rows.start),
                                        a.stride,
                                        rows.len(),
                                        col,
                                        k,
                                        o.add(rows.start),
                                    )
                                };
                            }
                        }
                    }
                }
            })
        }
    }
}

/// The vector dots of `rows` with every column of `b`, a tile of rows and
/// columns at a time (each dot summed as the one-column kernel sums it).
fn vector_dot_tiles(
    tile: DotTile,
    a: WeightRows,
    rows: Range<usize>,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let n = b.0.len();
    for j0 in (0..n).step_by(tile.cols) {
        let nc = tile.cols.min(n - j0);
        let cols: [*const f32; DOT_TILE_COLS] =
            std::array::from_fn(|c| b.0[j0 + c.min(nc - 1)] as *const f32);
        for i0 in rows.clone().step_by(tile.rows) {
            let nr = tile.rows.min(rows.end - i0);
            let row: [*const u8; DOT_TILE_ROWS] =
                std::array::from_fn(|r| a.row(i0 + r.min(nr - 1)));
            // SAFETY: the rows and columns hold k values each.
            let dots = unsafe { (tile.kernel)(row, cols, a.k) };
            for (c, col) in dots.iter().take(nc).enumerate() {
                for (r, &v) in col.iter().take(nr).enumerate() {
                    // SAFETY: output column j0 + c holds m values; the
                    // caller's task owns these rows.
                    unsafe { *out.0[j0 + c].add(i0 + r) = v };
                }
            }
        }
    }
}

type EightLanes = unsafe fn(
    [*const u8; TILE_ROWS],
    [*const f32; TILE_COLS],
    usize,
) -> [[f32; TILE_ROWS]; TILE_COLS];

/// Vector dots of up to [`DOT_TILE_ROWS`] rows and [`DOT_TILE_COLS`]
/// columns of `k` values: `out[c][r]`.
type DotTileKernel = unsafe fn(
    [*const u8; DOT_TILE_ROWS],
    [*const f32; DOT_TILE_COLS],
    usize,
) -> [[f32; DOT_TILE_ROWS]; DOT_TILE_COLS];

#[derive(Clone, Copy)]
struct DotTile {
    kernel: DotTileKernel,
    /// The rows and columns `kernel` computes (the rest of its arrays are
    /// copies).
    rows: usize,
    cols: usize,
}

struct Kernels {
    /// The eight-lane tiles by column count: entry `c - 1` computes `c`
    /// columns (where its array holds more, they are copies), up to
    /// `cols`.
    eight_lanes: [EightLanes; TILE_COLS],
    /// Most columns an eight-lane tile computes.
    cols: usize,
    vector_dot: HalfDotRows,
    /// The vector dots of several columns at once, where this instruction
    /// set has a tile.
    dot_tile: Option<DotTile>,
}

impl Kernels {
    /// The kernels for rows of `row_bytes`: rows up to
    /// [`FLOAT_STREAMED_ROW_BYTES`] take the vector dot one row at a time
    /// with AVX2, one sequential stream with no software prefetch (on the
    /// small model's 1-2 KiB rows, rows side by side or prefetched gave
    /// 40% fewer tokens/s; on 8 KiB rows one at a time was 8-40% ahead,
    /// docs/performance.md).
    fn for_rows(isa: Isa, dtype: DType, row_bytes: usize) -> Kernels {
        let kernels = Kernels::new(isa, dtype);
        if row_bytes > FLOAT_STREAMED_ROW_BYTES || isa < Isa::Avx2 {
            return kernels;
        }
        #[cfg(target_arch = "x86_64")]
        let vector_dot = match dtype {
            DType::BF16 => x86::vector_dot_rows::<Bf16>,
            DType::F32 => x86::vector_dot_rows::<F32>,
            _ => x86::f16_rows_one_by_one as HalfDotRows,
        };
        #[cfg(not(target_arch = "x86_64"))]
        let vector_dot = kernels.vector_dot;
        Kernels {
            vector_dot,
            ..kernels
        }
    }

    /// The kernels for `dtype` (F32, F16 or BF16) rows.
    fn new(isa: Isa, dtype: DType) -> Kernels {
        // no column computed for nothing: a tile of n columns where fewer
        // than a full tile are left (with AVX-512 a tile of six for four
        // columns had left a third of its multiply-adds unused)
        fn of<W: Weight>(isa: Isa) -> ([EightLanes; TILE_COLS], usize) {
            match isa {
                #[cfg(target_arch = "x86_64")]
                isa if isa >= Isa::Avx512 => (
                    [
                        x86::eight_lanes_avx512::<W, 1>,
                        x86::eight_lanes_avx512::<W, 2>,
                        x86::eight_lanes_avx512::<W, 3>,
                        x86::eight_lanes_avx512::<W, 4>,
                        x86::eight_lanes_avx512::<W, 5>,
                        x86::eight_lanes_avx512::<W, 6>,
                    ],
                    6,
                ),
                #[cfg(target_arch = "x86_64")]
                isa if isa >= Isa::Avx2 => {
                    let three = x86::eight_lanes::<W, 3> as EightLanes;
                    (
                        [
                            x86::eight_lanes::<W, 1>,
                            x86::eight_lanes::<W, 2>,
                            three,
                            three,
                            three,
                            three,
                        ],
                        3,
                    )
                }
                _ => ([eight_lanes_portable::<W> as EightLanes; TILE_COLS], 3),
            }
        }
        let ((eight_lanes, cols), vector_dot, dot_tile) = match dtype {
            DType::BF16 => (
                of::<Bf16>(isa),
                vector_dot_rows::<Bf16>(isa),
                dot_tile::<Bf16>(isa),
            ),
            DType::F32 => (
                of::<F32>(isa),
                vector_dot_rows::<F32>(isa),
                dot_tile::<F32>(isa),
            ),
            _ => (of::<F16>(isa), half_dot_rows(isa), dot_tile::<F16>(isa)),
        };
        Kernels {
            eight_lanes,
            cols,
            vector_dot,
            dot_tile,
        }
    }
}

/// A weight type of this module: how its values load.
trait Weight {
    /// Bytes per value.
    const BYTES: usize;

    /// Value `i` of `row` as f32.
    ///
    /// # Safety
    /// Value `i` of the row exists.
    unsafe fn at(row: *const u8, i: usize) -> f32;

    /// Eight values at `p` as f32.
    ///
    /// # Safety
    /// AVX2 and F16C; `p` holds eight values.
    #[cfg(target_arch = "x86_64")]
    unsafe fn eight(p: *const u8) -> std::arch::x86_64::__m256;

    /// Eight values at `low` (the register's low half) and eight at
    /// `high`, as f32.
    ///
    /// # Safety
    /// AVX-512 F, AVX2 and F16C; `low` and `high` hold eight values each.
    #[cfg(target_arch = "x86_64")]
    unsafe fn two_eights(low: *const u8, high: *const u8) -> std::arch::x86_64::__m512;

    /// Sixteen values at `p` as f32.
    ///
    /// # Safety
    /// AVX-512 F, AVX2 and F16C; `p` holds sixteen values.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn sixteen(p: *const u8) -> std::arch::x86_64::__m512 {
        // SAFETY: caller's contract.
        unsafe { Self::two_eights(p, p.add(8 * Self::BYTES)) }
    }
}

struct F16;
struct Bf16;
struct F32;

impl Weight for F16 {
    const BYTES: usize = 2;

    #[inline(always)]
    unsafe fn at(row: *const u8, i: usize) -> f32 {
        // SAFETY: caller's contract.
        unsafe { half_at(row, i) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn eight(p: *const u8) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: caller's contract.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn two_eights(low: *const u8, high: *const u8) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: caller's contract.
        unsafe { _mm512_cvtph_ps(halves(low, high)) }
    }
}

impl Weight for Bf16 {
    const BYTES: usize = 2;

    #[inline(always)]
    unsafe fn at(row: *const u8, i: usize) -> f32 {
        // SAFETY: caller's contract.
        let bits = unsafe { (row as *const u16).add(i).read_unaligned() };
        f32::from_bits((bits as u32) << 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn eight(p: *const u8) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: caller's contract.
        unsafe {
            let h = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn two_eights(low: *const u8, high: *const u8) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: caller's contract.
        unsafe {
            let both = halves(low, high);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(both)))
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn sixteen(p: *const u8) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: caller's contract.
        unsafe {
            let h = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        }
    }
}

impl Weight for F32 {
    const BYTES: usize = 4;

    #[inline(always)]
    unsafe fn at(row: *const u8, i: usize) -> f32 {
        // SAFETY: caller's contract.
        unsafe { (row as *const f32).add(i).read_unaligned() }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn eight(p: *const u8) -> std::arch::x86_64::__m256 {
        // SAFETY: caller's contract.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p as *const f32) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn two_eights(low: *const u8, high: *const u8) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: caller's contract.
        unsafe {
            let low = _mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(low as *const f32)));
            let high = _mm256_castps_pd(_mm256_loadu_ps(high as *const f32));
            _mm512_castpd_ps(_mm512_insertf64x4::<1>(low, high))
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn sixteen(p: *const u8) -> std::arch::x86_64::__m512 {
        // SAFETY: caller's contract.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p as *const f32) }
    }
}

/// Sixteen 16-bit values: eight at `low`, eight at `high`.
///
/// # Safety
/// AVX2; `low` and `high` hold sixteen bytes each.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn halves(low: *const u8, high: *const u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: caller's contract.
    unsafe {
        let low = _mm_loadu_si128(low as *const __m128i);
        let high = _mm_loadu_si128(high as *const __m128i);
        _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(low), high)
    }
}

/// A weight type whose vector dot this module computes: ggml's four
/// accumulators of eight lanes over the first `k - k % 32` products
/// (value `t` in accumulator `t % 32 / 8`, lane `t % 8`) by `fma`, folded
/// as `(a0 + a2) + (a1 + a3)`; each type then sums the eight lanes and
/// adds the remaining products its own way.
trait VectorDot: Weight {
    /// The dot from the folded lanes `s` and the products of values
    /// `np..k`.
    ///
    /// # Safety
    /// The row and the column hold `k` values.
    unsafe fn finish(s: [f32; 8], row: *const u8, col: *const f32, np: usize, k: usize) -> f32;
}

impl VectorDot for Bf16 {
    /// `ggml_vec_dot_bf16` on x86: the lanes summed as the eight lanes
    /// are ([`hsum8`]), then the remaining products added in f64.
    #[inline(always)]
    unsafe fn finish(s: [f32; 8], row: *const u8, col: *const f32, np: usize, k: usize) -> f32 {
        let mut sum = hsum8(s) as f64;
        for v in np..k {
            // SAFETY: v < k.
            sum += unsafe { Bf16::at(row, v) * *col.add(v) } as f64;
        }
        sum as f32
    }
}

impl VectorDot for F16 {
    /// `ggml_vec_dot_f16` (`kernels::half_dot`): the lanes summed as
    /// `((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7))`, then the
    /// remaining products added in f64.
    #[inline(always)]
    unsafe fn finish(s: [f32; 8], row: *const u8, col: *const f32, np: usize, k: usize) -> f32 {
        let mut sum = (((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))) as f64;
        for v in np..k {
            // SAFETY: v < k.
            sum += unsafe { F16::at(row, v) * *col.add(v) } as f64;
        }
        sum as f32
    }
}

impl VectorDot for F32 {
    /// `ggml_vec_dot_f32` as llama.cpp's x86 build computes it: the lanes
    /// summed as `((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7))`, then
    /// the remaining products one by one in f32. Its compiler multiplied
    /// those in fours, so the first `r - r % 4` of the `r` products are
    /// rounded before they are added, and the last `r % 4` are fused.
    #[inline(always)]
    unsafe fn finish(s: [f32; 8], row: *const u8, col: *const f32, np: usize, k: usize) -> f32 {
        let mut sum = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
        let fused = np + (k - np) / 4 * 4;
        for v in np..k {
            // SAFETY: v < k.
            let (w, x) = unsafe { (F32::at(row, v), *col.add(v)) };
            sum = if v < fused {
                sum + w * x
            } else {
                w.mul_add(x, sum)
            };
        }
        sum
    }
}

/// The vector-dot tile of `W` rows for this instruction set.
fn dot_tile<W: VectorDot>(isa: Isa) -> Option<DotTile> {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return Some(DotTile {
            kernel: x86::dot_tile_avx512::<W>,
            rows: 2,
            cols: 6,
        });
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return Some(DotTile {
            kernel: x86::dot_tile_avx2::<W>,
            rows: 1,
            cols: 3,
        });
    }
    let _ = isa;
    None
}

/// `out[i]` = `ggml_vec_dot_f32` of row `i` of `rows` with `col` (the
/// rows `col.len()` values each, one per `out` value), in the order
/// llama.cpp's x86 build sums it ([`VectorDot`] for F32), on `isa`.
pub(crate) fn vec_dot_f32_rows(isa: Isa, rows: &[f32], col: &[f32], out: &mut [f32]) {
    let k = col.len();
    assert_eq!(
        rows.len(),
        out.len() * k,
        "rows of {k} values, one per output"
    );
    let dots = vector_dot_rows::<F32>(isa);
    // SAFETY: `rows` holds out.len() rows of k f32 (checked above), `col`
    // k f32, `out` out.len(); `vector_dot_rows` picked a kernel `isa` runs.
    unsafe {
        dots(
            rows.as_ptr() as *const u8,
            std::mem::size_of_val(col),
            out.len(),
            col.as_ptr(),
            k,
            out.as_mut_ptr(),
        )
    }
}

/// The vector dots of `W` rows, the kernel of this instruction set.
fn vector_dot_rows<W: VectorDot>(isa: Isa) -> HalfDotRows {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return x86::vector_dot_rows_avx512::<W>;
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return x86::vector_dot_rows::<W>;
    }
    let _ = isa;
    vector_dot_rows_portable::<W>
}

/// `out[i]` = the vector dot (see [`VectorDot`]) of row `i` of `count`
/// rows `stride` bytes apart from `first` with `col`.
///
/// # Safety
/// As for [`HalfDotRows`], the rows of `W`.
unsafe fn vector_dot_rows_portable<W: VectorDot>(
    first: *const u8,
    stride: usize,
    count: usize,
    col: *const f32,
    k: usize,
    out: *mut f32,
) {
    let np = k & !31;
    for i in 0..count {
        let row = first.wrapping_add(i * stride);
        let mut acc = [[0f32; 8]; 4];
        for v in 0..np {
            // SAFETY: v < k.
            let (w, x) = unsafe { (W::at(row, v), *col.add(v)) };
            let lane = &mut acc[v % 32 / 8][v % 8];
            *lane = w.mul_add(x, *lane);
        }
        let s = std::array::from_fn(|t| (acc[0][t] + acc[2][t]) + (acc[1][t] + acc[3][t]));
        // SAFETY: out holds count values; the row and column k.
        unsafe { *out.add(i) = W::finish(s, row, col, np, k) };
    }
}

fn hsum8(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// # Safety
/// Rows hold `k` values, columns `k` f32; `k % 8 == 0`.
unsafe fn eight_lanes_portable<W: Weight>(
    rows: [*const u8; TILE_ROWS],
    cols: [*const f32; TILE_COLS],
    k: usize,
) -> [[f32; TILE_ROWS]; TILE_COLS] {
    std::array::from_fn(|c| {
        std::array::from_fn(|r| {
            if c >= 3 {
                return 0.0;
            }
            let mut lanes = [0f32; 8];
            for l in (0..k).step_by(8) {
                for (t, lane) in lanes.iter_mut().enumerate() {
                    // SAFETY: l + t < k.
                    *lane = unsafe { W::at(rows[r], l + t).mul_add(*cols[c].add(l + t), *lane) };
                }
            }
            hsum8(lanes)
        })
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{DOT_TILE_COLS, DOT_TILE_ROWS, TILE_COLS, TILE_ROWS, VectorDot, Weight};
    use crate::kernels::half_dot::half_dot_avx2;
    use crate::kernels::math::{hsum256, row_pair_sums};

    /// The first `C` columns (of at most three).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; as `eight_lanes_portable`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn eight_lanes<W: Weight, const C: usize>(
        rows: [*const u8; TILE_ROWS],
        cols: [*const f32; TILE_COLS],
        k: usize,
    ) -> [[f32; TILE_ROWS]; TILE_COLS] {
        let mut acc = [[_mm256_setzero_ps(); TILE_ROWS]; C];
        for l in (0..k).step_by(8) {
            // SAFETY: values l..l + 8 of every row and column exist.
            unsafe {
                let av: [__m256; TILE_ROWS] =
                    std::array::from_fn(|r| W::eight(rows[r].add(W::BYTES * l)));
                for (c, acc) in acc.iter_mut().enumerate() {
                    let bv = _mm256_loadu_ps(cols[c].add(l));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(av[r], bv, *acc);
                    }
                }
            }
        }
        let mut out = [[0f32; TILE_ROWS]; TILE_COLS];
        for (o, col) in out.iter_mut().zip(acc) {
            // SAFETY: AVX2 is enabled here.
            *o = col.map(|v| unsafe { hsum256(v) });
        }
        out
    }

    /// As [`eight_lanes`], up to six columns, with two rows to a 512-bit
    /// register (the low eight lanes one row's, the high eight the
    /// next's).
    ///
    /// # Safety
    /// AVX-512 F, AVX2, FMA and F16C; as `eight_lanes_portable`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn eight_lanes_avx512<W: Weight, const C: usize>(
        rows: [*const u8; TILE_ROWS],
        cols: [*const f32; TILE_COLS],
        k: usize,
    ) -> [[f32; TILE_ROWS]; TILE_COLS] {
        let mut acc = [[_mm512_setzero_ps(); 2]; C];
        for l in (0..k).step_by(8) {
            // SAFETY: values l..l + 8 of every row and column exist.
            unsafe {
                let pair = |r: usize| {
                    W::two_eights(rows[r].add(W::BYTES * l), rows[r + 1].add(W::BYTES * l))
                };
                let av = [pair(0), pair(2)];
                for (c, acc) in acc.iter_mut().enumerate() {
                    let bv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(
                        cols[c].add(l) as *const f64,
                    )));
                    for (a, x) in acc.iter_mut().zip(av) {
                        *a = _mm512_fmadd_ps(x, bv, *a);
                    }
                }
            }
        }
        let mut out = [[0f32; TILE_ROWS]; TILE_COLS];
        // SAFETY: AVX-512 F is enabled here.
        out[..C].copy_from_slice(&unsafe { row_pair_sums(acc) });
        out
    }

    /// As `vector_dot_rows_portable`, a row at a time with AVX2.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; as `HalfDotRows`, the rows of `W`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn vector_dot_rows<W: VectorDot>(
        first: *const u8,
        stride: usize,
        count: usize,
        col: *const f32,
        k: usize,
        out: *mut f32,
    ) {
        let np = k & !31;
        for i in 0..count {
            let row = first.wrapping_add(i * stride);
            let mut acc = [_mm256_setzero_ps(); 4];
            for v in (0..np).step_by(32) {
                for (q, acc) in acc.iter_mut().enumerate() {
                    let at = v + 8 * q;
                    // SAFETY: values at..at + 8 exist.
                    unsafe {
                        let w = W::eight(row.add(W::BYTES * at));
                        *acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(col.add(at)), *acc);
                    }
                }
            }
            let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
            // SAFETY: the row and column hold k values, out count.
            unsafe { *out.add(i) = W::finish(lanes(s), row, col, np, k) };
        }
    }

    /// `ggml_vec_dot_f16` (`kernels::half_dot`) of each row in turn.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; as `HalfDotRows`, the rows F16.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f16_rows_one_by_one(
        first: *const u8,
        stride: usize,
        count: usize,
        col: *const f32,
        k: usize,
        out: *mut f32,
    ) {
        for i in 0..count {
            // SAFETY: row i holds k values, out count.
            unsafe { *out.add(i) = half_dot_avx2(first.wrapping_add(i * stride), col, k) };
        }
    }

    /// As [`vector_dot_rows`], four rows at a time, each row's four
    /// accumulators in two 512-bit registers (`a0 | a1` and `a2 | a3`, so
    /// that their sum's halves are `a0 + a2` and `a1 + a3`).
    ///
    /// # Safety
    /// AVX-512 F, AVX2, FMA and F16C; as `HalfDotRows`, the rows of `W`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn vector_dot_rows_avx512<W: VectorDot>(
        first: *const u8,
        stride: usize,
        count: usize,
        col: *const f32,
        k: usize,
        out: *mut f32,
    ) {
        const R: usize = 4;
        let np = k & !31;
        let mut i = 0;
        while i < count {
            let rows = (count - i).min(R);
            let row: [*const u8; R] =
                std::array::from_fn(|r| first.wrapping_add((i + r.min(rows - 1)) * stride));
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            for v in (0..np).step_by(32) {
                // SAFETY: values v..v + 32 of the rows and the column exist.
                unsafe {
                    let x = [
                        _mm512_loadu_ps(col.add(v)),
                        _mm512_loadu_ps(col.add(v + 16)),
                    ];
                    for (r, acc) in acc.iter_mut().enumerate() {
                        for (h, a) in acc.iter_mut().enumerate() {
                            let w = W::sixteen(row[r].add(W::BYTES * (v + 16 * h)));
                            *a = _mm512_fmadd_ps(w, x[h], *a);
                        }
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows) {
                let s = _mm512_add_ps(acc[0], acc[1]);
                let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
                let s = _mm256_add_ps(_mm512_castps512_ps256(s), high);
                // SAFETY: the row and column hold k values, out count.
                unsafe { *out.add(i + r) = W::finish(lanes(s), row[r], col, np, k) };
            }
            i += rows;
        }
    }

    /// The vector dots (see [`VectorDot`]) of two rows and six columns,
    /// each dot's four accumulators in two 512-bit registers as in
    /// [`vector_dot_rows_avx512`].
    ///
    /// # Safety
    /// AVX-512 F, AVX2, FMA and F16C; the rows and columns hold `k` values.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn dot_tile_avx512<W: VectorDot>(
        rows: [*const u8; DOT_TILE_ROWS],
        cols: [*const f32; DOT_TILE_COLS],
        k: usize,
    ) -> [[f32; DOT_TILE_ROWS]; DOT_TILE_COLS] {
        let np = k & !31;
        // acc[h][c][r]: values v + 16h.. of each 32
        let mut acc = [[[_mm512_setzero_ps(); DOT_TILE_ROWS]; DOT_TILE_COLS]; 2];
        for v in (0..np).step_by(32) {
            for (h, acc) in acc.iter_mut().enumerate() {
                let at = v + 16 * h;
                // SAFETY: values at..at + 16 of the rows and columns exist.
                unsafe {
                    let w: [__m512; DOT_TILE_ROWS] =
                        std::array::from_fn(|r| W::sixteen(rows[r].add(W::BYTES * at)));
                    for (c, acc) in acc.iter_mut().enumerate() {
                        let x = _mm512_loadu_ps(cols[c].add(at));
                        for (a, w) in acc.iter_mut().zip(w) {
                            *a = _mm512_fmadd_ps(w, x, *a);
                        }
                    }
                }
            }
        }
        // (a0 + a2) + (a1 + a3), a0 | a1 and a2 | a3 being the halves
        let [low, high] = acc;
        let mut folded = [[_mm256_setzero_ps(); DOT_TILE_ROWS]; DOT_TILE_COLS];
        for ((f, low), high) in folded.iter_mut().zip(low).zip(high) {
            for ((f, low), high) in f.iter_mut().zip(low).zip(high) {
                let s = _mm512_add_ps(low, high);
                let top = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
                *f = _mm256_add_ps(_mm512_castps512_ps256(s), top);
            }
        }
        let mut out = [[0f32; DOT_TILE_ROWS]; DOT_TILE_COLS];
        for (c, (out, folded)) in out.iter_mut().zip(folded).enumerate() {
            for (r, (out, s)) in out.iter_mut().zip(folded).enumerate() {
                // SAFETY: the row and column hold k values.
                *out = unsafe { W::finish(lanes(s), rows[r], cols[c], np, k) };
            }
        }
        out
    }

    /// As [`dot_tile_avx512`], one row and three columns, each dot's four
    /// accumulators in four 256-bit registers as in [`vector_dot_rows`].
    ///
    /// # Safety
    /// AVX2, FMA and F16C; the rows and columns hold `k` values.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_tile_avx2<W: VectorDot>(
        rows: [*const u8; DOT_TILE_ROWS],
        cols: [*const f32; DOT_TILE_COLS],
        k: usize,
    ) -> [[f32; DOT_TILE_ROWS]; DOT_TILE_COLS] {
        const C: usize = 3;
        let np = k & !31;
        // acc[q][c]: values v + 8q.. of each 32
        let mut acc = [[_mm256_setzero_ps(); C]; 4];
        for v in (0..np).step_by(32) {
            for (q, acc) in acc.iter_mut().enumerate() {
                let at = v + 8 * q;
                // SAFETY: values at..at + 8 of the row and columns exist.
                unsafe {
                    let w = W::eight(rows[0].add(W::BYTES * at));
                    for (c, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(cols[c].add(at)), *a);
                    }
                }
            }
        }
        let [a0, a1, a2, a3] = acc;
        let mut out = [[0f32; DOT_TILE_ROWS]; DOT_TILE_COLS];
        for c in 0..C {
            let s = _mm256_add_ps(_mm256_add_ps(a0[c], a2[c]), _mm256_add_ps(a1[c], a3[c]));
            // SAFETY: the row and column hold k values.
            out[c][0] = unsafe { W::finish(lanes(s), rows[0], cols[c], np, k) };
        }
        out
    }

    /// The eight lanes of `v`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn lanes(v: __m256) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: out holds eight values.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggraph_core::quant::{f16_to_f32, f32_to_f16};

    #[test]
    fn ggml_picks_eight_lanes_only_for_tinyblas_shapes_of_a_mul_mat() {
        let mm = ProductOf::MulMat;
        assert_eq!(order(mm, 64, 64, 2), Order::EightLanes);
        assert_eq!(order(mm, 64, 64, 1), Order::VectorDot);
        assert_eq!(order(mm, 66, 64, 2), Order::VectorDot);
        assert_eq!(order(mm, 64, 60, 2), Order::VectorDot);
        // mul_mat_id's experts: vec_dot a column at a time
        assert_eq!(order(ProductOf::MulMatId, 64, 64, 16), Order::VectorDot);
        // columns that are not one contiguous tensor: tinyBLAS declines
        let strided = ProductOf::StridedMulMat;
        assert_eq!(order(strided, 64, 64, 16), Order::VectorDot);
    }

    /// Values whose sums round differently in every order, so that a
    /// kernel that sums in another order than its portable twin fails;
    /// exact in F16 where `half`.
    fn values(n: usize, seed: u32, half: bool) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let v = ((s >> 8) as f32 / (1 << 24) as f32 - 0.5) * 2f32.powi((s % 13) as i32);
                if half { f16_to_f32(f32_to_f16(v)) } else { v }
            })
            .collect()
    }

    /// A row of `k` values of `dtype` (F32, F16 or BF16) as bytes.
    fn row_bytes(dtype: DType, k: usize, seed: u32) -> Vec<u8> {
        let v = values(k, seed, dtype != DType::F32);
        match dtype {
            DType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            DType::BF16 => v
                .iter()
                .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
                .collect(),
            _ => v
                .iter()
                .flat_map(|&x| f32_to_f16(x).to_le_bytes())
                .collect(),
        }
    }

    const TYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    #[test]
    fn the_eight_lane_kernels_sum_as_the_portable_one() {
        for level in crate::kernels::isa::all_supported() {
            for dtype in TYPES {
                let kernels = Kernels::new(level, dtype);
                let portable = Kernels::new(Isa::Portable, dtype);
                for k in [8, 24, 32, 64, 72, 200, 256] {
                    let rows: Vec<Vec<u8>> = (0..TILE_ROWS)
                        .map(|r| row_bytes(dtype, k, r as u32))
                        .collect();
                    let cols: Vec<Vec<f32>> = (0..TILE_COLS)
                        .map(|c| values(k, 100 + c as u32, dtype != DType::F32))
                        .collect();
                    let rp: [*const u8; TILE_ROWS] = std::array::from_fn(|r| rows[r].as_ptr());
                    let cp: [*const f32; TILE_COLS] = std::array::from_fn(|c| cols[c].as_ptr());
                    // every tile width: each computes its columns
                    for (nc, tile) in kernels.eight_lanes.iter().enumerate().take(kernels.cols) {
                        // SAFETY: k values each, k a multiple of 8.
                        let got = unsafe { tile(rp, cp, k) };
                        for (c, got) in got.iter().enumerate().take(nc + 1) {
                            // the portable kernel's first column, column c
                            let one: [*const f32; TILE_COLS] = [cp[c]; TILE_COLS];
                            // SAFETY: as above.
                            let want = unsafe { (portable.eight_lanes[0])(rp, one, k) }[0];
                            assert_eq!(
                                got.map(f32::to_bits),
                                want.map(f32::to_bits),
                                "{} {dtype:?} k {k} column {c} of {}",
                                level.name(),
                                nc + 1
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_vector_dots_sum_as_the_portable_ones() {
        for level in crate::kernels::isa::all_supported() {
            for dtype in TYPES {
                // the row kernels, and the one-row kernels of the rows
                // that stream one at a time
                let (got, one_row, want) = (
                    Kernels::new(level, dtype),
                    Kernels::for_rows(level, dtype, 0),
                    Kernels::new(Isa::Portable, dtype),
                );
                // every tail length from 0 to 35 past the fours of 32,
                // rows in fours and not, and rows long enough (over 4 KiB)
                // to go four side by side
                for k in (0..=35).chain([40, 64, 100, 256, 1000, 1100, 2100]) {
                    for count in [1, 3, 5, 9] {
                        let rows = row_bytes(dtype, count * k, 5);
                        // F16 and BF16 weights meet columns rounded alike
                        let col = values(k, 9, dtype != DType::F32);
                        let run = |f: HalfDotRows| {
                            let mut out = vec![0f32; count];
                            let stride = k * dtype.type_size();
                            // SAFETY: count rows of k values, the column k.
                            unsafe {
                                f(
                                    rows.as_ptr(),
                                    stride,
                                    count,
                                    col.as_ptr(),
                                    k,
                                    out.as_mut_ptr(),
                                )
                            };
                            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                        };
                        for kernel in [got.vector_dot, one_row.vector_dot] {
                            assert_eq!(
                                run(kernel),
                                run(want.vector_dot),
                                "{} {dtype:?} k {k} rows {count}",
                                level.name()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_vector_dot_tiles_sum_each_dot_as_the_one_column_kernel() {
        for level in crate::kernels::isa::all_supported() {
            for dtype in TYPES {
                let kernels = Kernels::new(level, dtype);
                let Some(tile) = kernels.dot_tile else {
                    continue;
                };
                for k in (0..=35).chain([64, 100, 1000]) {
                    let rows: Vec<Vec<u8>> = (0..DOT_TILE_ROWS)
                        .map(|r| row_bytes(dtype, k, 20 + r as u32))
                        .collect();
                    let cols: Vec<Vec<f32>> = (0..DOT_TILE_COLS)
                        .map(|c| values(k, 40 + c as u32, dtype != DType::F32))
                        .collect();
                    let rp: [*const u8; DOT_TILE_ROWS] = std::array::from_fn(|r| rows[r].as_ptr());
                    let cp: [*const f32; DOT_TILE_COLS] = std::array::from_fn(|c| cols[c].as_ptr());
                    // SAFETY: rows and columns of k values.
                    let got = unsafe { (tile.kernel)(rp, cp, k) };
                    for c in 0..tile.cols {
                        for r in 0..tile.rows {
                            let mut want = 0f32;
                            // SAFETY: one row of k values, the column k.
                            unsafe { (kernels.vector_dot)(rp[r], 0, 1, cp[c], k, &mut want) };
                            assert_eq!(
                                got[c][r].to_bits(),
                                want.to_bits(),
                                "{} {dtype:?} k {k} row {r} column {c}",
                                level.name()
                            );
                        }
                    }
                }
            }
        }
    }

    /// The F32 vector dot restated from ggml's description: a sum that
    /// rounds each step is the sum of llama.cpp's build.
    #[test]
    fn the_f32_vector_dot_fuses_only_the_last_products_past_the_fours() {
        // k = 32 + 6: values 32..36 rounded then added, 36 and 37 fused
        let k = 38;
        let row: Vec<f32> = (0..k).map(|i| 1.0 + i as f32 / 3.0).collect();
        let col: Vec<f32> = (0..k).map(|i| 1.0 - i as f32 / 7.0).collect();
        let mut acc = [[0f32; 8]; 4];
        for v in 0..32 {
            acc[v / 8][v % 8] = row[v].mul_add(col[v], acc[v / 8][v % 8]);
        }
        let s: [f32; 8] =
            std::array::from_fn(|t| (acc[0][t] + acc[2][t]) + (acc[1][t] + acc[3][t]));
        let mut want = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
        for v in 32..36 {
            want += row[v] * col[v];
        }
        for v in 36..38 {
            want = row[v].mul_add(col[v], want);
        }
        let bytes: Vec<u8> = row.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut got = 0f32;
        // SAFETY: one row of k values, the column k.
        unsafe {
            vector_dot_rows_portable::<F32>(bytes.as_ptr(), 4 * k, 1, col.as_ptr(), k, &mut got)
        };
        assert_eq!(got.to_bits(), want.to_bits());
    }
}
