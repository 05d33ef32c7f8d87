//! Gated DeltaNet's recurrence (ggml's `gated_delta_net`, one state
//! snapshot): each head's state matrix decays by its gate, takes the
//! delta rule's rank-one update and is read by the query, token by token.

use super::isa::{Isa, active};
use super::matmul::vec_dot_f32_rows;
use super::parallel::par_ranges;
use crate::kernels::tensor_ref::TRef;

/// The sources of gated_delta_net, in the builder's order.
#[derive(Clone, Copy)]
pub struct DeltaNetSources {
    pub q: TRef,
    pub k: TRef,
    pub v: TRef,
    pub g: TRef,
    pub beta: TRef,
    pub state: TRef,
}

/// gated_delta_net ([`Op::GatedDeltaNet`](ggraph_core::ir::Op::GatedDeltaNet)):
/// the outputs, then the final states, into `dst`; the (head, sequence)
/// pairs split among the threads, as in ggml-cpu. Each state is held
/// transposed (`m[j * S + i]` is `M[i][j]`, as the state tensor stores
/// it), so every product runs along contiguous rows.
pub fn gated_delta_net(dst: TRef, src: &DeltaNetSources) {
    let DeltaNetSources {
        q,
        k,
        v,
        g,
        beta,
        state,
    } = *src;
    let [s, h, n_t, n_s] = v.ne;
    let (h_k, n_s_k) = (q.ne[1], q.ne[3]);
    let per_channel = g.ne[0] == s;
    let scale = 1.0 / (s as f32).sqrt();
    let states_at = s * h * n_t * n_s;
    let out = |i: usize| dst.elem_ptr([i, 0, 0, 0]) as *mut f32;
    let isa = active();
    par_ranges(h * n_s, 1, |pairs| {
        let mut m = vec![0f32; s * s];
        let (mut qv, mut kv, mut vv, mut gv, mut delta, mut dots) = (
            vec![0f32; s],
            vec![0f32; s],
            vec![0f32; s],
            vec![0f32; g.ne[0]],
            vec![0f32; s],
            vec![0f32; s],
        );
        for pair in pairs {
            let (head, seq) = (pair % h, pair / h);
            let (head_k, seq_k) = (head % h_k, seq / (n_s / n_s_k));
            for (j, row) in m.chunks_exact_mut(s).enumerate() {
                // SAFETY: row (j, head, seq) of the state is in bounds
                // (checked by the builder).
                unsafe { state.load_row(j, head, seq, row) };
            }
            for t in 0..n_t {
                // SAFETY: rows and elements in bounds (checked by the
                // builder).
                let b = unsafe {
                    q.load_row(head_k, t, seq_k, &mut qv);
                    k.load_row(head_k, t, seq_k, &mut kv);
                    v.load_row(head, t, seq, &mut vv);
                    g.load_row(head, t, seq, &mut gv);
                    beta.get_f32([0, head, t, seq])
                };
                if per_channel {
                    gv.iter_mut().for_each(|x| *x = x.exp());
                    for row in m.chunks_exact_mut(s) {
                        row.iter_mut().zip(&gv).for_each(|(x, e)| *x *= e);
                    }
                } else {
                    let e = gv[0].exp();
                    m.iter_mut().for_each(|x| *x *= e);
                }
                // ggml's vec_dot_f32 and vec_mad_f32 (fused), in its order
                vec_dot_f32_rows(isa, &m, &kv, &mut dots);
                for ((d, vj), sum) in delta.iter_mut().zip(&vv).zip(&dots) {
                    *d = (vj - sum) * b;
                }
                mad_rows(isa, &mut m, &kv, &delta);
                vec_dot_f32_rows(isa, &m, &qv, &mut dots);
                let base = ((seq * n_t + t) * h + head) * s;
                for (j, sum) in dots.iter().enumerate() {
                    // SAFETY: output element in bounds; this task owns the
                    // pair (head, seq).
                    unsafe { out(base + j).write_unaligned(sum * scale) };
                }
            }
            let at = states_at + (seq * h + head) * s * s;
            for (i, x) in m.iter().enumerate() {
                // SAFETY: state element in bounds; this task owns the pair.
                unsafe { out(at + i).write_unaligned(*x) };
            }
        }
    });
}

/// Row `j` of `m` += `delta[j]` * `k`, each element fused (ggml's
/// `vec_mad_f32`, whose vector part is `fma` and whose compiler fuses its
/// tail too).
fn mad_rows(isa: Isa, m: &mut [f32], k: &[f32], delta: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        // SAFETY: the processor has AVX2 and FMA (checked by `active`).
        return unsafe { mad_rows_fma(m, k, delta) };
    }
    let _ = isa;
    mad_rows_portable(m, k, delta)
}

#[inline(always)]
fn mad_rows_portable(m: &mut [f32], k: &[f32], delta: &[f32]) {
    for (row, d) in m.chunks_exact_mut(k.len()).zip(delta) {
        row.iter_mut()
            .zip(k)
            .for_each(|(x, ki)| *x = ki.mul_add(*d, *x));
    }
}

/// [`mad_rows_portable`] with `mul_add` as one instruction.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn mad_rows_fma(m: &mut [f32], k: &[f32], delta: &[f32]) {
    mad_rows_portable(m, k, delta)
}
