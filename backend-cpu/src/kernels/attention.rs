//! Fused attention (flash_attn_ext): one pass over the keys per query row
//! with an online softmax, so the score matrix never exists in memory.

use super::norm::alibi_slope;
use super::par_ranges;
use crate::tensor_ref::TRef;

pub fn flash_attn_ext(
    dst: TRef,
    q: TRef,
    k: TRef,
    v: TRef,
    mask: Option<TRef>,
    scale: f32,
    max_bias: f32,
    softcap: f32,
) {
    let d = q.ne[0];
    let dv = v.ne[0];
    let n_kv = k.ne[1];
    let n_head = q.ne[2];
    let group = (n_head / k.ne[2].max(1)).max(1);
    // dst [dv, n_head, n_q, n_seq]: one row per (head, query, sequence)
    par_ranges(dst.nrows(), 1, |range| {
        let mut qrow = vec![0f32; d];
        let mut krow = vec![0f32; d];
        let mut vrow = vec![0f32; dv];
        let mut acc = vec![0f32; dv];
        let mut mrow = vec![0f32; n_kv];
        let dot = super::matmul::dot_fn();
        for r in range {
            let (h, iq, is) = dst.row_coords(r);
            let hk = h / group;
            // SAFETY: rows in bounds (checked by the builder).
            unsafe { q.load_row(iq, h, is, &mut qrow) };
            let slope = alibi_slope(max_bias, n_head, h);
            if let Some(m) = mask {
                // SAFETY: mask row in bounds.
                unsafe { m.load_row(iq, h % m.ne[2], is % m.ne[3], &mut mrow) };
            }
            acc.fill(0.0);
            let mut max = f32::NEG_INFINITY;
            let mut sum = 0f32;
            for j in 0..n_kv {
                let mv = if mask.is_some() { mrow[j] } else { 0.0 };
                if mv == f32::NEG_INFINITY {
                    continue;
                }
                // SAFETY: key and value rows in bounds.
                unsafe { k.load_row(j, hk, is, &mut krow) };
                let mut s = dot(&qrow, &krow) * scale;
                if softcap != 0.0 {
                    s = softcap * (s / softcap).tanh();
                }
                s += slope * mv;
                // SAFETY: as above.
                unsafe { v.load_row(j, hk, is, &mut vrow) };
                if s > max {
                    let c = (max - s).exp();
                    acc.iter_mut().for_each(|a| *a *= c);
                    sum *= c;
                    max = s;
                }
                let p = (s - max).exp();
                sum += p;
                acc.iter_mut().zip(&vrow).for_each(|(a, x)| *a += p * x);
            }
            let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
            acc.iter_mut().for_each(|a| *a *= inv);
            // SAFETY: this task owns dst row r.
            unsafe { dst.store_row(h, iq, is, &acc) };
        }
    });
}
