//! The direct path's kernels for AVX2 (`vpmaddubsw`).

use std::arch::x86_64::*;

use super::operands::{ColsQ, Decoded};
use crate::kernels::math::hsum256;
use crate::kernels::matmul::quant_format::Format;

pub(super) unsafe fn direct_avx2_q8<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe { direct_avx2::<R, C, 32, true>(f, nb, w, x, out) }
}

pub(super) unsafe fn direct_avx2_32<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe { direct_avx2::<R, C, 32, false>(f, nb, w, x, out) }
}

pub(super) unsafe fn direct_avx2_16<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe { direct_avx2::<R, C, 16, false>(f, nb, w, x, out) }
}

/// Sums of byte products of one block as 8 (QB 32) or 4 (QB 16) i32
/// lanes in a ymm (the upper half zero for QB 16): `vpmaddubsw` then
/// `vpmaddwd` by ones. Codes below 64 cannot saturate the 16-bit pair
/// sums; Q8_0 (codes up to 255) goes through the signs instead: |w|
/// times x with w's sign, which needs no offset (`Q8`).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_dot_avx2<const QB: usize, const Q8: bool>(u: *const u8, q: *const i8) -> __m256i {
    // SAFETY: caller's contract (QB bytes at each pointer).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let (u, q) = if QB == 32 {
            (
                _mm256_loadu_si256(u as *const __m256i),
                _mm256_loadu_si256(q as *const __m256i),
            )
        } else {
            (
                _mm256_zextsi128_si256(_mm_loadu_si128(u as *const __m128i)),
                _mm256_zextsi128_si256(_mm_loadu_si128(q as *const __m128i)),
            )
        };
        let p16 = if Q8 {
            let ws = _mm256_xor_si256(u, _mm256_set1_epi8(-128));
            _mm256_maddubs_epi16(_mm256_sign_epi8(ws, ws), _mm256_sign_epi8(q, ws))
        } else {
            _mm256_maddubs_epi16(u, q)
        };
        _mm256_madd_epi16(p16, ones)
    }
}

/// The AVX2 direct kernel (`vpmaddubsw`); activations quantised with
/// `lanes = QB / 4`, so the per-lane bias is added to all 8 lanes for
/// QB 32 (4 lanes hold it for QB 16: the upper 4 stay zero).
///
/// # Safety
/// As for `direct::DirectFn`.
#[target_feature(enable = "avx2,fma")]
unsafe fn direct_avx2<const R: usize, const C: usize, const QB: usize, const Q8: bool>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe {
        let lane_mask = if QB == 32 {
            _mm256_set1_epi32(-1)
        } else {
            _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0)
        };
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut macc = [[0f32; C]; R];
        for blk in 0..nb {
            for r in 0..R {
                let u = w.codes.add(r * w.stride + blk * QB);
                let dw = *w.dw.add(r * w.sstride + blk);
                for c in 0..C {
                    let mut p = block_dot_avx2::<QB, Q8>(u, x.codes[c].add(blk * QB));
                    if !Q8 {
                        let bias = _mm256_set1_epi32(*x.bias[c].add(blk));
                        p = _mm256_add_epi32(p, _mm256_and_si256(bias, lane_mask));
                    }
                    let s = _mm256_set1_ps(dw * *x.d[c].add(blk));
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[r][c]);
                }
                if f.has_min {
                    let mw = *w.mw.add(r * w.sstride + blk);
                    for c in 0..C {
                        macc[r][c] += mw * *x.sx[c].add(blk);
                    }
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                *out.add(r * C + c) += hsum256(acc[r][c]) - macc[r][c];
            }
        }
    }
}
