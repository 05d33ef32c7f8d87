//! State-space model ops: ssm_conv (the short causal convolution of
//! Mamba's and LFM2's convolution layers) and ssm_scan (Mamba's selective
//! scan).

use ggraph_core::Result;

use super::elementwise::softplus;
use super::indices::check_indices;
use super::parallel::par_ranges;
use crate::kernels::tensor_ref::TRef;

/// `dst[i, t, s] = sum over k < d_conv of sx[t + k, i, s] * c[k, i]`,
/// summed in f32 in `k` order as ggml-cpu does; the channels split among
/// the threads.
pub fn ssm_conv(dst: TRef, sx: TRef, c: TRef) {
    let (d_conv, d_inner) = (c.ne[0], c.ne[1]);
    let (n_t, n_s) = (dst.ne[1], dst.ne[2]);
    par_ranges(d_inner, 16, |channels| {
        let mut x = vec![0f32; sx.ne[0]];
        let mut w = vec![0f32; d_conv];
        for i in channels {
            // SAFETY: row i of c is in bounds (checked by the builder).
            unsafe { c.load_row(i, 0, 0, &mut w) };
            for s in 0..n_s {
                // SAFETY: row (i, s) of sx is in bounds (checked by the
                // builder).
                unsafe { sx.load_row(i, s, 0, &mut x) };
                for t in 0..n_t {
                    let mut sum = 0f32;
                    for (a, b) in x[t..t + d_conv].iter().zip(&w) {
                        sum += a * b;
                    }
                    // SAFETY: element (i, t, s) of dst is in bounds; this
                    // task owns channel i.
                    unsafe { (dst.elem_ptr([i, t, s, 0]) as *mut f32).write_unaligned(sum) };
                }
            }
        }
    });
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
                        let mut sum = 0f32;
                        if mamba2 {
                            // one decay for the row: a loop the compiler
                            // vectorises
                            for ((r, b), c) in row.iter_mut().zip(&bv).zip(&cv) {
                                let v = *r * decay_2 + b * x_dt;
                                sum += v * c;
                                *r = v;
                            }
                        } else {
                            for (((r, b), c), a) in row.iter_mut().zip(&bv).zip(&cv).zip(&av) {
                                let v = *r * (d * a).exp() + b * x_dt;
                                sum += v * c;
                                *r = v;
                            }
                        }
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
