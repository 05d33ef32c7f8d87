//! Q4_K: super-blocks of 256 values in 8 sub-blocks of 32.
//!
//! Layout (144 bytes): f16 `d`, f16 `dmin`, 12 bytes packing eight 6-bit
//! scales and eight 6-bit mins, then 128 bytes of nibbles. Each group of 64
//! values takes 32 bytes: the first 32 values in the low nibbles, the next
//! 32 in the high nibbles. value = d * scale[j] * q - dmin * min[j].

use super::{f16_to_f32, f32_to_f16, nearest_int};
use crate::dtype::{DType, QK_K};

const BLOCK_BYTES: usize = DType::Q4_K.type_size();
const SUB: usize = 32;
const N_SUB: usize = QK_K / SUB;

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

/// Fits `codes * scale - min_shift` to `x` with codes in 0..=nmax, by a
/// weighted least-squares search over a few candidate scales (ggml's
/// `make_qkx2_quants`). Returns `(scale, min_shift)`; min_shift >= 0.
fn fit_scale_min(x: &[f32], weights: &[f32], nmax: i32, codes: &mut [u8]) -> (f32, f32) {
    const RMIN: f32 = -1.0;
    const RDELTA: f32 = 0.1;
    const NSTEP: i32 = 20;

    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = 0f32;
    let mut sum_x = 0f32;
    for (v, w) in x.iter().zip(weights) {
        min = min.min(*v);
        max = max.max(*v);
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        codes.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for ((v, w), c) in x.iter().zip(weights).zip(codes.iter_mut()) {
        let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
        *c = l as u8;
        let diff = scale * l as f32 + min - v;
        best_error += w * diff * diff;
    }
    let mut trial = [0u8; SUB];
    for step in 0..=NSTEP {
        iscale = (RMIN + RDELTA * step as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((v, w), t) in x.iter().zip(weights).zip(trial.iter_mut()) {
            let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
            *t = l as u8;
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut err = 0f32;
            for ((v, w), t) in x.iter().zip(weights).zip(&trial) {
                let diff = this_scale * *t as f32 + this_min - v;
                err += w * diff * diff;
            }
            if err < best_error {
                codes[..x.len()].copy_from_slice(&trial[..x.len()]);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
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
            let av_x = (xs.iter().map(|v| v * v).sum::<f32>() / SUB as f32).sqrt();
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            (scales[j], mins[j]) =
                fit_scale_min(xs, &weights, 15, &mut codes[SUB * j..SUB * (j + 1)]);
        }
        let max_scale = scales.iter().fold(0f32, |m, v| m.max(*v));
        let max_min = mins.iter().fold(0f32, |m, v| m.max(*v));
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };

        block.fill(0);
        let packed = &mut block[4..16];
        for j in 0..N_SUB {
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
        let d16 = f32_to_f16(max_scale / 63.0);
        let dmin16 = f32_to_f16(max_min / 63.0);
        let d = f16_to_f32(d16);
        let dmin = f16_to_f32(dmin16);

        // re-derive the codes against the scales as stored
        for j in 0..N_SUB {
            let (sc, m) = scale_min(j, &block[4..16]);
            let dj = d * sc as f32;
            if dj == 0.0 {
                continue;
            }
            let mj = dmin * m as f32;
            for i in SUB * j..SUB * (j + 1) {
                codes[i] = nearest_int((x[i] + mj) / dj).clamp(0, 15) as u8;
            }
        }
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
