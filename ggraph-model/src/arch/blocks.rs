//! The pieces decoder layers are made of: norms, Q/K/V projections,
//! attention over the KV cache with its variants (sliding window,
//! soft-capping), the FFN (gated, fused or a mixture of experts), and
//! soft-capping. Each architecture's [`ArchSpec`] picks among them.
//!
//! [`ArchSpec`]: super::config::ArchSpec

use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GraphBuilder, TensorId, UnaryOp};

use super::config::{ExpertRouting, FfnKind, ModelConfig};
use super::shape::{Attention, BuildShape};
use super::weights::Tensors;
use crate::kv::CacheSource;

/// `x` RMS-normalised along its rows, times `weight`.
pub fn rms_norm(b: &mut GraphBuilder, x: TensorId, weight: TensorId, eps: f32) -> Result<TensorId> {
    let n = b.rms_norm(x, eps)?;
    b.mul(n, weight)
}

/// The norm weight `name` of layer `il` applied to `x`.
pub fn layer_norm(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    name: &str,
    x: TensorId,
) -> Result<TensorId> {
    let w = weights.req(b, &format!("blk.{il}.{name}.weight"))?;
    rms_norm(b, x, w, c.rms_eps)
}

/// `w · x`, plus the bias `bias_name` when the model has it.
fn linear(
    b: &mut GraphBuilder,
    weights: &mut Tensors<'_>,
    w: TensorId,
    x: TensorId,
    bias_name: &str,
) -> Result<TensorId> {
    let y = b.mul_mat(w, x)?;
    match weights.opt(b, bias_name)? {
        Some(bias) => b.add(y, bias),
        None => Ok(y),
    }
}

/// `cap * tanh(x / cap)`.
pub fn softcap(b: &mut GraphBuilder, x: TensorId, cap: f32) -> Result<TensorId> {
    let s = b.scale(x, 1.0 / cap)?;
    let t = b.unary(UnaryOp::Tanh, s)?;
    b.scale(t, cap)
}

/// Q [hd, n_head, T] and K [hd, n_head_kv, T] (roped, normalised per head
/// where the architecture does) and V [n_embd_kv, T] of layer `il`, and
/// with gated attention the gate [hd * n_head, T].
fn qkv(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    cur: TensorId,
    positions: TensorId,
    rope_freqs: Option<TensorId>,
) -> Result<(TensorId, TensorId, TensorId, Option<TensorId>)> {
    let (hd, n_tokens) = (c.head_dim, b.tensor(cur)?.ne[1]);
    let (nq, nkv) = (c.n_head * hd, c.n_embd_kv());
    let name = |s: &str| format!("blk.{il}.{s}");
    let (q, k, v) = if c.fused_qkv {
        let w = weights.req(b, &name("attn_qkv.weight"))?;
        let qkv = linear(b, weights, w, cur, &name("attn_qkv.bias"))?;
        let row = b.tensor(qkv)?.nb[1];
        let part = |b: &mut GraphBuilder, width: usize, offset: usize| -> Result<TensorId> {
            let v = b.view_2d(qkv, width, n_tokens, row, offset * 4)?;
            b.cont(v)
        };
        (part(b, nq, 0)?, part(b, nkv, nq)?, part(b, nkv, nq + nkv)?)
    } else {
        let wq = weights.req(b, &name("attn_q.weight"))?;
        let wk = weights.req(b, &name("attn_k.weight"))?;
        let wv = weights.req(b, &name("attn_v.weight"))?;
        (
            linear(b, weights, wq, cur, &name("attn_q.bias"))?,
            linear(b, weights, wk, cur, &name("attn_k.bias"))?,
            linear(b, weights, wv, cur, &name("attn_v.bias"))?,
        )
    };
    // gated attention: each head's query, then its gate
    let (mut q, gate) = if c.arch.gated_attention {
        let (row, f) = (b.tensor(q)?.nb[1], std::mem::size_of::<f32>());
        let query = b.view_3d(q, [hd, c.n_head, n_tokens], 2 * hd * f, row, 0)?;
        let gate = b.view_3d(q, [hd, c.n_head, n_tokens], 2 * hd * f, row, hd * f)?;
        let gate = b.cont(gate)?;
        (query, Some(b.reshape(gate, &[nq, n_tokens])?))
    } else {
        (b.reshape(q, &[hd, c.n_head, n_tokens])?, None)
    };
    let mut k = b.reshape(k, &[hd, c.n_head_kv, n_tokens])?;
    if c.arch.qk_norm {
        q = layer_norm(b, c, weights, il, "attn_q_norm", q)?;
        k = layer_norm(b, c, weights, il, "attn_k_norm", k)?;
    }
    let (q, k) = if c.use_rope {
        let rope = c.rope(il);
        (
            b.rope_ext(q, positions, rope_freqs, rope)?,
            b.rope_ext(k, positions, rope_freqs, rope)?,
        )
    } else {
        (q, k)
    };
    // llama.cpp's names, so that the two compare tensor by tensor
    b.set_name(q, &format!("Qcur-{il}"))?;
    b.set_name(k, &format!("Kcur-{il}"))?;
    b.set_name(v, &format!("Vcur-{il}"))?;
    Ok((q, k, v, gate))
}

/// The graph inputs attention reads besides Q, K and V.
pub struct AttentionInputs {
    pub positions: TensorId,
    /// The causal mask (where a layer is not SWA), and the sliding-window
    /// one (for SWA layers).
    pub kq_mask: Option<TensorId>,
    pub kq_mask_swa: Option<TensorId>,
    /// Cache cells the ubatch writes (K, V), with a cache.
    pub k_idx: Option<TensorId>,
    pub v_idx: Option<TensorId>,
    /// The same in the sliding-window layers' own cache, with one.
    pub k_idx_swa: Option<TensorId>,
    pub v_idx_swa: Option<TensorId>,
    pub rope_freqs: Option<TensorId>,
}

/// Layer `il`'s self-attention on the normalised `cur`: projections,
/// rope, the cache's write and read, attention, and the output
/// projection. Records the layer's cache tensors in `caches`.
pub fn self_attention(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    shape: &BuildShape,
    weights: &mut Tensors<'_>,
    cache: &mut dyn CacheSource,
    inputs: &AttentionInputs,
    il: usize,
    cur: TensorId,
    caches: &mut Vec<(TensorId, TensorId)>,
) -> Result<TensorId> {
    let (hd, n_head, n_head_kv) = (c.head_dim, c.n_head, c.n_head_kv);
    let (n_tokens, n_embd_kv) = (shape.n_tokens, c.n_embd_kv());
    let transposed_v = shape.attention == Attention::Standard;
    let (q, k, v, gate) = qkv(b, c, weights, il, cur, inputs.positions, inputs.rope_freqs)?;

    // a sliding-window layer with a cache of its own reads that one
    let (n_kv, kv, k_idx, v_idx) = match shape.swa {
        Some(s) if c.is_swa(il) => (s.n_kv, Some(s.kv), inputs.k_idx_swa, inputs.v_idx_swa),
        _ => (shape.n_kv, shape.kv, inputs.k_idx, inputs.v_idx),
    };
    // keys and values the attention reads: [hd, n_kv, n_head_kv]
    let (k_all, v_all) = match (&kv, k_idx, v_idx) {
        (Some(kv), Some(ki), Some(vi)) => {
            let (kc, vc) = cache.layer_cache(b, il, kv, n_embd_kv)?;
            caches.push((kc, vc));
            let k2 = b.reshape(k, &[n_embd_kv, n_tokens])?;
            let wk = b.set_rows(kc, k2, ki)?;
            b.expand(wk)?;
            let wv = if transposed_v {
                // the cache holds V transposed: element (e, cell) at
                // e * kv_size + cell. Seen as [1, kv_size, n_embd_kv] it
                // has one-value rows per cell in every plane e, and V seen
                // as [1, n_tokens, n_embd_kv] (a strided view) writes them
                // with the same per-token indices
                let es = 4; // v is F32
                let planes = b.reshape(vc, &[1, kv.kv_size, n_embd_kv])?;
                let vt = b.view_3d(v, [1, n_tokens, n_embd_kv], n_embd_kv * es, es, 0)?;
                b.set_rows(planes, vt, vi)?
            } else {
                b.set_rows(vc, v, vi)?
            };
            b.expand(wv)?;
            let ek = kv.k_type.row_size(hd).unwrap_or(0);
            let k_row = kv.k_type.row_size(n_embd_kv).unwrap_or(0);
            let k_view = b.view_3d(kc, [hd, n_head_kv, n_kv], ek, k_row, 0)?;
            let k_view = b.permute(k_view, [0, 2, 1, 3])?;
            let v_view = if transposed_v {
                // [n_kv, hd, n_head_kv] rows along the cells
                let es = kv.v_type.type_size();
                b.view_3d(
                    vc,
                    [n_kv, hd, n_head_kv],
                    kv.kv_size * es,
                    kv.kv_size * es * hd,
                    0,
                )?
            } else {
                let ev = kv.v_type.row_size(hd).unwrap_or(0);
                let v_row = kv.v_type.row_size(n_embd_kv).unwrap_or(0);
                let vv = b.view_3d(vc, [hd, n_head_kv, n_kv], ev, v_row, 0)?;
                b.permute(vv, [0, 2, 1, 3])?
            };
            (k_view, v_view)
        }
        _ => {
            let kp = b.permute(k, [0, 2, 1, 3])?;
            let v3 = b.reshape(v, &[hd, n_head_kv, n_tokens])?;
            let vp = if transposed_v {
                let vt = b.permute(v3, [1, 2, 0, 3])?;
                b.cont(vt)?
            } else {
                b.permute(v3, [0, 2, 1, 3])?
            };
            (kp, vp)
        }
    };
    let mask = match (inputs.kq_mask_swa, inputs.kq_mask) {
        (Some(m), _) if c.is_swa(il) => m,
        (_, Some(m)) => m,
        _ => {
            return Err(Error::InvalidArgument(format!(
                "layer {il} attends to every position but the graph has no causal mask"
            )));
        }
    };
    let sinks = if c.arch.attention_sinks {
        Some(weights.req(b, &format!("blk.{il}.attn_sinks.weight"))?)
    } else {
        None
    };
    let qp = b.permute(q, [0, 2, 1, 3])?;
    let attn = match shape.attention {
        Attention::Standard => {
            let mut kq = b.mul_mat(k_all, qp)?;
            let mut scale = c.attention_scale;
            if c.attn_softcap > 0.0 {
                // the cap applies to the scaled scores, as in llama.cpp
                kq = b.scale(kq, c.attention_scale)?;
                kq = softcap(b, kq, c.attn_softcap)?;
                scale = 1.0;
            }
            b.set_name(kq, &format!("kq-{il}"))?;
            let kq = match sinks {
                Some(sinks) => b.soft_max_ext_sinks(kq, Some(mask), sinks, scale, 0.0)?,
                None => b.soft_max_ext(kq, Some(mask), scale, 0.0)?,
            };
            b.set_name(kq, &format!("kq_soft_max-{il}"))?;
            let kqv = b.mul_mat(v_all, kq)?;
            b.set_name(kqv, &format!("kqv-{il}"))?;
            let merged = b.permute(kqv, [0, 2, 1, 3])?;
            let merged = b.cont(merged)?;
            b.reshape(merged, &[n_head * hd, n_tokens])?
        }
        Attention::Flash => {
            let o = match sinks {
                // no architecture has both sinks and a soft-cap
                Some(sinks) if c.attn_softcap == 0.0 => {
                    b.flash_attn_ext_sinks(qp, k_all, v_all, Some(mask), sinks, c.attention_scale)?
                }
                Some(_) => {
                    return Err(Error::InvalidArgument(format!(
                        "{}: attention sinks with a soft-cap are not built",
                        c.arch.name
                    )));
                }
                None => b.flash_attn_ext(
                    qp,
                    k_all,
                    v_all,
                    Some(mask),
                    c.attention_scale,
                    0.0,
                    c.attn_softcap,
                )?,
            };
            b.reshape(o, &[n_head * hd, n_tokens])?
        }
    };
    b.set_name(attn, &format!("kqv_out-{il}"))?;
    let attn = match gate {
        Some(g) => {
            let g = b.unary(UnaryOp::Sigmoid, g)?;
            b.mul(attn, g)?
        }
        None => attn,
    };
    let wo_name = format!("blk.{il}.attn_output.weight");
    let wo = weights.req(b, &wo_name)?;
    linear(b, weights, wo, attn, &format!("blk.{il}.attn_output.bias"))
}

/// Layer `il`'s feed-forward network on the normalised `cur`.
pub fn ffn(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    cur: TensorId,
) -> Result<TensorId> {
    if c.is_moe() {
        return moe_ffn(b, c, weights, il, cur);
    }
    let name = |s: &str| format!("blk.{il}.{s}.weight");
    let h = match c.arch.ffn {
        FfnKind::Split(op) => {
            let gate = weights.req(b, &name("ffn_gate"))?;
            let up = weights.req(b, &name("ffn_up"))?;
            let g = b.mul_mat(gate, cur)?;
            b.set_name(g, &format!("ffn_gate-{il}"))?;
            let u = b.mul_mat(up, cur)?;
            b.set_name(u, &format!("ffn_up-{il}"))?;
            b.glu_split(op, g, u)?
        }
        FfnKind::Fused(op) => {
            let up = weights.req(b, &name("ffn_up"))?;
            let gu = b.mul_mat(up, cur)?;
            b.glu(op, gu, false)?
        }
    };
    let down = weights.req(b, &name("ffn_down"))?;
    b.mul_mat(down, h)
}

/// Mixture of experts: route each token to its top experts (as the
/// architecture's [`ExpertRouting`] says), weight their gated outputs,
/// and sum.
fn moe_ffn(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    cur: TensorId,
) -> Result<TensorId> {
    let name = |s: &str| format!("blk.{il}.{s}.weight");
    let (e, x, k) = (c.n_embd, c.n_expert, c.n_expert_used);
    let n_tokens = b.tensor(cur)?.ne[1];
    let gate_inp = weights.req(b, &name("ffn_gate_inp"))?;
    let gate_exps = weights.req(b, &name("ffn_gate_exps"))?;
    let up_exps = weights.req(b, &name("ffn_up_exps"))?;
    let down_exps = weights.req(b, &name("ffn_down_exps"))?;

    // llama.cpp's names (its `build_moe_ffn`), so that a decode can be
    // compared with its tensor by tensor
    let named = |b: &mut GraphBuilder, t: TensorId, what: &str| -> Result<TensorId> {
        b.set_name(t, &format!("{what}-{il}"))?;
        Ok(t)
    };
    // the bias of the router or of an expert product, where the
    // architecture has them and the weights hold them
    let bias = |b: &mut GraphBuilder, weights: &mut Tensors<'_>, what: &str| {
        if c.arch.moe_biases {
            weights.opt(b, &format!("blk.{il}.{what}.bias"))
        } else {
            Ok(None)
        }
    };
    let mut logits = b.mul_mat(gate_inp, cur)?; // [x, n_tokens]
    named(b, logits, "ffn_moe_logits")?;
    if let Some(bias) = bias(b, weights, "ffn_gate_inp")? {
        logits = b.add(logits, bias)?;
        named(b, logits, "ffn_moe_logits_biased")?;
    }
    let (selected, weights2) = match c.arch.routing {
        ExpertRouting::SoftmaxThenTopK => {
            let probs = b.soft_max(logits)?;
            named(b, probs, "ffn_moe_probs")?;
            let selected = b.top_k(probs, k)?; // [k, n_tokens]
            let probs3 = b.reshape(probs, &[1, x, n_tokens])?;
            let picked = b.get_rows(probs3, selected)?; // [1, k, n_tokens]
            let weights2 = b.reshape(picked, &[k, n_tokens])?;
            let sum = b.sum_rows(weights2)?; // [1, n_tokens]
            named(b, sum, "ffn_moe_weights_sum")?;
            let weights2 = b.div(weights2, sum)?;
            named(b, weights2, "ffn_moe_weights_norm")?;
            (selected, weights2)
        }
        ExpertRouting::TopKThenSoftmax => {
            let selected = b.top_k(logits, k)?; // [k, n_tokens]
            let logits3 = b.reshape(logits, &[1, x, n_tokens])?;
            let picked = b.get_rows(logits3, selected)?; // [1, k, n_tokens]
            let picked = b.reshape(picked, &[k, n_tokens])?;
            let weights2 = b.soft_max(picked)?;
            named(b, weights2, "ffn_moe_weights_softmax")?;
            (selected, weights2)
        }
    };
    let expert_weights = b.reshape(weights2, &[1, k, n_tokens])?;

    // each selected expert's product, plus that expert's bias row
    let product = |b: &mut GraphBuilder,
                   weights: &mut Tensors<'_>,
                   w: TensorId,
                   x: TensorId,
                   what: &str|
     -> Result<TensorId> {
        let y = b.mul_mat_id(w, x, selected)?;
        named(b, y, &format!("ffn_moe_{what}"))?;
        match bias(b, weights, &format!("ffn_{what}_exps"))? {
            Some(bias) => {
                let y = b.add_id(y, bias, selected)?;
                named(b, y, &format!("ffn_moe_{what}_biased"))
            }
            None => Ok(y),
        }
    };
    let cur3 = b.reshape(cur, &[e, 1, n_tokens])?;
    let g = product(b, weights, gate_exps, cur3, "gate")?; // [f, k, n_tokens]
    let u = product(b, weights, up_exps, cur3, "up")?;
    let op = match c.arch.ffn {
        FfnKind::Split(op) | FfnKind::Fused(op) => op,
    };
    let h = b.glu_split(op, g, u)?;
    let experts = product(b, weights, down_exps, h, "down")?; // [e, k, n_tokens]
    let experts = b.mul(experts, expert_weights)?;
    named(b, experts, "ffn_moe_weighted")?;
    // sum over the k selected experts
    let row = b.tensor(experts)?.nb[1];
    let plane = b.tensor(experts)?.nb[2];
    let mut out = b.view_2d(experts, e, n_tokens, plane, 0)?;
    for j in 1..k {
        let v = b.view_2d(experts, e, n_tokens, plane, j * row)?;
        out = b.add(out, v)?;
    }
    if k == 1 {
        out = b.cont(out)?;
    }
    named(b, out, "ffn_moe_out")?;
    if c.n_ff_shexp > 0 {
        // the shared expert, which every token goes through
        let gate = weights.req(b, &name("ffn_gate_shexp"))?;
        let up = weights.req(b, &name("ffn_up_shexp"))?;
        let down = weights.req(b, &name("ffn_down_shexp"))?;
        let g = b.mul_mat(gate, cur)?;
        let u = b.mul_mat(up, cur)?;
        let h = b.glu_split(op, g, u)?;
        let mut shared = b.mul_mat(down, h)?;
        named(b, shared, "ffn_shexp")?;
        if let Some(w) = weights.opt(b, &name("ffn_gate_inp_shexp"))? {
            // one gate per token
            let gate = b.mul_mat(w, cur)?;
            named(b, gate, "shared_expert_gate")?;
            let gate = b.unary(UnaryOp::Sigmoid, gate)?;
            named(b, gate, "shared_expert_gate_sigmoid")?;
            shared = b.mul(shared, gate)?;
            named(b, shared, "ffn_shexp_gated")?;
        }
        out = b.add(out, shared)?;
    }
    Ok(out)
}
