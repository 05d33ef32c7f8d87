//! F16 (and BF16) weights times columns already rounded to F16 (BF16),
//! each dot summed in the order ggml's x86 build sums it, so that every
//! output equals llama.cpp's bit for bit. A product of two F16 (or two
//! BF16) values is exact in f32, so only the order of the additions
//! matters, and ggml has two:
//!
//! - **eight lanes** (tinyBLAS, which ggml runs for two or more columns
//!   when `k` is a multiple of 8 and the rows a multiple of 4): value `t`
//!   goes to lane `t % 8`, each lane adds its products from the first on,
//!   and the lanes are then summed as `((l0 + l4) + (l2 + l6)) + ((l1 +
//!   l5) + (l3 + l7))`;
//! - **the vector dot** (for one column and whatever tinyBLAS declines):
//!   `ggml_vec_dot_f16` is `kernels::half_dot`; `ggml_vec_dot_bf16` has the
//!   same four accumulators and f64 tail, its lanes summed as the eight
//!   lanes are ([`bf16_dot_rows`]).

use ggraph_core::DType;

use crate::kernels::half_dot::{HalfDotRows, half_at, half_dot_rows};
use crate::kernels::isa::Isa;
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::parallel::par_ranges;

/// Which of ggml's two orders sums the dots of `m` rows of `k` values
/// times `n` columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    EightLanes,
    VectorDot,
}

pub(crate) fn order(m: usize, k: usize, n: usize) -> Order {
    if n >= 2 && k % 8 == 0 && m % 4 == 0 {
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

/// `out[j][i] = dot(a row i, b[j])` for `i < m`: F16 (BF16) rows, columns
/// holding values already rounded to F16 (BF16).
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    let kernels = Kernels::new(isa, a.dtype == DType::BF16);
    match order(m, k, n) {
        Order::EightLanes => par_ranges(m / TILE_ROWS, 4, |range| {
            for chunk in range.clone().step_by(CHUNK_TILES) {
                for j0 in (0..n).step_by(kernels.cols) {
                    let nc = kernels.cols.min(n - j0);
                    let cols: [*const f32; TILE_COLS] =
                        std::array::from_fn(|c| b.0[j0 + c.min(nc - 1)] as *const f32);
                    for t in chunk..(chunk + CHUNK_TILES).min(range.end) {
                        let i0 = t * TILE_ROWS;
                        let rows: [*const u8; TILE_ROWS] = std::array::from_fn(|r| a.row(i0 + r));
                        // SAFETY: rows i0.. hold k values each, the columns
                        // k values; k is a multiple of 8.
                        let dots = unsafe { (kernels.eight_lanes)(rows, cols, k) };
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
        }),
        Order::VectorDot => par_ranges(m, 16, |range| {
            for (&col, &o) in b.0.iter().zip(&out.0) {
                // SAFETY: the rows of range and the column hold k values;
                // the outputs of range are this task's.
                unsafe {
                    (kernels.vector_dot)(
                        a.row(range.start),
                        a.stride,
                        range.len(),
                        col,
                        k,
                        o.add(range.start),
                    )
                };
            }
        }),
    }
}

type EightLanes = unsafe fn(
    [*const u8; TILE_ROWS],
    [*const f32; TILE_COLS],
    usize,
) -> [[f32; TILE_ROWS]; TILE_COLS];

struct Kernels {
    eight_lanes: EightLanes,
    /// Columns `eight_lanes` computes (the rest of its array are copies).
    cols: usize,
    vector_dot: HalfDotRows,
}

impl Kernels {
    fn new(isa: Isa, bf16: bool) -> Kernels {
        macro_rules! of {
            ($bf:literal) => {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    isa if isa >= Isa::Avx512 => (x86::eight_lanes_avx512::<$bf> as EightLanes, 6),
                    #[cfg(target_arch = "x86_64")]
                    isa if isa >= Isa::Avx2 => (x86::eight_lanes::<$bf> as EightLanes, 3),
                    _ => (eight_lanes_portable::<$bf> as EightLanes, 3),
                }
            };
        }
        let (eight_lanes, cols) = if bf16 { of!(true) } else { of!(false) };
        Kernels {
            eight_lanes,
            cols,
            vector_dot: if bf16 {
                bf16_dot_rows(isa)
            } else {
                half_dot_rows(isa)
            },
        }
    }
}

/// Value `i` of a row of F16 (BF16 where `BF`) values, as f32.
///
/// # Safety
/// Value `i` of the row exists.
#[inline(always)]
unsafe fn weight_at<const BF: bool>(row: *const u8, i: usize) -> f32 {
    // SAFETY: caller's contract.
    unsafe {
        if BF {
            f32::from_bits(((row as *const u16).add(i).read_unaligned() as u32) << 16)
        } else {
            half_at(row, i)
        }
    }
}

/// `ggml_vec_dot_bf16`'s dots of `count` rows `stride` bytes apart from
/// `first` with `col`, the kernel of this instruction set.
fn bf16_dot_rows(isa: Isa) -> HalfDotRows {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return x86::bf16_dot_rows_avx512;
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return x86::bf16_dot_rows;
    }
    let _ = isa;
    bf16_dot_rows_portable
}

/// `ggml_vec_dot_bf16` on x86: the first `k - k % 32` products in four
/// accumulators of eight lanes (value `t` in accumulator `t % 32 / 8`,
/// lane `t % 8`), folded as `(a0 + a2) + (a1 + a3)`, its lanes summed as
/// the eight lanes are, then the remaining products added in f64.
///
/// # Safety
/// As for [`HalfDotRows`], the rows BF16.
unsafe fn bf16_dot_rows_portable(
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
            let p = unsafe { weight_at::<true>(row, v) * *col.add(v) };
            acc[v % 32 / 8][v % 8] += p;
        }
        let s: [f32; 8] =
            std::array::from_fn(|t| (acc[0][t] + acc[2][t]) + (acc[1][t] + acc[3][t]));
        let mut sum = hsum8(s) as f64;
        for v in np..k {
            // SAFETY: v < k.
            sum += unsafe { weight_at::<true>(row, v) * *col.add(v) } as f64;
        }
        // SAFETY: out holds count values.
        unsafe { *out.add(i) = sum as f32 };
    }
}

fn hsum8(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// # Safety
/// Rows hold `k` F16 (BF16 where `BF`) values, columns `k` f32; `k % 8 ==
/// 0`.
unsafe fn eight_lanes_portable<const BF: bool>(
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
                    *lane += unsafe { weight_at::<BF>(rows[r], l + t) * *cols[c].add(l + t) };
                }
            }
            hsum8(lanes)
        })
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{TILE_COLS, TILE_ROWS};
    use crate::kernels::math::{hsum256, row_pair_sums};

    /// Eight F16 (BF16 where `BF`) values at `p` as f32.
    ///
    /// # Safety
    /// AVX2 and F16C; `p` holds eight values.
    #[inline(always)]
    unsafe fn eight<const BF: bool>(p: *const u8) -> __m256 {
        // SAFETY: caller's contract.
        unsafe {
            let h = _mm_loadu_si128(p as *const __m128i);
            if BF {
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
            } else {
                _mm256_cvtph_ps(h)
            }
        }
    }

    /// # Safety
    /// AVX2, FMA and F16C; as `eight_lanes_portable`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn eight_lanes<const BF: bool>(
        rows: [*const u8; TILE_ROWS],
        cols: [*const f32; TILE_COLS],
        k: usize,
    ) -> [[f32; TILE_ROWS]; TILE_COLS] {
        let mut acc = [[_mm256_setzero_ps(); TILE_ROWS]; 3];
        for l in (0..k).step_by(8) {
            // SAFETY: values l..l + 8 of every row and column exist.
            unsafe {
                let av: [__m256; TILE_ROWS] =
                    std::array::from_fn(|r| eight::<BF>(rows[r].add(2 * l)));
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

    /// As [`eight_lanes`], six columns, with two rows to a 512-bit register
    /// (the low eight lanes one row's, the high eight the next's).
    ///
    /// # Safety
    /// AVX-512 F, AVX2, FMA and F16C; as `eight_lanes_portable`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn eight_lanes_avx512<const BF: bool>(
        rows: [*const u8; TILE_ROWS],
        cols: [*const f32; TILE_COLS],
        k: usize,
    ) -> [[f32; TILE_ROWS]; TILE_COLS] {
        let mut acc = [[_mm512_setzero_ps(); 2]; TILE_COLS];
        for l in (0..k).step_by(8) {
            // SAFETY: values l..l + 8 of every row and column exist.
            unsafe {
                let half = |r: usize| _mm_loadu_si128(rows[r].add(2 * l) as *const __m128i);
                let pair = |r: usize| {
                    let both =
                        _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(half(r)), half(r + 1));
                    if BF {
                        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(both)))
                    } else {
                        _mm512_cvtph_ps(both)
                    }
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
        // SAFETY: AVX-512 F is enabled here.
        unsafe { row_pair_sums(acc) }
    }

    /// `ggml_vec_dot_bf16` (see `bf16_dot_rows_portable`) with AVX2.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; as `HalfDotRows`, the rows BF16.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn bf16_dot_rows(
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
                    // SAFETY: values v + 8q.. v + 8q + 8 exist.
                    unsafe {
                        let x = eight::<true>(row.add(2 * (v + 8 * q)));
                        *acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(col.add(v + 8 * q)), *acc);
                    }
                }
            }
            let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
            // SAFETY: AVX2 is enabled here.
            let mut sum = unsafe { hsum256(s) } as f64;
            for v in np..k {
                // SAFETY: v < k.
                sum += unsafe { super::weight_at::<true>(row, v) * *col.add(v) } as f64;
            }
            // SAFETY: out holds count values.
            unsafe { *out.add(i) = sum as f32 };
        }
    }

    /// As [`bf16_dot_rows`], four rows at a time, each row's four
    /// accumulators in two 512-bit registers (`a0 | a1` and `a2 | a3`, so
    /// that their sum's halves are `a0 + a2` and `a1 + a3`).
    ///
    /// # Safety
    /// AVX-512 F, AVX2, FMA and F16C; as `HalfDotRows`, the rows BF16.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn bf16_dot_rows_avx512(
        first: *const u8,
        stride: usize,
        count: usize,
        col: *const f32,
        k: usize,
        out: *mut f32,
    ) {
        let np = k & !31;
        let sixteen = |p: *const u8| {
            // SAFETY: the caller's row holds sixteen values at p.
            let h = unsafe { _mm256_loadu_si256(p as *const __m256i) };
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        };
        let mut i = 0;
        while i < count {
            let rows = (count - i).min(4);
            let row: [*const u8; 4] =
                std::array::from_fn(|r| first.wrapping_add((i + r.min(rows - 1)) * stride));
            let mut acc = [[_mm512_setzero_ps(); 2]; 4];
            for v in (0..np).step_by(32) {
                // SAFETY: values v..v + 32 of the rows and the column exist.
                unsafe {
                    let x = [
                        _mm512_loadu_ps(col.add(v)),
                        _mm512_loadu_ps(col.add(v + 16)),
                    ];
                    for (r, acc) in acc.iter_mut().enumerate() {
                        for (h, a) in acc.iter_mut().enumerate() {
                            *a = _mm512_fmadd_ps(sixteen(row[r].add(2 * (v + 16 * h))), x[h], *a);
                        }
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows) {
                let s = _mm512_add_ps(acc[0], acc[1]);
                let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
                let s = _mm256_add_ps(_mm512_castps512_ps256(s), high);
                // SAFETY: AVX2 is enabled here.
                let mut sum = unsafe { hsum256(s) } as f64;
                for v in np..k {
                    // SAFETY: v < k.
                    sum += unsafe { super::weight_at::<true>(row[r], v) * *col.add(v) } as f64;
                }
                // SAFETY: out holds count values.
                unsafe { *out.add(i + r) = sum as f32 };
            }
            i += rows;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggraph_core::quant::{f16_to_f32, f32_to_f16};

    #[test]
    fn ggml_picks_eight_lanes_only_for_tinyblas_shapes() {
        assert_eq!(order(64, 64, 2), Order::EightLanes);
        assert_eq!(order(64, 64, 1), Order::VectorDot);
        assert_eq!(order(66, 64, 2), Order::VectorDot);
        assert_eq!(order(64, 60, 2), Order::VectorDot);
    }

    /// Values whose sums round differently in every order, so that a
    /// kernel that sums in another order than its portable twin fails.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let v = ((s >> 8) as f32 / (1 << 24) as f32 - 0.5) * 2f32.powi((s % 13) as i32);
                f16_to_f32(f32_to_f16(v))
            })
            .collect()
    }

    #[test]
    fn the_eight_lane_kernels_sum_as_the_portable_one() {
        for level in crate::kernels::isa::all_supported() {
            for bf16 in [false, true] {
                let kernels = Kernels::new(level, bf16);
                let bits = |v: f32| {
                    if bf16 {
                        (v.to_bits() >> 16) as u16
                    } else {
                        f32_to_f16(v)
                    }
                };
                for k in [8, 24, 32, 64, 72, 200, 256] {
                    let rows: Vec<Vec<u16>> = (0..TILE_ROWS)
                        .map(|r| values(k, r as u32).into_iter().map(bits).collect())
                        .collect();
                    let cols: Vec<Vec<f32>> =
                        (0..TILE_COLS).map(|c| values(k, 100 + c as u32)).collect();
                    let rp: [*const u8; TILE_ROWS] =
                        std::array::from_fn(|r| rows[r].as_ptr() as *const u8);
                    let cp: [*const f32; TILE_COLS] = std::array::from_fn(|c| cols[c].as_ptr());
                    // SAFETY: k values each, k a multiple of 8.
                    let got = unsafe { (kernels.eight_lanes)(rp, cp, k) };
                    for (c, got) in got.iter().enumerate().take(kernels.cols) {
                        // the portable kernel's first column, column c
                        let one: [*const f32; TILE_COLS] = [cp[c]; TILE_COLS];
                        // SAFETY: as above.
                        let want = unsafe {
                            if bf16 {
                                eight_lanes_portable::<true>(rp, one, k)
                            } else {
                                eight_lanes_portable::<false>(rp, one, k)
                            }
                        }[0];
                        assert_eq!(
                            got.map(f32::to_bits),
                            want.map(f32::to_bits),
                            "{} bf16 {bf16} k {k} column {c}",
                            level.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_bf16_vector_dots_sum_as_the_portable_one() {
        for level in crate::kernels::isa::all_supported() {
            for k in [8, 32, 40, 100, 256, 1000] {
                let rows: Vec<u16> = values(3 * k, 5)
                    .into_iter()
                    .map(|v| (v.to_bits() >> 16) as u16)
                    .collect();
                let col = values(k, 9);
                let run = |f: HalfDotRows| {
                    let mut out = [0f32; 3];
                    // SAFETY: three rows of k values, the column k.
                    unsafe {
                        f(
                            rows.as_ptr() as *const u8,
                            2 * k,
                            3,
                            col.as_ptr(),
                            k,
                            out.as_mut_ptr(),
                        )
                    };
                    out.map(f32::to_bits)
                };
                assert_eq!(
                    run(bf16_dot_rows(level)),
                    run(bf16_dot_rows_portable),
                    "{} k {k}",
                    level.name()
                );
            }
        }
    }
}
