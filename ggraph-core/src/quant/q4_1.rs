//! Q4_1: blocks of 32 values, an f16 scale `d`, an f16 min `m`, then 16
//! bytes of nibbles (value j in the low nibble of byte j, value j + 16 in
//! its high nibble); value = q * d + m.

use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK32};

const BLOCK_BYTES: usize = DType::Q4_1.type_size();
const HALF: usize = QK32 / 2;

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK32))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let m = f16_to_f32(u16::from_le_bytes([block[2], block[3]]));
        for (j, q) in block[4..].iter().enumerate() {
            out[j] = (q & 0x0f) as f32 * d + m;
            out[j + HALF] = (q >> 4) as f32 * d + m;
        }
    }
}

/// The codes `0..=nmax` of an asymmetric block: `(d, min, codes)` with
/// `d = (max - min) / nmax`, as Q4_1 and Q5_1 fit them.
pub(super) fn asymmetric_codes(x: &[f32], nmax: u8) -> (f32, f32, [u8; QK32]) {
    let min = x.iter().fold(f32::INFINITY, |m, v| m.min(*v));
    let max = x.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
    let d = (max - min) / nmax as f32;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut codes = [0u8; QK32];
    for (c, v) in codes.iter_mut().zip(x) {
        *c = (((v - min) * id + 0.5).trunc() as i32).clamp(0, nmax as i32) as u8;
    }
    (d, min, codes)
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK32)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d, min, codes) = asymmetric_codes(x, 15);
        block[0..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        block[2..4].copy_from_slice(&f32_to_f16(min).to_le_bytes());
        for j in 0..HALF {
            block[4 + j] = codes[j] | (codes[j + HALF] << 4);
        }
    }
}
