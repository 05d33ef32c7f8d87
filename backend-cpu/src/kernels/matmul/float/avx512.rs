//! The packed float GEMM's kernels for AVX-512: the 32 x 12 micro-kernel
//! and its panel packing.

use std::arch::x86_64::*;

use super::weight_values::{DT_F16, DT_F32, scalar_w};
use crate::kernels::matmul::register_transpose::transpose16;

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn load_w512<const DT: u8>(p: *const u8, k: usize) -> __m512 {
    // SAFETY: caller's contract (16 values at k).
    unsafe {
        match DT {
            DT_F32 => _mm512_loadu_ps((p as *const f32).add(k)),
            DT_F16 => _mm512_cvtph_ps(_mm256_loadu_si256(
                (p as *const u16).add(k) as *const __m256i
            )),
            _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                _mm256_loadu_si256((p as *const u16).add(k) as *const __m256i),
            ))),
        }
    }
}

/// The AVX-512 micro-kernel: a 32 x 12 tile in 24 zmm accumulators.
///
/// # Safety
/// As for `packed::Kernel`, with MR = 32 and NR = 12.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn kernel_avx512(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *const *mut f32,
    first: bool,
) {
    const NR: usize = 12;
    // SAFETY: caller's contract.
    unsafe {
        let mut c0 = [_mm512_setzero_ps(); NR];
        let mut c1 = [_mm512_setzero_ps(); NR];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kc {
            let a0 = _mm512_loadu_ps(ap);
            let a1 = _mm512_loadu_ps(ap.add(16));
            for j in 0..NR {
                let bj = _mm512_set1_ps(*bp.add(j));
                c0[j] = _mm512_fmadd_ps(a0, bj, c0[j]);
                c1[j] = _mm512_fmadd_ps(a1, bj, c1[j]);
            }
            ap = ap.add(32);
            bp = bp.add(NR);
        }
        for j in 0..NR {
            let p = *c.add(j);
            if first {
                _mm512_storeu_ps(p, c0[j]);
                _mm512_storeu_ps(p.add(16), c1[j]);
            } else {
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), c0[j]));
                _mm512_storeu_ps(p.add(16), _mm512_add_ps(_mm512_loadu_ps(p.add(16)), c1[j]));
            }
        }
    }
}

/// Packs values `k0..k0 + kc` of 32 rows (null: a row past the end,
/// packed as zeros) as `[kc][32]` f32, widening F16/BF16.
///
/// # Safety
/// Non-null rows hold `k0 + kc` packed values; `dst` holds `kc * 32`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn pack_panel32_avx512<const DT: u8>(
    rows: &[*const u8; 32],
    k0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let k16 = kc / 16 * 16;
    // SAFETY: caller's contract.
    unsafe {
        for half in 0..2 {
            let mut kk = 0;
            while kk < k16 {
                let mut r = [_mm512_setzero_ps(); 16];
                for (i, v) in r.iter_mut().enumerate() {
                    let p = rows[half * 16 + i];
                    if !p.is_null() {
                        *v = load_w512::<DT>(p, k0 + kk);
                    }
                }
                transpose16(&mut r);
                for (j, v) in r.iter().enumerate() {
                    _mm512_storeu_ps(dst.as_mut_ptr().add((kk + j) * 32 + half * 16), *v);
                }
                kk += 16;
            }
            for t in k16..kc {
                for i in 0..16 {
                    let p = rows[half * 16 + i];
                    dst[t * 32 + half * 16 + i] = if p.is_null() {
                        0.0
                    } else {
                        scalar_w::<DT>(p, k0 + t)
                    };
                }
            }
        }
    }
}
