//! Q8_0: blocks of 32 values, an f16 scale `d` then 32 signed bytes;
//! value = q * d.

use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK8_0};

const BLOCK_BYTES: usize = DType::Q8_0.type_size();

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK8_0))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        for (o, q) in out.iter_mut().zip(&block[2..]) {
            *o = (*q as i8) as f32 * d;
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK8_0)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        for (q, v) in block[2..].iter_mut().zip(x) {
            // round half away from zero, as roundf
            *q = ((v * id).round() as i8) as u8;
        }
    }
}
