//! F16 weights times columns already rounded to F16, each dot summed in
//! the order ggml's x86 build sums it, so that every output equals
//! llama.cpp's bit for bit. A product of two F16 values is exact in f32,
//! so only the order of the additions matters, and ggml has two:
//!
//! - **eight lanes** (tinyBLAS, which ggml runs for two or more columns
//!   when `k` is a multiple of 8 and the rows a multiple of 4): value `t`
//!   goes to lane `t % 8`, each lane adds its products from the first on,
//!   and the lanes are then summed as `((l0 + l4) + (l2 + l6)) + ((l1 +
//!   l5) + (l3 + l7))`;
//! - **the vector dot** (`ggml_vec_dot_f16`, for one column and whatever
//!   tinyBLAS declines): `kernels::half_dot`.

use crate::kernels::half_dot::{HalfDot, half_at, half_dot};
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
/// Columns per eight-lane tile: twelve accumulators fit AVX2's sixteen
/// registers with the four rows' values.
const TILE_COLS: usize = 3;

/// `out[j][i] = dot(a row i, b[j])` for `i < m`: F16 rows, columns holding
/// values already rounded to F16.
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    let kernels = Kernels::for_isa(isa);
    match order(m, k, n) {
        Order::EightLanes => par_ranges(m / TILE_ROWS, 4, |tiles| {
            for t in tiles {
                let i0 = t * TILE_ROWS;
                let rows: [*const u8; TILE_ROWS] = std::array::from_fn(|r| a.row(i0 + r));
                for j0 in (0..n).step_by(TILE_COLS) {
                    let nc = TILE_COLS.min(n - j0);
                    let cols: [*const f32; TILE_COLS] =
                        std::array::from_fn(|c| b.0[j0 + c.min(nc - 1)] as *const f32);
                    // SAFETY: rows i0.. hold k values each, the columns k
                    // values; k is a multiple of 8.
                    let dots = unsafe { (kernels.eight_lanes)(rows, cols, k) };
                    for (c, col) in dots.iter().take(nc).enumerate() {
                        for (r, &v) in col.iter().enumerate() {
                            // SAFETY: output column j0 + c holds m values;
                            // this task owns rows i0..i0 + 4.
                            unsafe { *out.0[j0 + c].add(i0 + r) = v };
                        }
                    }
                }
            }
        }),
        Order::VectorDot => par_ranges(m, 16, |range| {
            for i in range {
                for (&col, &o) in b.0.iter().zip(&out.0) {
                    // SAFETY: row i and the column hold k values; output
                    // row i is this task's.
                    unsafe { *o.add(i) = (kernels.vector_dot)(a.row(i), col, k) };
                }
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
    vector_dot: HalfDot,
}

impl Kernels {
    fn for_isa(isa: Isa) -> Kernels {
        let eight_lanes: EightLanes = match isa {
            #[cfg(target_arch = "x86_64")]
            isa if isa >= Isa::Avx2 => x86::eight_lanes,
            _ => eight_lanes_portable,
        };
        Kernels {
            eight_lanes,
            vector_dot: half_dot(isa),
        }
    }
}

fn hsum8(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// # Safety
/// Rows hold `k` F16 values, columns `k` f32; `k % 8 == 0`.
unsafe fn eight_lanes_portable(
    rows: [*const u8; TILE_ROWS],
    cols: [*const f32; TILE_COLS],
    k: usize,
) -> [[f32; TILE_ROWS]; TILE_COLS] {
    std::array::from_fn(|c| {
        std::array::from_fn(|r| {
            let mut lanes = [0f32; 8];
            for l in (0..k).step_by(8) {
                for (t, lane) in lanes.iter_mut().enumerate() {
                    // SAFETY: l + t < k.
                    *lane += unsafe { half_at(rows[r], l + t) * *cols[c].add(l + t) };
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
    use crate::kernels::math::hsum256;

    /// # Safety
    /// AVX2, FMA and F16C; as `eight_lanes_portable`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn eight_lanes(
        rows: [*const u8; TILE_ROWS],
        cols: [*const f32; TILE_COLS],
        k: usize,
    ) -> [[f32; TILE_ROWS]; TILE_COLS] {
        let mut acc = [[_mm256_setzero_ps(); TILE_ROWS]; TILE_COLS];
        for l in (0..k).step_by(8) {
            // SAFETY: values l..l + 8 of every row and column exist.
            unsafe {
                let av: [__m256; TILE_ROWS] = std::array::from_fn(|r| {
                    _mm256_cvtph_ps(_mm_loadu_si128(rows[r].add(2 * l) as *const __m128i))
                });
                for (c, acc) in acc.iter_mut().enumerate() {
                    let bv = _mm256_loadu_ps(cols[c].add(l));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(av[r], bv, *acc);
                    }
                }
            }
        }
        // SAFETY: AVX2 is enabled here.
        acc.map(|col| col.map(|v| unsafe { hsum256(v) }))
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
    fn the_eight_lane_kernel_sums_as_the_portable_one() {
        let eight_lanes = Kernels::for_isa(crate::kernels::isa::active()).eight_lanes;
        for k in [8, 24, 32, 64, 72, 200, 256] {
            let rows: Vec<Vec<u16>> = (0..TILE_ROWS)
                .map(|r| values(k, r as u32).iter().map(|&v| f32_to_f16(v)).collect())
                .collect();
            let cols: Vec<Vec<f32>> = (0..TILE_COLS).map(|c| values(k, 100 + c as u32)).collect();
            let rp: [*const u8; TILE_ROWS] = std::array::from_fn(|r| rows[r].as_ptr() as *const u8);
            let cp: [*const f32; TILE_COLS] = std::array::from_fn(|c| cols[c].as_ptr());
            if k % 8 == 0 {
                // SAFETY: k values each, k a multiple of 8.
                let (got, want) =
                    unsafe { (eight_lanes(rp, cp, k), eight_lanes_portable(rp, cp, k)) };
                assert_eq!(
                    got.map(|c| c.map(f32::to_bits)),
                    want.map(|c| c.map(f32::to_bits)),
                    "k {k}"
                );
            }
        }
    }
}
