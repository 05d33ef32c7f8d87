//! Q5_0: blocks of 32 values, an f16 scale `d`, a little-endian u32 whose
//! bit j is the fifth bit of value j, then 16 bytes of low nibbles laid out
//! as Q4_0's; value = (q - 16) * d.

use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK32};

const BLOCK_BYTES: usize = DType::Q5_0.type_size();
const HALF: usize = QK32 / 2;

/// The 5-bit codes of a Q5_0 or Q5_1 block from its fifth bits and
/// nibbles.
pub(super) fn codes5(qh: &[u8], qs: &[u8]) -> [u8; QK32] {
    let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    std::array::from_fn(|j| {
        let low = if j < HALF {
            qs[j] & 0x0f
        } else {
            qs[j - HALF] >> 4
        };
        low | ((((high >> j) & 1) as u8) << 4)
    })
}

/// Packs 5-bit codes into the fifth bits and nibbles of a block.
pub(super) fn pack5(codes: &[u8; QK32], qh: &mut [u8], qs: &mut [u8]) {
    let mut high = 0u32;
    for (j, c) in codes.iter().enumerate() {
        high |= ((c >> 4) as u32 & 1) << j;
    }
    qh.copy_from_slice(&high.to_le_bytes());
    for j in 0..HALF {
        qs[j] = (codes[j] & 0x0f) | ((codes[j + HALF] & 0x0f) << 4);
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK32))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let codes = codes5(&block[2..6], &block[6..]);
        for (o, q) in out.iter_mut().zip(codes) {
            *o = d * (q as i32 - 16) as f32;
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK32)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        // the value of largest magnitude, with its sign, maps to -16
        let max = x
            .iter()
            .fold(0f32, |m, v| if v.abs() > m.abs() { *v } else { m });
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let codes: [u8; QK32] =
            std::array::from_fn(|j| ((x[j] * id + 16.5).trunc() as i32).clamp(0, 31) as u8);
        block[0..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        let (qh, qs) = block[2..].split_at_mut(4);
        pack5(&codes, qh, qs);
    }
}
