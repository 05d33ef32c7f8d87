//! Row conversions between f16 and f32 with the processor's conversion
//! instructions (16 values per instruction with AVX-512, 8 with F16C),
//! the `half` crate elsewhere. Both directions round to nearest even, as
//! the portable code does, so every level gives the same bits.

use half::slice::HalfFloatSliceExt;

use super::isa::{Isa, active};

/// `dst[i] = src[i]` for f16 bits `src`.
pub(crate) fn f16_to_f32(src: &[half::f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        let isa = active();
        if isa >= Isa::Avx512 {
            // SAFETY: the processor has AVX-512 F (checked by `active`).
            return unsafe { x86::f16_to_f32_avx512(src, dst) };
        }
        if isa >= Isa::Avx2 {
            // SAFETY: the processor has AVX2 and F16C (checked by `active`).
            return unsafe { x86::f16_to_f32_f16c(src, dst) };
        }
    }
    src.convert_to_f32_slice(dst);
}

/// `dst[i] = src[i]` rounded to f16.
pub(crate) fn f32_to_f16(src: &[f32], dst: &mut [half::f16]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        let isa = active();
        if isa >= Isa::Avx512 {
            // SAFETY: the processor has AVX-512 F (checked by `active`).
            return unsafe { x86::f32_to_f16_avx512(src, dst) };
        }
        if isa >= Isa::Avx2 {
            // SAFETY: the processor has AVX2 and F16C (checked by `active`).
            return unsafe { x86::f32_to_f16_f16c(src, dst) };
        }
    }
    dst.convert_from_f32_slice(src);
}

/// Each value rounded to the nearest f16 (ties to even), in place.
pub(crate) fn round_to_f16(x: &mut [f32]) {
    let mut h = [half::f16::ZERO; 256];
    for c in x.chunks_mut(256) {
        f32_to_f16(c, &mut h);
        f16_to_f32(&h[..c.len()], c);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::slice::HalfFloatSliceExt;

    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT;

    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub(super) unsafe fn f16_to_f32_avx512(src: &[half::f16], dst: &mut [f32]) {
        let n = src.len();
        let whole = n - n % 16;
        for i in (0..whole).step_by(16) {
            // SAFETY: i + 16 <= n for both slices.
            unsafe {
                let h = _mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i);
                _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
            }
        }
        if whole < n {
            src[whole..].convert_to_f32_slice(&mut dst[whole..]);
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn f16_to_f32_f16c(src: &[half::f16], dst: &mut [f32]) {
        let n = src.len();
        let whole = n - n % 8;
        for i in (0..whole).step_by(8) {
            // SAFETY: i + 8 <= n for both slices.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        if whole < n {
            src[whole..].convert_to_f32_slice(&mut dst[whole..]);
        }
    }

    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub(super) unsafe fn f32_to_f16_avx512(src: &[f32], dst: &mut [half::f16]) {
        let n = src.len();
        let whole = n - n % 16;
        for i in (0..whole).step_by(16) {
            // SAFETY: i + 16 <= n for both slices.
            unsafe {
                let x = _mm512_loadu_ps(src.as_ptr().add(i));
                let h = _mm512_cvtps_ph::<NEAREST>(x);
                _mm256_storeu_si256(dst.as_mut_ptr().add(i) as *mut __m256i, h);
            }
        }
        if whole < n {
            dst[whole..].convert_from_f32_slice(&src[whole..]);
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn f32_to_f16_f16c(src: &[f32], dst: &mut [half::f16]) {
        let n = src.len();
        let whole = n - n % 8;
        for i in (0..whole).step_by(8) {
            // SAFETY: i + 8 <= n for both slices.
            unsafe {
                let x = _mm256_loadu_ps(src.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<NEAREST>(x);
                _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
            }
        }
        if whole < n {
            dst[whole..].convert_from_f32_slice(&src[whole..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    #[test]
    fn conversions_match_the_half_crate_bit_for_bit() {
        // every f16 bit pattern except NaNs, then f32 values around them
        let all: Vec<f16> = (0..=u16::MAX)
            .map(f16::from_bits)
            .filter(|h| !h.is_nan())
            .collect();
        let mut wide = vec![0f32; all.len()];
        super::f16_to_f32(&all, &mut wide);
        for (h, w) in all.iter().zip(&wide) {
            assert_eq!(h.to_f32().to_bits(), w.to_bits(), "{h}");
        }
        let probes: Vec<f32> = wide
            .iter()
            .flat_map(|&w| [w, w * 1.000_3, w * 0.999_7, w + 1e-7])
            .collect();
        let mut narrow = vec![f16::ZERO; probes.len()];
        super::f32_to_f16(&probes, &mut narrow);
        for (p, h) in probes.iter().zip(&narrow) {
            assert_eq!(f16::from_f32(*p).to_bits(), h.to_bits(), "{p}");
        }
    }
}
