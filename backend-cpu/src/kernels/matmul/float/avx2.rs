//! The packed float GEMM's kernels for AVX2: the 16 x 6 micro-kernel and
//! its panel packing.

use std::arch::x86_64::*;

use super::weight_values::{DT_F16, DT_F32, scalar_w};
use crate::kernels::matmul::register_transpose::transpose8;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_w256<const DT: u8>(p: *const u8, k: usize) -> __m256 {
    // SAFETY: caller's contract (8 values at k).
    unsafe {
        match DT {
            DT_F32 => _mm256_loadu_ps((p as *const f32).add(k)),
            DT_F16 => _mm256_cvtph_ps(_mm_loadu_si128((p as *const u16).add(k) as *const __m128i)),
            _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                _mm_loadu_si128((p as *const u16).add(k) as *const __m128i),
            ))),
        }
    }
}

/// The AVX2 micro-kernel: a 16 x 6 tile in 12 ymm accumulators.
///
/// # Safety
/// As for `packed::Kernel`, with MR = 16 and NR = 6.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn kernel_avx2(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *const *mut f32,
    first: bool,
) {
    const NR: usize = 6;
    // SAFETY: caller's contract.
    unsafe {
        let mut c0 = [_mm256_setzero_ps(); NR];
        let mut c1 = [_mm256_setzero_ps(); NR];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kc {
            let a0 = _mm256_loadu_ps(ap);
            let a1 = _mm256_loadu_ps(ap.add(8));
            for j in 0..NR {
                let bj = _mm256_broadcast_ss(&*bp.add(j));
                c0[j] = _mm256_fmadd_ps(a0, bj, c0[j]);
                c1[j] = _mm256_fmadd_ps(a1, bj, c1[j]);
            }
            ap = ap.add(16);
            bp = bp.add(NR);
        }
        for j in 0..NR {
            let p = *c.add(j);
            if first {
                _mm256_storeu_ps(p, c0[j]);
                _mm256_storeu_ps(p.add(8), c1[j]);
            } else {
                _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), c0[j]));
                _mm256_storeu_ps(p.add(8), _mm256_add_ps(_mm256_loadu_ps(p.add(8)), c1[j]));
            }
        }
    }
}

/// Packs 16 rows (null rows as zeros), values `k0..k0 + kc`, as a
/// `[kc][16]` f32 panel: eight rows by eight values at a time,
/// transposed in registers.
///
/// # Safety
/// AVX2, FMA and F16C are available; the non-null rows hold `k0 + kc`
/// values of type `DT`; `dst` holds `kc * 16` floats.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack_panel16_avx2<const DT: u8>(
    rows: &[*const u8; 16],
    k0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let k8 = kc / 8 * 8;
    // SAFETY: caller's contract.
    unsafe {
        for half in 0..2 {
            let mut kk = 0;
            while kk < k8 {
                let mut r = [_mm256_setzero_ps(); 8];
                for (i, v) in r.iter_mut().enumerate() {
                    let p = rows[half * 8 + i];
                    if !p.is_null() {
                        *v = load_w256::<DT>(p, k0 + kk);
                    }
                }
                transpose8(&mut r);
                for (j, v) in r.iter().enumerate() {
                    _mm256_storeu_ps(dst.as_mut_ptr().add((kk + j) * 16 + half * 8), *v);
                }
                kk += 8;
            }
            for t in k8..kc {
                for i in 0..8 {
                    let p = rows[half * 8 + i];
                    dst[t * 16 + half * 8 + i] = if p.is_null() {
                        0.0
                    } else {
                        scalar_w::<DT>(p, k0 + t)
                    };
                }
            }
        }
    }
}
