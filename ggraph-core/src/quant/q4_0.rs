//! Q4_0: blocks of 32 values, an f16 scale `d` then 16 bytes of nibbles.
//! Byte j holds value j in its low nibble and value j + 16 in its high
//! nibble; value = (q - 8) * d.

use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK4_0};

const BLOCK_BYTES: usize = DType::Q4_0.type_size();
const HALF: usize = QK4_0 / 2;

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK4_0))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        for (j, q) in block[2..].iter().enumerate() {
            out[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
            out[j + HALF] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK4_0)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        // the value of largest magnitude, with its sign, maps to -8
        let max = x
            .iter()
            .fold(0f32, |m, v| if v.abs() > m.abs() { *v } else { m });
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        let code = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
        for j in 0..HALF {
            block[2 + j] = code(x[j]) | (code(x[j + HALF]) << 4);
        }
    }
}
