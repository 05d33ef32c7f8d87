//! Reference quantisation and dequantisation, byte-compatible with ggml.
//!
//! These are the plain, obviously-correct versions: the reference evaluator,
//! GGUF loading and the backends' own tests rely on them. Fast kernels live in
//! the backends and are checked against these by the conformance suite.

mod fit;
mod float;
mod iq4;
mod mxfp4;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;

pub use float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
pub use iq4::IQ4_VALUES;
pub use mxfp4::{MXFP4_VALUES, e8m0_to_f32_half};

use crate::dtype::DType;
use crate::error::{Error, Result};

fn check_lengths(dtype: DType, n_values: usize, n_bytes: usize, what: &str) -> Result<()> {
    let Some(need) = dtype.row_size(n_values) else {
        return Err(Error::InvalidArgument(format!(
            "{what} {dtype}: {n_values} values is not a multiple of the block size {}",
            dtype.block_size()
        )));
    };
    if need != n_bytes {
        return Err(Error::InvalidArgument(format!(
            "{what} {dtype}: {n_values} values take {need} bytes, buffer has {n_bytes}"
        )));
    }
    Ok(())
}

/// Decodes `dst.len()` values of type `dtype` from `src` into f32.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    check_lengths(dtype, dst.len(), src.len(), "dequantize")?;
    match dtype {
        DType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        DType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16_to_f32(u16::from_le_bytes([s[0], s[1]]));
            }
        }
        DType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16_to_f32(u16::from_le_bytes([s[0], s[1]]));
            }
        }
        DType::I32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = i32::from_le_bytes([s[0], s[1], s[2], s[3]]) as f32;
            }
        }
        DType::Q8_0 => q8_0::dequantize(src, dst),
        DType::Q4_0 => q4_0::dequantize(src, dst),
        DType::Q4_K => q4_k::dequantize(src, dst),
        DType::Q6_K => q6_k::dequantize(src, dst),
        DType::Q4_1 => q4_1::dequantize(src, dst),
        DType::Q5_0 => q5_0::dequantize(src, dst),
        DType::Q5_1 => q5_1::dequantize(src, dst),
        DType::Q2_K => q2_k::dequantize(src, dst),
        DType::Q3_K => q3_k::dequantize(src, dst),
        DType::Q5_K => q5_k::dequantize(src, dst),
        DType::IQ4_NL => iq4::dequantize_nl(src, dst),
        DType::IQ4_XS => iq4::dequantize_xs(src, dst),
        DType::MXFP4 => mxfp4::dequantize(src, dst),
    }
    Ok(())
}

/// Encodes the f32 values of `src` as type `dtype` into `dst`.
///
/// I32 destinations take the values truncated toward zero.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    check_lengths(dtype, src.len(), dst.len(), "quantize")?;
    match dtype {
        DType::F32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&s.to_le_bytes());
            }
        }
        DType::F16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f32_to_f16(*s).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f32_to_bf16(*s).to_le_bytes());
            }
        }
        DType::I32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&(*s as i32).to_le_bytes());
            }
        }
        DType::Q8_0 => q8_0::quantize(src, dst),
        DType::Q4_0 => q4_0::quantize(src, dst),
        DType::Q4_K => q4_k::quantize(src, dst),
        DType::Q6_K => q6_k::quantize(src, dst),
        DType::Q4_1 => q4_1::quantize(src, dst),
        DType::Q5_0 => q5_0::quantize(src, dst),
        DType::Q5_1 => q5_1::quantize(src, dst),
        DType::Q2_K => q2_k::quantize(src, dst),
        DType::Q3_K => q3_k::quantize(src, dst),
        DType::Q5_K => q5_k::quantize(src, dst),
        DType::IQ4_NL => iq4::quantize_nl(src, dst),
        DType::IQ4_XS => iq4::quantize_xs(src, dst),
        DType::MXFP4 => mxfp4::quantize(src, dst),
    }
    Ok(())
}

/// Quantises `values` into a freshly allocated byte vector.
pub fn quantize(dtype: DType, values: &[f32]) -> Result<Vec<u8>> {
    let n_bytes = dtype.row_size(values.len()).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "quantize {dtype}: {} values is not a multiple of the block size {}",
            values.len(),
            dtype.block_size()
        ))
    })?;
    let mut out = vec![0u8; n_bytes];
    quantize_row(dtype, values, &mut out)?;
    Ok(out)
}

/// Dequantises `bytes` holding `n` values of `dtype` into a fresh vector.
pub fn dequantize(dtype: DType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let mut out = vec![0f32; n];
    dequantize_row(dtype, bytes, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn nmse(a: &[f32], b: &[f32]) -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
        num / den
    }

    #[test]
    fn round_trip_errors_are_within_the_format_precision() {
        let x = sample(1024, 7);
        for (t, bound) in [
            (DType::F32, 0.0),
            (DType::F16, 1e-7),
            (DType::BF16, 1e-5),
            (DType::Q8_0, 1e-4),
            (DType::Q4_0, 1e-2),
            (DType::Q4_K, 5e-3),
            (DType::Q6_K, 5e-4),
            (DType::Q4_1, 1e-2),
            (DType::Q5_0, 3e-3),
            (DType::Q5_1, 2e-3),
            (DType::Q2_K, 8e-2),
            (DType::Q3_K, 3e-2),
            (DType::Q5_K, 1.5e-3),
            (DType::IQ4_NL, 6e-3),
            (DType::IQ4_XS, 6e-3),
            (DType::MXFP4, 3e-2),
        ] {
            let q = quantize(t, &x).unwrap();
            let y = dequantize(t, &q, x.len()).unwrap();
            let e = nmse(&y, &x);
            assert!(e <= bound, "{t}: nmse {e} > {bound}");
        }
    }

    #[test]
    fn zero_blocks_quantise_to_zero() {
        let x = vec![0f32; 512];
        for t in DType::QUANTIZED {
            let y = dequantize(t, &quantize(t, &x).unwrap(), 512).unwrap();
            assert!(y.iter().all(|v| *v == 0.0), "{t}");
        }
    }

    #[test]
    fn wrong_lengths_are_errors() {
        assert!(quantize(DType::Q4_0, &[0.0; 31]).is_err());
        let mut out = [0f32; 32];
        assert!(dequantize_row(DType::Q4_0, &[0u8; 17], &mut out).is_err());
    }
}
