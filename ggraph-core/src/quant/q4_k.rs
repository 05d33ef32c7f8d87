//! Q4_K: super-blocks of 256 values in 8 sub-blocks of 32.
//!
//! Layout (144 bytes): f16 `d`, f16 `dmin`, 12 bytes packing eight 6-bit
//! scales and eight 6-bit mins, then 128 bytes of nibbles. Each group of 64
//! values takes 32 bytes: the first 32 values in the low nibbles, the next
//! 32 in the high nibbles. value = d * scale[j] * q - dmin * min[j].

use super::fit::{ScaleSearch, fit_scale_min, nearest_int};
use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK_K};

const BLOCK_BYTES: usize = DType::Q4_K.type_size();
const SUB: usize = 32;
const N_SUB: usize = QK_K / SUB;
const SEARCH: ScaleSearch = ScaleSearch {
    rmin: -1.0,
    rdelta: 0.1,
    nstep: 20,
};

/// Unpacks the 6-bit scale and min of sub-block `j` from the 12 packed bytes.
#[inline]
pub(crate) fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let dmin = f16_to_f32(u16::from_le_bytes([block[2], block[3]]));
        let scales = &block[4..16];
        let qs = &block[16..];
        for g in 0..QK_K / 64 {
            let (sc0, m0) = scale_min(2 * g, scales);
            let (sc1, m1) = scale_min(2 * g + 1, scales);
            let (d0, mn0) = (d * sc0 as f32, dmin * m0 as f32);
            let (d1, mn1) = (d * sc1 as f32, dmin * m1 as f32);
            let q = &qs[32 * g..32 * g + 32];
            let o = &mut out[64 * g..64 * g + 64];
            for l in 0..32 {
                o[l] = d0 * (q[l] & 0x0f) as f32 - mn0;
                o[l + 32] = d1 * (q[l] >> 4) as f32 - mn1;
            }
        }
    }
}

/// Quantises the eight sub-block scales and mins to 6 bits against two
/// f16 super-scales and packs them into `packed` (12 bytes, zeroed by the
/// caller) as [`scale_min`] reads them. Returns the f16 bits of `d` and
/// `dmin`. Q4_K and Q5_K share this layout.
pub(super) fn pack_scales_mins(
    scales: &[f32; 8],
    mins: &[f32; 8],
    packed: &mut [u8],
) -> (u16, u16) {
    let max_scale = scales.iter().fold(0f32, |m, v| m.max(*v));
    let max_min = mins.iter().fold(0f32, |m, v| m.max(*v));
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    for j in 0..8 {
        let ls = nearest_int(inv_scale * scales[j]).clamp(0, 63) as u8;
        let lm = nearest_int(inv_min * mins[j]).clamp(0, 63) as u8;
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    (f32_to_f16(max_scale / 63.0), f32_to_f16(max_min / 63.0))
}

/// Fits one super-block of Q4_K or Q5_K (codes 0..=nmax): the scales and
/// mins packed into `packed` (12 bytes), the f16 bits of `d` and `dmin`,
/// and the codes re-derived against the scales as stored.
pub(super) fn fit_super_block(
    x: &[f32],
    nmax: i32,
    search: ScaleSearch,
    packed: &mut [u8],
) -> (u16, u16, [u8; QK_K]) {
    let mut codes = [0u8; QK_K];
    let mut scales = [0f32; N_SUB];
    let mut mins = [0f32; N_SUB];
    let mut weights = [0f32; SUB];
    for j in 0..N_SUB {
        let xs = &x[SUB * j..SUB * (j + 1)];
        let av_x = (xs.iter().map(|v| v * v).sum::<f32>() / SUB as f32).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        (scales[j], mins[j]) = fit_scale_min(
            xs,
            &weights,
            nmax,
            search,
            &mut codes[SUB * j..SUB * (j + 1)],
        );
    }
    packed.fill(0);
    let (d16, dmin16) = pack_scales_mins(&scales, &mins, packed);
    let d = f16_to_f32(d16);
    let dmin = f16_to_f32(dmin16);
    for j in 0..N_SUB {
        let (sc, m) = scale_min(j, packed);
        let dj = d * sc as f32;
        if dj == 0.0 {
            continue;
        }
        let mj = dmin * m as f32;
        for i in SUB * j..SUB * (j + 1) {
            codes[i] = nearest_int((x[i] + mj) / dj).clamp(0, nmax) as u8;
        }
    }
    (d16, dmin16, codes)
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d16, dmin16, codes) = fit_super_block(x, 15, SEARCH, &mut block[4..16]);
        block[0..2].copy_from_slice(&d16.to_le_bytes());
        block[2..4].copy_from_slice(&dmin16.to_le_bytes());
        let qs = &mut block[16..];
        for g in 0..QK_K / 64 {
            for l in 0..32 {
                qs[32 * g + l] = codes[64 * g + l] | (codes[64 * g + l + 32] << 4);
            }
        }
    }
}
