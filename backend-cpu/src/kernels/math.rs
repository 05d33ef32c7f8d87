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

/// e^x exactly as ggml's vectorised exponential (`ggml_v_expf`, the form
/// its AVX2 and SSE builds run on every lane): a Cody-Waite reduction by
/// ln 2, a degree-5 polynomial, and its own paths for |n| above 126 and
/// 192. ggml's softmax and SiLU take their exponentials from it, so the
/// kernels that must agree with llama.cpp bit for bit use this one.
#[inline(always)]
pub(crate) fn ggml_exp(x: f32) -> f32 {
    let c = |bits: u32| f32::from_bits(bits);
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa
    let r = c(0x4b40_0000);
    let z = x.mul_add(c(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x));
    let e = z.to_bits() << 23;
    let k = c(e.wrapping_add(1f32.to_bits()));
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6) * b);
    // both paths, then a select per value (no branch, so that loops over
    // this function vectorise); NaN takes the first, as in ggml
    let in_range = j.mul_add(k, k);
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = c(g.wrapping_add(0x7f00_0000));
    let s2 = c(e.wrapping_sub(g));
    let far = if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    };
    if n.abs() > 126.0 { far } else { in_range }
}

/// `f` over `x` as ggml's row loops apply their vector function: the
/// lanes of whole groups of eight with `lanes`, the last `x.len() % 8`
/// values with `tail` (ggml's scalar form, which calls libm).
#[inline(always)]
pub(crate) fn ggml_rows_of_eight(
    x: &mut [f32],
    lanes: impl Fn(f32) -> f32,
    tail: impl Fn(f32) -> f32,
) {
    let whole = x.len() - x.len() % 8;
    let (body, rest) = x.split_at_mut(whole);
    body.iter_mut().for_each(|v| *v = lanes(*v));
    rest.iter_mut().for_each(|v| *v = tail(*v));
}

/// SiLU as ggml's vector form computes it: `x / (1 + e^-x)` with
/// [`ggml_exp`].
#[inline(always)]
pub(crate) fn ggml_silu(x: f32) -> f32 {
    x / (1.0 + ggml_exp(0.0 - x))
}

/// SiLU as ggml's scalar form computes it, with libm's `expf`.
#[inline(always)]
pub(crate) fn libm_silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
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

/// The dots of `C` columns and four rows kept two rows to a 512-bit
/// register (row `2p` in the low eight lanes of `acc[c][p]`, row `2p + 1`
/// in the high), each half summed as [`hsum256`] sums eight lanes.
///
/// # Safety
/// The processor has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx2")]
pub(crate) unsafe fn row_pair_sums<const C: usize>(
    acc: [[std::arch::x86_64::__m512; 2]; C],
) -> [[f32; 4]; C] {
    use std::arch::x86_64::*;
    // a loop, not `map`: a closure here would be called, not inlined
    let mut sums = [[0f32; 4]; C];
    for (sums, pairs) in sums.iter_mut().zip(acc) {
        let [lo0, hi0, lo1, hi1] = [
            _mm512_castps512_ps256(pairs[0]),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(pairs[0]))),
            _mm512_castps512_ps256(pairs[1]),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(pairs[1]))),
        ];
        // SAFETY: AVX2 is enabled here.
        *sums = unsafe { [hsum256(lo0), hsum256(hi0), hsum256(lo1), hsum256(hi1)] };
    }
    sums
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
    use super::{ggml_exp, ggml_silu};

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
    fn ggml_exp_is_close_to_libm_everywhere_and_exact_at_the_edges() {
        let mut worst = 0f64;
        for i in -200_000..=200_000 {
            let x = i as f32 * 0.00044;
            let (got, want) = (ggml_exp(x) as f64, (x as f64).exp());
            if want > 1e-37 && want < 1e38 {
                worst = worst.max(((got - want) / want).abs());
            }
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
        assert_eq!(ggml_exp(0.0), 1.0);
        assert_eq!(ggml_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(ggml_exp(-200.0), 0.0);
        assert_eq!(ggml_exp(200.0), f32::INFINITY);
        assert!(ggml_exp(f32::NAN).is_nan());
    }

    #[test]
    fn ggml_silu_matches_its_definition() {
        for i in -40_000..=40_000 {
            let x = i as f32 * 0.001;
            let want = x as f64 / (1.0 + (-(x as f64)).exp());
            let got = ggml_silu(x) as f64;
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1e-3), "{x}");
        }
        assert!(ggml_silu(f32::NAN).is_nan());
    }
}
