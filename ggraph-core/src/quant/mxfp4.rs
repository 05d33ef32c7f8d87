//! MXFP4 (OCP microscaling FP4, 17 bytes per 32 values): one E8M0
//! exponent byte `e`, then 16 bytes of E2M1 codes (value j in the low
//! nibble of byte j, value j + 16 in its high nibble).
//! value = [`e8m0_to_f32_half`]`(e) * MXFP4_VALUES[q]`: the table holds
//! E2M1's values doubled, so that they are integers, and the scale is
//! halved to match.

use crate::dtype::{DType, QK32};

/// E2M1's sixteen values doubled, ggml's `kvalues_mxfp4`: codes 8..16 are
/// the negatives of 0..8 (code 8, negative zero, is 0).
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

const BYTES: usize = DType::MXFP4.type_size();

/// Half the E8M0 scale `2^(e - 127)`, as ggml's `ggml_e8m0_to_fp32_half`
/// forms its bits: a subnormal for `e` 0 and 1, else exponent `e - 1`.
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.chunks_exact(BYTES).zip(dst.chunks_exact_mut(QK32)) {
        let d = e8m0_to_f32_half(block[0]);
        for (j, &b) in block[1..].iter().enumerate() {
            out[j] = MXFP4_VALUES[(b & 0x0f) as usize] as f32 * d;
            out[j + 16] = MXFP4_VALUES[(b >> 4) as usize] as f32 * d;
        }
    }
}

/// The `gguf` package's `MXFP4.quantize_blocks`: the exponent
/// `floor(log2(max |x|)) - 2 + 127` (log2 rounded to f32 first, as numpy
/// computes it on f32), then each value's nearest table entry, the first
/// of equals.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK32).zip(dst.chunks_exact_mut(BYTES)) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let e = if amax > 0.0 {
            let log2 = (amax as f64).log2() as f32;
            // numpy's cast to uint8 wraps what falls outside it
            (log2.floor() - 2.0 + 127.0) as i32 as u8
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        let nearest = |v: f32| -> u8 {
            let mut best = 0;
            let mut best_err = f32::INFINITY;
            for (i, &q) in MXFP4_VALUES.iter().enumerate() {
                let err = (d * q as f32 - v).abs();
                if err < best_err {
                    best = i as u8;
                    best_err = err;
                }
            }
            best
        };
        block[0] = e;
        for j in 0..16 {
            block[1 + j] = nearest(x[j]) | (nearest(x[j + 16]) << 4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_half_scale_takes_ggml_bits_at_every_exponent() {
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(2), 2f32.powi(-126));
        // subnormals below: 2^-127 and 2^-126 halved
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        for e in 2..=254u8 {
            assert_eq!(e8m0_to_f32_half(e), 2f64.powi(e as i32 - 128) as f32, "{e}");
        }
    }

    #[test]
    fn values_on_the_grid_quantise_exactly() {
        // max 12 * 0.5 = 6: exponent floor(log2 6) - 2 + 127 = 127
        let x: Vec<f32> = (0..32).map(|i| MXFP4_VALUES[i % 16] as f32 * 0.5).collect();
        let mut q = [0u8; BYTES];
        quantize(&x, &mut q);
        assert_eq!(q[0], 127);
        let mut y = [0f32; 32];
        dequantize(&q, &mut y);
        assert_eq!(x, y);
    }
}
