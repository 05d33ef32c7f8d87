//! State-space model ops: ssm_conv (the short causal convolution of
//! Mamba's and LFM2's convolution layers) and ssm_scan (Mamba's selective
//! scan).

use ggraph_core::Result;

use super::elementwise::softplus;
use super::indices::check_indices;
use super::isa::{Isa, active};
use super::parallel::par_ranges;
use crate::kernels::tensor_ref::TRef;

/// `dst[i, t, s] = sum over k < d_conv of sx[t + k, i, s] * c[k, i]`,
/// summed in f32 in `k` order as ggml-cpu's x86 build does: its compiler
/// multiplies the taps in fours, so the first `d_conv - d_conv % 4`
/// products are rounded before they are added and the last `d_conv % 4`
/// fused into the sum; the channels split among the threads.
pub fn ssm_conv(dst: TRef, sx: TRef, c: TRef) {
    let d_inner = c.ne[1];
    let isa = active();
    par_ranges(d_inner, 16, |channels| {
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 {
            // SAFETY: the processor has AVX2 and FMA (checked by `active`).
            return unsafe { conv_channels_fma(dst, sx, c, channels) };
        }
        conv_channels(dst, sx, c, channels)
    });
}

/// [`ssm_conv`] of the channels `channels`.
#[inline(always)]
fn conv_channels(dst: TRef, sx: TRef, c: TRef, channels: std::ops::Range<usize>) {
    let d_conv = c.ne[0];
    let (n_t, n_s) = (dst.ne[1], dst.ne[2]);
    let rounded = d_conv / 4 * 4;
    let mut x = vec![0f32; sx.ne[0]];
    let mut w = vec![0f32; d_conv];
    for i in channels {
        // SAFETY: row i of c is in bounds (checked by the builder).
        unsafe { c.load_row(i, 0, 0, &mut w) };
        let (plain, fused) = w.split_at(rounded);
        for s in 0..n_s {
            // SAFETY: row (i, s) of sx is in bounds (checked by the
            // builder).
            unsafe { sx.load_row(i, s, 0, &mut x) };
            for t in 0..n_t {
                let (xp, xf) = x[t..t + d_conv].split_at(rounded);
                let mut sum = 0f32;
                for (a, b) in xp.iter().zip(plain) {
                    sum += a * b;
                }
                for (a, b) in xf.iter().zip(fused) {
                    sum = a.mul_add(*b, sum);
                }
                // SAFETY: element (i, t, s) of dst is in bounds; this task
                // owns channel i.
                unsafe { (dst.elem_ptr([i, t, s, 0]) as *mut f32).write_unaligned(sum) };
            }
        }
    }
}

/// [`conv_channels`] with `mul_add` as one instruction.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn conv_channels_fma(dst: TRef, sx: TRef, c: TRef, channels: std::ops::Range<usize>) {
    conv_channels(dst, sx, c, channels)
}

/// The sources of ssm_scan, in the builder's order.
#[derive(Clone, Copy)]
pub struct ScanSources {
    pub s: TRef,
    pub x: TRef,
    pub dt: TRef,
    pub a: TRef,
    pub b: TRef,
    pub c: TRef,
    pub ids: TRef,
}

/// ssm_scan ([`Op::SsmScan`](ggraph_core::ir::Op::SsmScan)): y, then the
/// final states, into `dst`; the heads split among the threads, as in
/// ggml-cpu.
pub fn ssm_scan(dst: TRef, src: &ScanSources) -> Result<()> {
    let ScanSources {
        s,
        x,
        dt,
        a,
        b,
        c,
        ids,
    } = *src;
    check_indices("ssm_scan", ids, s.ne[3])?;
    let d_state = s.ne[0];
    let [head_dim, n_head, n_t, n_s] = x.ne;
    let per_group = n_head / b.ne[1].max(1);
    let mamba2 = a.ne[0] == 1;
    let states_at = head_dim * n_head * n_t * n_s;
    let out = |i: usize| dst.elem_ptr([i, 0, 0, 0]) as *mut f32;
    let isa = active();
    par_ranges(n_head, 1, |heads| {
        let mut st = vec![0f32; head_dim * d_state];
        let (mut bv, mut cv, mut av) = (
            vec![0f32; d_state],
            vec![0f32; d_state],
            vec![0f32; a.ne[0]],
        );
        for j in 0..n_s {
            // SAFETY: checked above to be a row of s.
            let id = unsafe { ids.get_i32([j, 0, 0, 0]) } as usize;
            for h in heads.clone() {
                let grp = h / per_group;
                // SAFETY: rows in bounds (checked by the builder).
                unsafe { a.load_row(h, 0, 0, &mut av) };
                for i1 in 0..head_dim {
                    // SAFETY: row (i1, h, id) of s is in bounds.
                    unsafe { s.load_row(i1, h, id, &mut st[i1 * d_state..(i1 + 1) * d_state]) };
                }
                for t in 0..n_t {
                    // SAFETY: elements and rows in bounds (checked by the
                    // builder).
                    let d = softplus(unsafe { dt.get_f32([h, t, j, 0]) });
                    unsafe {
                        b.load_row(grp, t, j, &mut bv);
                        c.load_row(grp, t, j, &mut cv);
                    }
                    let decay_2 = (d * av[0]).exp();
                    for i1 in 0..head_dim {
                        // SAFETY: element in bounds.
                        let x_dt = unsafe { x.get_f32([i1, h, t, j]) } * d;
                        let row = &mut st[i1 * d_state..(i1 + 1) * d_state];
                        let sum = if mamba2 {
                            mamba2_row(isa, row, &bv, &cv, decay_2, x_dt)
                        } else {
                            let mut sum = 0f32;
                            for (((r, b), c), a) in row.iter_mut().zip(&bv).zip(&cv).zip(&av) {
                                let v = *r * (d * a).exp() + b * x_dt;
                                sum += v * c;
                                *r = v;
                            }
                            sum
                        };
                        let yi = ((j * n_t + t) * n_head + h) * head_dim + i1;
                        // SAFETY: y element in bounds; this task owns head h.
                        unsafe { out(yi).write_unaligned(sum) };
                    }
                }
                let at = states_at + (j * n_head + h) * head_dim * d_state;
                for (k, v) in st.iter().enumerate() {
                    // SAFETY: state element in bounds; this task owns head h.
                    unsafe { out(at + k).write_unaligned(*v) };
                }
            }
        }
    });
    Ok(())
}

/// One state row of Mamba-2's scan, updated in place, and its dot with C,
/// as ggml-cpu's x86 build (AVX2, FMA) computes them: over the first
/// `n - n % 32` values the new state `r * decay + b * x_dt` rounded
/// twice, summed by `fma` into four accumulators of eight lanes, folded
/// as its `vec_dot_f32` folds them; the rest one by one, its compiler
/// fusing `r * decay` into the add and the product with C into the sum.
fn mamba2_row(isa: Isa, row: &mut [f32], b: &[f32], c: &[f32], decay: f32, x_dt: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        // SAFETY: the processor has AVX2 and FMA (checked by `active`).
        return unsafe { mamba2_row_fma(row, b, c, decay, x_dt) };
    }
    let _ = isa;
    mamba2_row_portable(row, b, c, decay, x_dt)
}

#[inline(always)]
fn mamba2_row_portable(row: &mut [f32], b: &[f32], c: &[f32], decay: f32, x_dt: f32) -> f32 {
    let np = row.len() & !31;
    let mut acc = [[0f32; 8]; 4];
    for (i, ((r, b), c)) in row[..np].iter_mut().zip(b).zip(c).enumerate() {
        let v = *r * decay + b * x_dt;
        let lane = &mut acc[i % 32 / 8][i % 8];
        *lane = v.mul_add(*c, *lane);
        *r = v;
    }
    let s: [f32; 8] = std::array::from_fn(|t| (acc[0][t] + acc[2][t]) + (acc[1][t] + acc[3][t]));
    let mut sum = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for ((r, b), c) in row[np..].iter_mut().zip(&b[np..]).zip(&c[np..]) {
        let v = r.mul_add(decay, b * x_dt);
        sum = v.mul_add(*c, sum);
        *r = v;
    }
    sum
}

/// [`mamba2_row_portable`] with `mul_add` as one instruction.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn mamba2_row_fma(row: &mut [f32], b: &[f32], c: &[f32], decay: f32, x_dt: f32) -> f32 {
    mamba2_row_portable(row, b, c, decay, x_dt)
}
