//! Q5_1: blocks of 32 values, an f16 scale `d`, an f16 min `m`, then the
//! fifth bits and nibbles laid out as Q5_0's; value = q * d + m.

use super::q4_1::asymmetric_codes;
use super::q5_0::{codes5, pack5};
use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK32};

const BLOCK_BYTES: usize = DType::Q5_1.type_size();

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK32))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let m = f16_to_f32(u16::from_le_bytes([block[2], block[3]]));
        let codes = codes5(&block[4..8], &block[8..]);
        for (o, q) in out.iter_mut().zip(codes) {
            *o = q as f32 * d + m;
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK32)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d, min, codes) = asymmetric_codes(x, 31);
        block[0..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        block[2..4].copy_from_slice(&f32_to_f16(min).to_le_bytes());
        let (qh, qs) = block[4..].split_at_mut(4);
        pack5(&codes, qh, qs);
    }
}
