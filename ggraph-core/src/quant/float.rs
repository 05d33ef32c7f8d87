//! f16 and bf16 conversions with ggml's rounding (round to nearest even).

use half::f16;

/// The f32 value of the IEEE half-precision number with these bits (exact).
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// The bits of the half-precision number nearest to `x` (ties to even);
/// values beyond ±65504 become infinities.
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// The f32 value of the bfloat16 number with these bits (exact: the bits
/// become the top half of the f32).
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// As ggml's `ggml_compute_fp32_to_bf16`: NaN is forced quiet, everything
/// else rounds to nearest even.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}
