//! Q3_K: super-blocks of 256 values in 16 sub-blocks of 16.
//!
//! Layout (110 bytes): 32 bytes of high bits (bit `i / 32` of byte `i % 32`
//! for value i), 64 bytes of 2-bit codes laid out as Q2_K's, 12 bytes of
//! 6-bit scales, f16 `d`. A value's 3-bit code is its two low bits plus 4
//! when its high bit is set; value = d * (scale[sub] - 32) * (code - 4).
//!
//! The scales: sub-block j's low nibble is the low (j < 8) or high
//! (j >= 8) nibble of byte `j % 8`; its top two bits are bits
//! `2 * (j / 4)..` of byte `8 + j % 4`.

use super::fit::{GROUP_MAX_EPS, fit_symmetric, nearest_int};
use super::q2_k::{code2, pack2};
use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK_K};

const BLOCK_BYTES: usize = DType::Q3_K.type_size();
const SUB: usize = 16;
const N_SUB: usize = QK_K / SUB;

/// The 6-bit scale of sub-block `j` (0..16), offset by 32.
#[inline]
pub(crate) fn scale(s: &[u8], j: usize) -> u8 {
    let low = (s[j % 8] >> (4 * (j / 8))) & 0x0f;
    let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    low | (high << 4)
}

/// The 3-bit code (0..8) of value `i` from the high bits and code bytes.
#[inline]
pub(crate) fn code3(hmask: &[u8], qs: &[u8], i: usize) -> u8 {
    code2(qs, i) | (((hmask[i % 32] >> (i / 32)) & 1) << 2)
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let (hmask, rest) = block.split_at(QK_K / 8);
        let (qs, rest) = rest.split_at(QK_K / 4);
        let (scales, d) = rest.split_at(12);
        let d = f16_to_f32(u16::from_le_bytes([d[0], d[1]]));
        for (i, o) in out.iter_mut().enumerate() {
            let dl = d * (scale(scales, i / SUB) as i32 - 32) as f32;
            *o = dl * (code3(hmask, qs, i) as i32 - 4) as f32;
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let mut codes = [0u8; QK_K];
        let mut scales = [0f32; N_SUB];
        let mut max_scale = 0f32;
        for (j, s) in scales.iter_mut().enumerate() {
            *s = fit_symmetric(
                &x[SUB * j..SUB * (j + 1)],
                4,
                &mut codes[SUB * j..SUB * (j + 1)],
            );
            if s.abs() > max_scale.abs() {
                max_scale = *s;
            }
        }
        block.fill(0);
        let (hmask, rest) = block.split_at_mut(QK_K / 8);
        let (qs, rest) = rest.split_at_mut(QK_K / 4);
        let (sc_bytes, ds) = rest.split_at_mut(12);
        if max_scale.abs() < GROUP_MAX_EPS {
            // d = 0: every value reads as zero
            continue;
        }
        let iscale = -32.0 / max_scale;
        for j in 0..N_SUB {
            let l = nearest_int(iscale * scales[j]).clamp(-32, 31) + 32;
            pack_scale(sc_bytes, j, l as u8);
        }
        let d16 = f32_to_f16(1.0 / iscale);
        let d = f16_to_f32(d16);
        ds.copy_from_slice(&d16.to_le_bytes());
        for j in 0..N_SUB {
            let dl = d * (scale(sc_bytes, j) as i32 - 32) as f32;
            for i in SUB * j..SUB * (j + 1) {
                codes[i] = if dl == 0.0 {
                    4
                } else {
                    (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as u8
                };
            }
        }
        for (i, c) in codes.iter().enumerate() {
            hmask[i % 32] |= (c >> 2) << (i / 32);
        }
        pack2(&codes, qs);
    }
}

/// Stores the 6-bit scale `l` of sub-block `j` as [`scale`] reads it.
fn pack_scale(s: &mut [u8], j: usize, l: u8) {
    s[j % 8] |= (l & 0x0f) << (4 * (j / 8));
    s[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
}
