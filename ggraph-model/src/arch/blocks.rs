//! The pieces decoder layers are made of: norms, Q/K/V projections,
//! attention over the KV cache with its variants (sliding window,
//! soft-capping), the FFN (gated, fused or a mixture of experts), and
//! soft-capping. Each architecture's [`ArchSpec`] picks among them.
//!
//! [`ArchSpec`]: super::config::ArchSpec

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GluOp, GraphBuilder, TensorId, UnaryOp};

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
pub(super) fn linear(
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

/// A layer's projections for attention.
struct Projected {
    /// Q [hd, n_head, T].
    q: TensorId,
    /// K [hd, n_head_kv, T] and V [n_embd_kv, T], where the layer keeps
    /// its own ([`ModelConfig::has_kv`]).
    kv: Option<(TensorId, TensorId)>,
    /// With gated attention, the gate [hd * n_head, T].
    gate: Option<TensorId>,
}

/// Layer `il`'s Q, K and V (roped, normalised per head where the
/// architecture does) and gate.
fn qkv(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    cur: TensorId,
    positions: TensorId,
    rope_freqs: Option<TensorId>,
) -> Result<Projected> {
    let heads = c.heads(il);
    let (hd, n_tokens) = (heads.head_dim, b.tensor(cur)?.ne[1]);
    let (nq, nkv) = (c.n_head * hd, c.n_embd_kv_of(il));
    let name = |s: &str| format!("blk.{il}.{s}");
    let (q, kv) = if c.fused_qkv {
        let w = weights.req(b, &name("attn_qkv.weight"))?;
        let qkv = linear(b, weights, w, cur, &name("attn_qkv.bias"))?;
        let row = b.tensor(qkv)?.nb[1];
        let part = |b: &mut GraphBuilder, width: usize, offset: usize| -> Result<TensorId> {
            let v = b.view_2d(qkv, width, n_tokens, row, offset * 4)?;
            b.cont(v)
        };
        let kv = match c.has_kv(il) {
            true => Some((part(b, nkv, nq)?, part(b, nkv, nq + nkv)?)),
            false => None,
        };
        (part(b, nq, 0)?, kv)
    } else {
        let wq = weights.req(b, &name("attn_q.weight"))?;
        let q = linear(b, weights, wq, cur, &name("attn_q.bias"))?;
        let kv = if c.has_kv(il) {
            let wk = weights.req(b, &name("attn_k.weight"))?;
            let k = linear(b, weights, wk, cur, &name("attn_k.bias"))?;
            // without `attn_v` (Gemma 4), V is K's projection
            let v = match weights.opt(b, &name("attn_v.weight"))? {
                Some(wv) => linear(b, weights, wv, cur, &name("attn_v.bias"))?,
                None if c.arch.value_norm => k,
                None => weights.req(b, &name("attn_v.weight"))?,
            };
            Some((k, v))
        } else {
            None
        };
        (q, kv)
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
    if c.arch.qk_norm {
        q = layer_norm(b, c, weights, il, "attn_q_norm", q)?;
    }
    // the full layers' frequency factors only, where the architecture says
    let rope_freqs = match c.arch.freq_factors_full_only && c.is_swa(il) {
        true => None,
        false => rope_freqs,
    };
    let rope = c.use_rope.then(|| c.rope(il));
    if let Some(rope) = rope {
        q = b.rope_ext(q, positions, rope_freqs, rope)?;
    }

    // llama.cpp's names, so that the two compare tensor by tensor
    b.set_name(q, &format!("Qcur-{il}"))?;
    let Some((k, mut v)) = kv else {
        return Ok(Projected { q, kv: None, gate });
    };
    let mut k = b.reshape(k, &[hd, heads.n_head_kv, n_tokens])?;
    if c.arch.qk_norm {
        k = layer_norm(b, c, weights, il, "attn_k_norm", k)?;
    }
    if c.arch.value_norm {
        let v3 = b.reshape(v, &[hd, heads.n_head_kv, n_tokens])?;
        let normed = b.rms_norm(v3, c.rms_eps)?;
        v = b.reshape(normed, &[nkv, n_tokens])?;
    }
    if let Some(rope) = rope {
        k = b.rope_ext(k, positions, rope_freqs, rope)?;
    }
    b.set_name(k, &format!("Kcur-{il}"))?;
    b.set_name(v, &format!("Vcur-{il}"))?;
    Ok(Projected {
        q,
        kv: Some((k, v)),
        gate,
    })
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
    attended: &mut [Option<(TensorId, TensorId)>],
) -> Result<TensorId> {
    let heads = c.heads(il);
    let (hd, n_head, n_head_kv) = (heads.head_dim, c.n_head, heads.n_head_kv);
    let (n_tokens, n_embd_kv) = (shape.n_tokens, c.n_embd_kv_of(il));
    let transposed_v = shape.attention == Attention::Standard;
    let Projected {
        q,
        kv: kv_new,
        gate,
    } = qkv(b, c, weights, il, cur, inputs.positions, inputs.rope_freqs)?;

    // a sliding-window layer with a cache of its own reads that one
    let (n_kv, kv, k_idx, v_idx) = match shape.swa {
        Some(s) if c.is_swa(il) => (s.n_kv, Some(s.kv), inputs.k_idx_swa, inputs.v_idx_swa),
        _ => (shape.n_kv, shape.kv, inputs.k_idx, inputs.v_idx),
    };
    // keys and values the attention reads: [hd, n_kv, n_head_kv]; a layer
    // without K and V of its own reads those of the layer whose cache it
    // shares, written earlier in the graph
    let (k_all, v_all) = match (kv_new, &kv, k_idx, v_idx) {
        (None, ..) => {
            let source = c.kv_source(il);
            attended.get(source).copied().flatten().ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "layer {il} reads the keys and values of layer {source}, which has none"
                ))
            })?
        }
        (Some((k, v)), Some(kv), Some(ki), Some(vi)) => {
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
        (Some((k, v)), ..) => {
            let kp = b.permute(k, [0, 2, 1, 3])?;
            let v3 = b.reshape(v, &[hd, n_head_kv, n_tokens])?;
            let vp = if transposed_v {
                let vt = b.permute(v3, [1, 2, 0, 3])?;
                b.cont(vt)?
            } else {
                b.permute(v3, [0, 2, 1, 3])?
            };
            // a model that keeps no memory reads K and V in F16 under flash
            // attention, as llama.cpp casts them without a cache; the
            // cacheless graphs of decoders (tests against the f64
            // reference) keep them in F32
            match (shape.attention, c.arch.keeps_no_memory) {
                (Attention::Flash, true) => (b.cast(kp, DType::F16)?, b.cast(vp, DType::F16)?),
                _ => (kp, vp),
            }
        }
    };
    if let Some(slot) = attended.get_mut(il) {
        *slot = Some((k_all, v_all));
    }
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
    // the scores' scale, unless Q carries it
    let (q, kq_scale) = match c.arch.prescaled_q {
        true => (b.scale(q, c.attention_scale)?, 1.0),
        false => (q, c.attention_scale),
    };
    let qp = b.permute(q, [0, 2, 1, 3])?;
    let attn = match shape.attention {
        Attention::Standard => {
            let mut kq = b.mul_mat(k_all, qp)?;
            let mut scale = kq_scale;
            if c.attn_softcap > 0.0 {
                // the cap applies to the scaled scores, as in llama.cpp
                if kq_scale != 1.0 {
                    kq = b.scale(kq, kq_scale)?;
                }
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
                    b.flash_attn_ext_sinks(qp, k_all, v_all, Some(mask), sinks, kq_scale)?
                }
                Some(_) => {
                    return Err(Error::InvalidArgument(format!(
                        "{}: attention sinks with a soft-cap are not built",
                        c.arch.name
                    )));
                }
                None => {
                    b.flash_attn_ext(qp, k_all, v_all, Some(mask), kq_scale, 0.0, c.attn_softcap)?
                }
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
        return moe_ffn(b, c, weights, il, cur, cur);
    }
    dense_ffn(b, c, weights, il, cur)
}

/// Layer `il`'s dense feed-forward network on the normalised `cur`.
fn dense_ffn(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    cur: TensorId,
) -> Result<TensorId> {
    let name = |s: &str| format!("blk.{il}.{s}.weight");
    let h = match c.ffn {
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
        FfnKind::Ungated => {
            let up = weights.req(b, &name("ffn_up"))?;
            let u = b.mul_mat(up, cur)?;
            b.gelu(u)?
        }
    };
    let down = weights.req(b, &name("ffn_down"))?;
    b.mul_mat(down, h)
}

/// Layer `il`'s feed-forward block where the experts run beside the
/// dense FFN (Gemma 4), on the layer's un-normalised input `x`: the dense
/// FFN between its norms, the experts between theirs (routed from the
/// unweighted norm of `x` scaled by 1/sqrt(n_embd) and the router's
/// `ffn_gate_inp.scale`), summed.
pub fn dense_beside_experts(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    x: TensorId,
) -> Result<TensorId> {
    let dense_in = layer_norm(b, c, weights, il, c.arch.ffn_norm, x)?;
    let dense = dense_ffn(b, c, weights, il, dense_in)?;
    let dense = layer_norm(b, c, weights, il, "post_ffw_norm_1", dense)?;
    b.set_name(dense, &format!("ffn_mlp-{il}"))?;
    let experts_in = layer_norm(b, c, weights, il, "pre_ffw_norm_2", x)?;
    let router_scale = weights.req(b, &format!("blk.{il}.ffn_gate_inp.scale"))?;
    let router_in = b.rms_norm(x, c.rms_eps)?;
    let router_in = b.scale(router_in, 1.0 / (c.n_embd as f32).sqrt())?;
    let router_in = b.mul(router_in, router_scale)?;
    let experts = moe_ffn(b, c, weights, il, experts_in, router_in)?;
    let experts = layer_norm(b, c, weights, il, "post_ffw_norm_2", experts)?;
    b.set_name(experts, &format!("ffn_moe-{il}"))?;
    b.add(dense, experts)
}

/// Mixture of experts on `cur`, routed from `router_in`: each token to its
/// top experts (as the architecture's [`ExpertRouting`] says), their gated
/// outputs weighted and summed.
fn moe_ffn(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    cur: TensorId,
    router_in: TensorId,
) -> Result<TensorId> {
    let name = |s: &str| format!("blk.{il}.{s}.weight");
    let (e, x, k) = (c.n_embd, c.n_expert, c.n_expert_used);
    let n_tokens = b.tensor(cur)?.ne[1];
    let gate_inp = weights.req(b, &name("ffn_gate_inp"))?;
    let gate_up_exps = weights.opt(b, &name("ffn_gate_up_exps"))?;
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
    let mut logits = b.mul_mat(gate_inp, router_in)?; // [x, n_tokens]
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
    let (g, u) = match gate_up_exps {
        Some(w) => {
            // the gate's rows, then up's
            let gu = product(b, weights, w, cur3, "gate_up")?; // [2f, k, n_tokens]
            let f = c.n_ff_expert;
            let (row, plane) = (b.tensor(gu)?.nb[1], b.tensor(gu)?.nb[2]);
            let g = b.view_3d(gu, [f, k, n_tokens], row, plane, 0)?;
            let u = b.view_3d(gu, [f, k, n_tokens], row, plane, f * 4)?;
            (g, u)
        }
        None => {
            let gate_exps = weights.req(b, &name("ffn_gate_exps"))?;
            let up_exps = weights.req(b, &name("ffn_up_exps"))?;
            let g = product(b, weights, gate_exps, cur3, "gate")?; // [f, k, n_tokens]
            (g, product(b, weights, up_exps, cur3, "up")?)
        }
    };
    let op = match c.ffn {
        FfnKind::Split(op) | FfnKind::Fused(op) => op,
        FfnKind::Ungated => {
            return Err(Error::InvalidArgument(format!(
                "{}: experts of an ungated FFN are not built",
                c.arch.name
            )));
        }
    };
    let h = b.glu_split(op, g, u)?;
    let glu_name = match op {
        GluOp::Swiglu => "ffn_moe_swiglu",
        GluOp::Geglu => "ffn_moe_geglu",
        GluOp::SwigluOai { .. } => "ffn_moe_swiglu_oai",
    };
    named(b, h, glu_name)?;
    let mut experts = product(b, weights, down_exps, h, "down")?; // [e, k, n_tokens]
    if let Some(scale) = weights.opt(b, &format!("blk.{il}.ffn_down_exps.scale"))? {
        // each selected expert's own scale, before the router's weight
        let picked = b.reshape(selected, &[k * n_tokens])?;
        let table = b.reshape(scale, &[1, x])?;
        let scales = b.get_rows(table, picked)?; // [1, k * n_tokens]
        let scales = b.reshape(scales, &[1, k, n_tokens])?;
        experts = b.mul(experts, scales)?;
        named(b, experts, "ffn_moe_down_scaled")?;
    }
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
