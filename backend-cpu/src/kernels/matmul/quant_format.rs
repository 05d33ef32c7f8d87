//! How each quantised weight format reads as unsigned codes `u` with a
//! per-block scale `dw`, an integer offset `o` and (Q4_K) a per-block min
//! `mw`, and the decoder that unpacks a row into them:
//!
//! ```text
//! w = dw * (u - o) - mw          x = dx * q
//! dot(w, x) over a block = dx * (dw * (sum(u * q) - o * sum(q)) - mw * sum(q))
//! ```
//!
//! `x = dx * q` is an activation quantised to 8 bits (`activation_quant`).

use ggraph_core::DType;
use ggraph_core::quant::f16_to_f32;

use crate::kernels::isa::Isa;

/// How one weight format reads as codes.
#[derive(Clone, Copy)]
pub(crate) struct Format {
    pub(crate) dtype: DType,
    /// Values per scale.
    pub(crate) qb: usize,
    /// Offset subtracted from the codes.
    pub(crate) offset: i32,
    /// Whether blocks carry a min (`mw`).
    pub(crate) has_min: bool,
}

pub(crate) fn format(dtype: DType) -> Option<Format> {
    let (qb, offset, has_min) = match dtype {
        DType::Q8_0 => (32, 128, false),
        DType::Q4_0 => (32, 8, false),
        DType::Q4_K => (32, 0, true),
        DType::Q6_K => (16, 32, false),
        _ => return None,
    };
    Some(Format {
        dtype,
        qb,
        offset,
        has_min,
    })
}

/// Unpacks the 6-bit scale and min of Q4_K sub-block `j`.
#[inline]
fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The 6-bit scales and mins of a Q4_K super-block's 8 sub-blocks, as four
/// words of four bytes: scales 0..4, scales 4..8, mins 0..4, mins 4..8.
/// Sub-blocks 0..4 sit in the low bits of bytes 0..4 (scales) and 4..8
/// (mins) of the 12; 4..8 in the nibbles of bytes 8..12, their top bits in
/// the top two bits of bytes 0..8.
#[inline(always)]
pub(crate) fn q4k_scales_mins(s: &[u8; 12]) -> [u32; 4] {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (word(0), word(1), word(2));
    [
        u0 & 0x3f3f_3f3f,
        (u2 & 0x0f0f_0f0f) | (((u0 >> 6) & 0x0303_0303) << 4),
        u1 & 0x3f3f_3f3f,
        ((u2 >> 4) & 0x0f0f_0f0f) | (((u1 >> 6) & 0x0303_0303) << 4),
    ]
}

/// Decodes values `v0..v0 + codes.len()` of one weight row (whole
/// super-blocks for the K-quants) into unsigned codes, block scales and
/// (Q4_K) block mins.
///
/// # Safety
/// `row` must hold the row's blocks up to `v0 + codes.len()` values.
pub(crate) unsafe fn decode(
    f: Format,
    row: *const u8,
    v0: usize,
    codes: &mut [u8],
    dw: &mut [f32],
    mw: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::isa::active() >= Isa::Avx2 {
        // SAFETY: AVX2 and F16C are available; the caller's contract.
        unsafe { x86::decode_avx2(f, row, v0, codes, dw, mw) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { decode_with::<false>(f, row, v0, codes, dw, mw) }
}

/// The body of [`decode`]; `SIMD` (only on x86-64, with AVX2 and F16C)
/// takes the codes and scales with vector instructions, which inline
/// into the AVX2 instantiation.
///
/// # Safety
/// As [`decode`]; with `SIMD`, the processor has AVX2 and F16C.
#[inline(always)]
unsafe fn decode_with<const SIMD: bool>(
    f: Format,
    row: *const u8,
    v0: usize,
    codes: &mut [u8],
    dw: &mut [f32],
    mw: &mut [f32],
) {
    let len = codes.len();
    let ts = f.dtype.type_size();
    let bs = f.dtype.block_size();
    let nblocks = len / bs;
    // SAFETY: caller's contract; each arm reads whole blocks.
    let src = unsafe { std::slice::from_raw_parts(row.add(v0 / bs * ts), nblocks * ts) };
    let f16 = |b: &[u8], at: usize| {
        #[cfg(target_arch = "x86_64")]
        if SIMD {
            // SAFETY: F16C is available (SIMD); two bytes at `at`.
            return unsafe { crate::kernels::math::f16_at(b[at..at + 2].as_ptr()) };
        }
        f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
    };
    match f.dtype {
        DType::Q8_0 => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                dw[bi] = f16(blk, 0);
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 32 code bytes in and out.
                    unsafe { x86::q8_codes(blk[2..].as_ptr(), codes[bi * 32..].as_mut_ptr()) };
                    continue;
                }
                for (c, q) in codes[bi * 32..bi * 32 + 32].iter_mut().zip(&blk[2..]) {
                    *c = q ^ 0x80;
                }
            }
        }
        DType::Q4_0 => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                dw[bi] = f16(blk, 0);
                let c = &mut codes[bi * 32..bi * 32 + 32];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 16 bytes in, 32 codes out.
                    unsafe { x86::q4_codes(blk[2..].as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for (j, q) in blk[2..].iter().enumerate() {
                    c[j] = q & 0x0f;
                    c[j + 16] = q >> 4;
                }
            }
        }
        DType::Q4_K => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let d = f16(blk, 0);
                let dmin = f16(blk, 2);
                let scales = &blk[4..16];
                let qs = &blk[16..];
                for j in 0..8 {
                    let (sc, mn) = q4k_scale_min(j, scales);
                    dw[bi * 8 + j] = d * sc as f32;
                    mw[bi * 8 + j] = dmin * mn as f32;
                }
                let c = &mut codes[bi * 256..bi * 256 + 256];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 128 code bytes in, 256 out.
                    unsafe { x86::q4k_codes(qs.as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for g in 0..4 {
                    for l in 0..32 {
                        let q = qs[32 * g + l];
                        c[64 * g + l] = q & 0x0f;
                        c[64 * g + 32 + l] = q >> 4;
                    }
                }
            }
        }
        DType::Q6_K => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let (ql, rest) = blk.split_at(128);
                let (qh, rest) = rest.split_at(64);
                let (sc, d) = rest.split_at(16);
                let d = f16(d, 0);
                for (j, s) in sc.iter().enumerate() {
                    dw[bi * 16 + j] = d * (*s as i8) as f32;
                }
                let c = &mut codes[bi * 256..bi * 256 + 256];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 192 code bytes in, 256 out.
                    unsafe { x86::q6k_codes(ql.as_ptr(), qh.as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for half in 0..2 {
                    let ql = &ql[64 * half..];
                    let qh = &qh[32 * half..];
                    let o = &mut c[128 * half..];
                    for l in 0..32 {
                        o[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                        o[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                        o[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                        o[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Unpacks the 128 nibble bytes of a Q4_K block into 256 codes.
    ///
    /// # Safety
    /// AVX2; `qs` holds 128 bytes, `out` room for 256.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q4k_codes(qs: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let m = _mm256_set1_epi8(0x0f);
            for g in 0..4 {
                let v = _mm256_loadu_si256(qs.add(32 * g) as *const __m256i);
                _mm256_storeu_si256(out.add(64 * g) as *mut __m256i, _mm256_and_si256(v, m));
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m);
                _mm256_storeu_si256(out.add(64 * g + 32) as *mut __m256i, hi);
            }
        }
    }

    /// Unpacks the low nibbles and high bit pairs of a Q6_K block into 256
    /// codes (0..64).
    ///
    /// # Safety
    /// AVX2; `ql` holds 128 bytes, `qh` 64, `out` room for 256.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q6k_codes(ql: *const u8, qh: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let m2 = _mm256_set1_epi8(0x30);
            for half in 0..2 {
                let l0 = _mm256_loadu_si256(ql.add(64 * half) as *const __m256i);
                let l1 = _mm256_loadu_si256(ql.add(64 * half + 32) as *const __m256i);
                let h = _mm256_loadu_si256(qh.add(32 * half) as *const __m256i);
                let o = out.add(128 * half);
                let q1 = _mm256_or_si256(
                    _mm256_and_si256(l0, m4),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(h), m2),
                );
                let q2 = _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(h), m2),
                );
                let q3 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4),
                    _mm256_and_si256(h, m2),
                );
                let q4 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(h), m2),
                );
                _mm256_storeu_si256(o as *mut __m256i, q1);
                _mm256_storeu_si256(o.add(32) as *mut __m256i, q2);
                _mm256_storeu_si256(o.add(64) as *mut __m256i, q3);
                _mm256_storeu_si256(o.add(96) as *mut __m256i, q4);
            }
        }
    }

    /// [`super::decode`] with AVX2 and F16C, its per-block helpers inlined.
    ///
    /// # Safety
    /// AVX2 and F16C; as [`super::decode`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn decode_avx2(
        f: super::Format,
        row: *const u8,
        v0: usize,
        codes: &mut [u8],
        dw: &mut [f32],
        mw: &mut [f32],
    ) {
        // SAFETY: caller's contract.
        unsafe { super::decode_with::<true>(f, row, v0, codes, dw, mw) }
    }

    /// Q8_0 codes as unsigned bytes (`q ^ 0x80`).
    ///
    /// # Safety
    /// AVX2; 32 bytes at `q` and room for 32 at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q8_codes(q: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let v = _mm256_loadu_si256(q as *const __m256i);
            _mm256_storeu_si256(
                out as *mut __m256i,
                _mm256_xor_si256(v, _mm256_set1_epi8(-128)),
            );
        }
    }

    /// Q4_0 codes: low nibbles (values 0..16) then high nibbles.
    ///
    /// # Safety
    /// AVX2; 16 bytes at `q` and room for 32 at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q4_codes(q: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let t = _mm_loadu_si128(q as *const __m128i);
            let z = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(t), _mm_srli_epi16::<4>(t));
            _mm256_storeu_si256(
                out as *mut __m256i,
                _mm256_and_si256(z, _mm256_set1_epi8(0x0f)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4k_scale_words_match_the_scalar_unpacking() {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..200 {
            let s: [u8; 12] = std::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            });
            let words = q4k_scales_mins(&s);
            for j in 0..8 {
                let (sc, mn) = q4k_scale_min(j, &s);
                assert_eq!(words[j / 4].to_le_bytes()[j % 4], sc, "scale {j} of {s:?}");
                assert_eq!(
                    words[2 + j / 4].to_le_bytes()[j % 4],
                    mn,
                    "min {j} of {s:?}"
                );
            }
        }
    }
}
