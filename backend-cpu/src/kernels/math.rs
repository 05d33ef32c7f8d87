//! Elementary functions as plain arithmetic, so that loops over them
//! vectorise (the standard library's go through libm one value at a
//! time).

/// e^x for x <= 0 (scores minus their running maximum), to about 2 ulp;
/// e^-inf is 0. Plain arithmetic, so loops over it vectorise.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa
    const ROUND: f32 = 12_582_912.0;
    // below this, e^x is under f32's smallest normal: flush to 0
    let keep = x >= -87.33;
    let x = x.max(-87.33);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    // the same integer, read from t's low mantissa bits: integer ops that
    // vectorise, where `n as i32` (a saturating cast) keeps loops scalar
    let n_int = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = x - n * LN2_HI - n * LN2_LO;
    // e^r on [-ln2/2, ln2/2], Taylor to degree 6
    let p = 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    let scale = f32::from_bits((n_int.wrapping_add(127) as u32) << 23);
    if keep { p * scale } else { 0.0 }
}

/// x * sigmoid(x), through e^-|x| so that the exponential never
/// overflows.
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    let e = exp_nonpositive(-x.abs());
    let sigmoid = if x >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    };
    x * sigmoid
}

/// The sum of the eight lanes of `v`.
///
/// # Safety
/// The processor has AVX2.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn hsum256(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The f16 at `p` as f32.
///
/// # Safety
/// The processor has F16C; `p` points to two readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "f16c")]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: caller's contract.
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

#[cfg(test)]
mod tests {
    use super::exp_nonpositive as exp;
    use super::silu;

    #[test]
    fn exp_matches_the_standard_library_on_non_positive_inputs() {
        let mut worst = 0f32;
        for i in 0..=200_000 {
            let x = -(i as f32) * 0.0005;
            let (got, want) = (exp(x), x.exp());
            if x > -87.0 {
                worst = worst.max(((got - want) / want).abs());
            } else {
                // flushed to zero below f32's smallest normal
                assert!(got < 2e-38, "{x}: {got}");
            }
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn silu_matches_its_definition() {
        let mut worst = 0f32;
        for i in -40_000..=40_000 {
            let x = i as f32 * 0.001;
            let want = x / (1.0 + (-x).exp());
            let got = silu(x);
            worst = worst.max((got - want).abs() / want.abs().max(1e-6));
        }
        assert!(worst < 2e-6, "worst relative error {worst}");
        assert_eq!(silu(f32::INFINITY), f32::INFINITY);
        assert!(silu(f32::NAN).is_nan());
    }
}
