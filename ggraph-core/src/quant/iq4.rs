//! IQ4_NL and IQ4_XS: 4-bit codes that index a fixed non-linear table of
//! signed values ([`IQ4_VALUES`]), with one scale per 32 values.
//!
//! IQ4_NL (18 bytes per 32 values): f16 `d`, then 16 bytes of nibbles (value
//! j in the low nibble of byte j, value j + 16 in its high nibble);
//! value = d * table[q].
//!
//! IQ4_XS (136 bytes per 256 values): f16 `d`, a little-endian u16 of the
//! eight sub-blocks' scale high bit pairs, 4 bytes of their low nibbles,
//! then eight 16-byte groups of nibbles laid out as IQ4_NL's.
//! value = d * (scale[sub] - 32) * table[q], scales being 6 bits.

use super::fit::{GROUP_MAX_EPS, nearest_int};
use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK_K, QK32};

/// The values the codes index, ggml's `kvalues_iq4nl`.
pub const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

const NL_BYTES: usize = DType::IQ4_NL.type_size();
const XS_BYTES: usize = DType::IQ4_XS.type_size();
const N_SUB: usize = QK_K / QK32;
/// How many scales either side of the first guess the fit tries.
const NTRY: i32 = 7;

/// The 32 codes of one group of 16 nibble bytes.
#[inline]
fn codes(qs: &[u8]) -> [u8; QK32] {
    std::array::from_fn(|j| {
        if j < 16 {
            qs[j] & 0x0f
        } else {
            qs[j - 16] >> 4
        }
    })
}

fn pack(codes: &[u8; QK32], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = codes[j] | (codes[j + 16] << 4);
    }
}

/// The 6-bit scale (offset by 32) of IQ4_XS sub-block `j`.
#[inline]
pub(crate) fn xs_scale(scales_h: u16, scales_l: &[u8], j: usize) -> u8 {
    let low = (scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
    let high = ((scales_h >> (2 * j)) & 3) as u8;
    low | (high << 4)
}

pub fn dequantize_nl(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.chunks_exact(NL_BYTES).zip(dst.chunks_exact_mut(QK32)) {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        for (o, q) in out.iter_mut().zip(codes(&block[2..])) {
            *o = d * IQ4_VALUES[q as usize] as f32;
        }
    }
}

pub fn dequantize_xs(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.chunks_exact(XS_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let scales_h = u16::from_le_bytes([block[2], block[3]]);
        let (scales_l, qs) = block[4..].split_at(QK_K / 64);
        for j in 0..N_SUB {
            let dl = d * (xs_scale(scales_h, scales_l, j) as i32 - 32) as f32;
            let o = &mut out[QK32 * j..QK32 * (j + 1)];
            for (o, q) in o.iter_mut().zip(codes(&qs[16 * j..16 * (j + 1)])) {
                *o = dl * IQ4_VALUES[q as usize] as f32;
            }
        }
    }
}

/// The code whose table value is nearest `x` (the lower on a tie).
fn nearest_code(x: f32) -> u8 {
    if x <= IQ4_VALUES[0] as f32 {
        return 0;
    }
    if x >= IQ4_VALUES[15] as f32 {
        return 15;
    }
    let above = IQ4_VALUES.iter().position(|v| *v as f32 > x).unwrap_or(15);
    let (lo, hi) = (IQ4_VALUES[above - 1] as f32, IQ4_VALUES[above] as f32);
    if x - lo <= hi - x {
        (above - 1) as u8
    } else {
        above as u8
    }
}

/// Fits the scale of a group of 32 values (weights x²), trying the scales
/// that put the largest magnitude on each table end's neighbourhood.
/// Returns the scale and writes the codes.
fn fit_group(x: &[f32], codes: &mut [u8; QK32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = *v;
        }
    }
    if amax < GROUP_MAX_EPS {
        codes.fill(8);
        return 0.0;
    }
    let t0 = IQ4_VALUES[0] as f32;
    let sums = |id: f32, codes: &mut [u8; QK32]| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (c, v) in codes.iter_mut().zip(x) {
            *c = nearest_code(id * v);
            let q = IQ4_VALUES[*c as usize] as f32;
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let (sumqx, sumq2) = sums(t0 / max, codes);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    let mut trial = [0u8; QK32];
    for step in -NTRY..=NTRY {
        let (sumqx, sumq2) = sums((step as f32 + t0) / max, &mut trial);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
            *codes = trial;
        }
    }
    d
}

pub fn quantize_nl(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK32).zip(dst.chunks_exact_mut(NL_BYTES)) {
        let mut c = [0u8; QK32];
        let d = fit_group(x, &mut c);
        let d16 = f32_to_f16(d);
        let df = f16_to_f32(d16);
        if df != 0.0 {
            // the codes against the scale as stored
            for (c, v) in c.iter_mut().zip(x) {
                *c = nearest_code(v / df);
            }
        }
        block[0..2].copy_from_slice(&d16.to_le_bytes());
        pack(&c, &mut block[2..]);
    }
}

pub fn quantize_xs(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(XS_BYTES)) {
        let mut c = [[0u8; QK32]; N_SUB];
        let mut scales = [0f32; N_SUB];
        let mut max_scale = 0f32;
        for j in 0..N_SUB {
            scales[j] = fit_group(&x[QK32 * j..QK32 * (j + 1)], &mut c[j]);
            if scales[j].abs() > max_scale.abs() {
                max_scale = scales[j];
            }
        }
        block.fill(0);
        let d16 = f32_to_f16(-max_scale / 32.0);
        let d = f16_to_f32(d16);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        for j in 0..N_SUB {
            let l = nearest_int(id * scales[j]).clamp(-32, 31);
            let dl = d * l as f32;
            let xs = &x[QK32 * j..QK32 * (j + 1)];
            for (c, v) in c[j].iter_mut().zip(xs) {
                *c = if dl != 0.0 { nearest_code(v / dl) } else { 8 };
            }
            let l = (l + 32) as u8;
            block[4 + j / 2] |= (l & 0x0f) << (4 * (j % 2));
            scales_h |= ((l >> 4) as u16) << (2 * j);
            pack(&c[j], &mut block[8 + 16 * j..8 + 16 * (j + 1)]);
        }
        block[0..2].copy_from_slice(&d16.to_le_bytes());
        block[2..4].copy_from_slice(&scales_h.to_le_bytes());
    }
}
