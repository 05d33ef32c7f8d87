//! Transposes of f32 blocks held in registers (8 x 8 in ymm, 16 x 16 in
//! zmm), for the kernels that pack or interleave rows into panels.

use std::arch::x86_64::*;

/// Transposes an 8 x 8 block held as eight rows.
#[inline]
#[target_feature(enable = "avx")]
pub(crate) fn transpose8(r: &mut [__m256; 8]) {
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // u[4h + q]: rows 4h..4h + 4, values q, q + 4 of each 128-bit half
    let u: [__m256; 8] = std::array::from_fn(|i| {
        let (h, q) = (i / 4, i % 4);
        let (a, b) = (t[4 * h + q / 2], t[4 * h + q / 2 + 2]);
        if q % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    for j in 0..4 {
        r[j] = _mm256_permute2f128_ps::<0x20>(u[j], u[4 + j]);
        r[4 + j] = _mm256_permute2f128_ps::<0x31>(u[j], u[4 + j]);
    }
}

/// Transposes 16 rows of 16 floats in place (`r[i][j]` becomes
/// `r[j][i]`).
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn transpose16(r: &mut [__m512; 16]) {
    let mut a = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut b = [_mm512_setzero_ps(); 16];
    for i in 0..4 {
        let (a0, a1) = (_mm512_castps_pd(a[4 * i]), _mm512_castps_pd(a[4 * i + 1]));
        let (a2, a3) = (
            _mm512_castps_pd(a[4 * i + 2]),
            _mm512_castps_pd(a[4 * i + 3]),
        );
        b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    // b[4i + c] lane L holds column 4L + c of rows 4i..4i+4
    for c in 0..4 {
        let p = _mm512_shuffle_f32x4::<0x88>(b[c], b[4 + c]);
        let q = _mm512_shuffle_f32x4::<0xdd>(b[c], b[4 + c]);
        let p2 = _mm512_shuffle_f32x4::<0x88>(b[8 + c], b[12 + c]);
        let q2 = _mm512_shuffle_f32x4::<0xdd>(b[8 + c], b[12 + c]);
        r[c] = _mm512_shuffle_f32x4::<0x88>(p, p2);
        r[8 + c] = _mm512_shuffle_f32x4::<0xdd>(p, p2);
        r[4 + c] = _mm512_shuffle_f32x4::<0x88>(q, q2);
        r[12 + c] = _mm512_shuffle_f32x4::<0xdd>(q, q2);
    }
}
