//! Q2_K: super-blocks of 256 values in 16 sub-blocks of 16.
//!
//! Layout (84 bytes): 16 bytes, one per sub-block, holding a 4-bit scale
//! (low nibble) and a 4-bit min (high nibble); 64 bytes of 2-bit codes;
//! f16 `d`; f16 `dmin`. Each half of 128 values takes 32 code bytes:
//! value `32 * s + l` of the half sits in bits `2s..2s + 2` of byte l.
//! value = d * scale[sub] * q - dmin * min[sub].

use super::fit::{ScaleSearch, fit_scale_min, nearest_int};
use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK_K};

const BLOCK_BYTES: usize = DType::Q2_K.type_size();
const SUB: usize = 16;
const N_SUB: usize = QK_K / SUB;
const SEARCH: ScaleSearch = ScaleSearch {
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
};

/// The 2-bit code of value `i` (0..256) from the 64 code bytes (Q2_K and
/// the low bits of Q3_K).
#[inline]
pub(crate) fn code2(qs: &[u8], i: usize) -> u8 {
    let (half, s, l) = (i / 128, (i % 128) / 32, i % 32);
    (qs[32 * half + l] >> (2 * s)) & 3
}

/// Packs 256 codes (their two low bits) as [`code2`] reads them.
pub(super) fn pack2(codes: &[u8; QK_K], qs: &mut [u8]) {
    qs.fill(0);
    for (i, c) in codes.iter().enumerate() {
        let (half, s, l) = (i / 128, (i % 128) / 32, i % 32);
        qs[32 * half + l] |= (c & 3) << (2 * s);
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let (scales, rest) = block.split_at(QK_K / 16);
        let (qs, rest) = rest.split_at(QK_K / 4);
        let d = f16_to_f32(u16::from_le_bytes([rest[0], rest[1]]));
        let dmin = f16_to_f32(u16::from_le_bytes([rest[2], rest[3]]));
        for (i, o) in out.iter_mut().enumerate() {
            let sc = scales[i / SUB];
            let dl = d * (sc & 0x0f) as f32;
            let ml = dmin * (sc >> 4) as f32;
            *o = dl * code2(qs, i) as f32 - ml;
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
        let mut mins = [0f32; N_SUB];
        let mut weights = [0f32; SUB];
        for j in 0..N_SUB {
            let xs = &x[SUB * j..SUB * (j + 1)];
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            (scales[j], mins[j]) =
                fit_scale_min(xs, &weights, 3, SEARCH, &mut codes[SUB * j..SUB * (j + 1)]);
        }
        let max_scale = scales.iter().fold(0f32, |m, v| m.max(*v));
        let max_min = mins.iter().fold(0f32, |m, v| m.max(*v));
        let (sc_bytes, rest) = block.split_at_mut(QK_K / 16);
        let (qs, ds) = rest.split_at_mut(QK_K / 4);
        let inv_scale = if max_scale > 0.0 {
            15.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 15.0 / max_min } else { 0.0 };
        for j in 0..N_SUB {
            let ls = nearest_int(inv_scale * scales[j]).clamp(0, 15) as u8;
            let lm = nearest_int(inv_min * mins[j]).clamp(0, 15) as u8;
            sc_bytes[j] = ls | (lm << 4);
        }
        let d16 = f32_to_f16(max_scale / 15.0);
        let dmin16 = f32_to_f16(max_min / 15.0);
        let (d, dmin) = (f16_to_f32(d16), f16_to_f32(dmin16));
        for j in 0..N_SUB {
            let dl = d * (sc_bytes[j] & 0x0f) as f32;
            if dl == 0.0 {
                continue;
            }
            let ml = dmin * (sc_bytes[j] >> 4) as f32;
            for i in SUB * j..SUB * (j + 1) {
                codes[i] = nearest_int((x[i] + ml) / dl).clamp(0, 3) as u8;
            }
        }
        pack2(&codes, qs);
        ds[0..2].copy_from_slice(&d16.to_le_bytes());
        ds[2..4].copy_from_slice(&dmin16.to_le_bytes());
    }
}
