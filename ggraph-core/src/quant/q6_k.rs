//! Q6_K: super-blocks of 256 values in 16 sub-blocks of 16.
//!
//! Layout (210 bytes): 128 bytes of low nibbles `ql`, 64 bytes of high bit
//! pairs `qh`, 16 signed 8-bit scales, f16 `d`. Within each half of 128
//! values, value l (0..32) of the four quarters shares `qh[l]`.
//! value = d * scale[sub] * (q - 32).

use super::fit::{GROUP_MAX_EPS, fit_symmetric, nearest_int};
use super::{f16_to_f32, f32_to_f16};
use crate::dtype::{DType, QK_K};

const BLOCK_BYTES: usize = DType::Q6_K.type_size();
const SUB: usize = 16;
const N_SUB: usize = QK_K / SUB;

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let (ql, rest) = block.split_at(QK_K / 2);
        let (qh, rest) = rest.split_at(QK_K / 4);
        let (sc, d) = rest.split_at(QK_K / 16);
        let d = f16_to_f32(u16::from_le_bytes([d[0], d[1]]));
        for half in 0..2 {
            let ql = &ql[64 * half..];
            let qh = &qh[32 * half..];
            let sc = &sc[8 * half..];
            let o = &mut out[128 * half..];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                o[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                o[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                o[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                o[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
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
        let mut max_abs_scale = 0f32;
        for (j, s) in scales.iter_mut().enumerate() {
            *s = fit_symmetric(
                &x[SUB * j..SUB * (j + 1)],
                32,
                &mut codes[SUB * j..SUB * (j + 1)],
            );
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = *s;
            }
        }
        block.fill(0);
        if max_abs_scale < GROUP_MAX_EPS {
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d16 = f32_to_f16(1.0 / iscale);
        let d = f16_to_f32(d16);
        let (ql, rest) = block.split_at_mut(QK_K / 2);
        let (qh, rest) = rest.split_at_mut(QK_K / 4);
        let (sc, dbytes) = rest.split_at_mut(QK_K / 16);
        dbytes.copy_from_slice(&d16.to_le_bytes());
        for j in 0..N_SUB {
            let s = nearest_int(iscale * scales[j]).min(127) as i8;
            sc[j] = s as u8;
            let dj = d * s as f32;
            if dj == 0.0 {
                continue;
            }
            for i in SUB * j..SUB * (j + 1) {
                codes[i] = (nearest_int(x[i] / dj).clamp(-32, 31) + 32) as u8;
            }
        }
        for half in 0..2 {
            let c = &codes[128 * half..];
            let ql = &mut ql[64 * half..];
            let qh = &mut qh[32 * half..];
            for l in 0..32 {
                ql[l] = (c[l] & 0x0f) | ((c[l + 64] & 0x0f) << 4);
                ql[l + 32] = (c[l + 32] & 0x0f) | ((c[l + 96] & 0x0f) << 4);
                qh[l] = (c[l] >> 4)
                    | ((c[l + 32] >> 4) << 2)
                    | ((c[l + 64] >> 4) << 4)
                    | ((c[l + 96] >> 4) << 6);
            }
        }
    }
}
