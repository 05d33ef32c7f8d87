//! Gated DeltaNet's recurrence (ggml's `gated_delta_net`, one state
//! snapshot): each head's state matrix decays by its gate, takes the
//! delta rule's rank-one update and is read by the query, token by token.

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
    par_ranges(h * n_s, 1, |pairs| {
        let mut m = vec![0f32; s * s];
        let (mut qv, mut kv, mut vv, mut gv, mut delta) = (
            vec![0f32; s],
            vec![0f32; s],
            vec![0f32; s],
            vec![0f32; g.ne[0]],
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
                for ((row, d), vj) in m.chunks_exact(s).zip(delta.iter_mut()).zip(&vv) {
                    *d = (vj - dot(row, &kv)) * b;
                }
                for (row, d) in m.chunks_exact_mut(s).zip(&delta) {
                    row.iter_mut().zip(&kv).for_each(|(x, ki)| *x += ki * d);
                }
                let base = ((seq * n_t + t) * h + head) * s;
                for (j, row) in m.chunks_exact(s).enumerate() {
                    // SAFETY: output element in bounds; this task owns the
                    // pair (head, seq).
                    unsafe { out(base + j).write_unaligned(dot(row, &qv) * scale) };
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

/// A dot product in eight lanes (vectorised by the compiler).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = (ca.remainder().iter())
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}
