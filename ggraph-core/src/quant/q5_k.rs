//! Q5_K: super-blocks of 256 values in 8 sub-blocks of 32, as Q4_K with a
//! fifth bit per value.
//!
//! Layout (176 bytes): f16 `d`, f16 `dmin`, the 12 bytes of scales and
//! mins of Q4_K, 32 bytes of fifth bits (bit `i / 32` of byte `i % 32` for
//! value i), then 128 bytes of nibbles laid out as Q4_K's.
//! value = d * scale[j] * q - dmin * min[j].

use super::f16_to_f32;
use super::fit::ScaleSearch;
use super::q4_k::{fit_super_block, scale_min};
use crate::dtype::{DType, QK_K};

const BLOCK_BYTES: usize = DType::Q5_K.type_size();
const SEARCH: ScaleSearch = ScaleSearch {
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
};

/// Code `i` (0..32) of a Q5_K super-block from its fifth bits and nibbles.
#[inline]
pub(crate) fn code(qh: &[u8], qs: &[u8], i: usize) -> u8 {
    let (g, l) = (i / 64, i % 32);
    let low = (qs[32 * g + l] >> (4 * ((i % 64) / 32))) & 0x0f;
    low | (((qh[l] >> (i / 32)) & 1) << 4)
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let dmin = f16_to_f32(u16::from_le_bytes([block[2], block[3]]));
        let scales = &block[4..16];
        let (qh, qs) = block[16..].split_at(QK_K / 8);
        for (i, o) in out.iter_mut().enumerate() {
            let (sc, m) = scale_min(i / 32, scales);
            *o = d * sc as f32 * code(qh, qs, i) as f32 - dmin * m as f32;
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d16, dmin16, codes) = fit_super_block(x, 31, SEARCH, &mut block[4..16]);
        block[0..2].copy_from_slice(&d16.to_le_bytes());
        block[2..4].copy_from_slice(&dmin16.to_le_bytes());
        let (qh, qs) = block[16..].split_at_mut(QK_K / 8);
        qh.fill(0);
        qs.fill(0);
        for (i, c) in codes.iter().enumerate() {
            let (g, l) = (i / 64, i % 32);
            qs[32 * g + l] |= (c & 0x0f) << (4 * ((i % 64) / 32));
            qh[l] |= (c >> 4) << (i / 32);
        }
    }
}
