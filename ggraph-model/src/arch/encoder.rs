//! The encoder graph of the BERT family, as llama.cpp's `bert.cpp` builds
//! it: token, token-type (the first row: "sentence A") and learned
//! position embeddings (or a rope in the layers: nomic-bert), LayerNormed;
//! then post-norm layers: attention over the ubatch's own tokens (no
//! cache), added to the layer's input and LayerNormed, the FFN (GELU, or
//! a GLU) added and LayerNormed again. The last layer's rows are the
//! model's output (llama.cpp's `result_embd`); there is no head.

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::{GraphBuilder, TensorId};

use super::blocks::linear;
use super::config::{FfnKind, ModelConfig};
use super::model_graph::{Body, GraphInputs};
use super::pooling::PoolingInputs;
use super::shape::{Attention, BuildShape};
use super::weights::{Tensors, WeightSource};

/// The encoder's graph of one ubatch, up to its last layer's rows.
pub(super) fn build_encoder(
    c: &ModelConfig,
    shape: &BuildShape,
    weights: &mut dyn WeightSource,
) -> Result<Body> {
    let n_tokens = shape.n_tokens;
    let mut b = GraphBuilder::new();
    let weights = &mut Tensors::new(c, weights);
    let tokens = b.input("inp_tokens", DType::I32, &[n_tokens])?;
    let positions = b.input("inp_pos", DType::I32, &[n_tokens])?;
    let mask = b.input("kq_mask", shape.mask_type, &[n_tokens, n_tokens])?;
    let out_ids = match shape.n_outputs < n_tokens {
        true => Some(b.input("inp_out_ids", DType::I32, &[shape.n_outputs])?),
        false => None,
    };

    let tok_embd = weights.req(&mut b, "token_embd.weight")?;
    let mut inp = b.get_rows(tok_embd, tokens)?;
    if let Some(types) = weights.opt(&mut b, "token_types.weight")? {
        let first = b.view_1d(types, c.n_embd, 0)?;
        inp = b.add(inp, first)?;
    }
    // learned positions, where neither a rope nor ALiBi places the tokens
    if c.learned_positions() {
        let pos_embd = weights.req(&mut b, "position_embd.weight")?;
        let by_pos = b.get_rows(pos_embd, positions)?;
        inp = b.add(by_pos, inp)?;
    }
    b.set_name(inp, "inp_embd")?;
    inp = layer_norm(&mut b, c, weights, "token_embd_norm", inp)?;
    // llama.cpp's name, so that the two compare tensor by tensor
    b.set_name(inp, "inp_norm-0")?;

    let mut layer_outputs = Vec::with_capacity(c.n_layer);
    for il in 0..c.n_layer {
        let p = |s: &str| format!("blk.{il}.{s}");
        let mut cur = attention(&mut b, c, shape, weights, il, inp, positions, mask)?;
        b.set_name(cur, &format!("kqv_out-{il}"))?;
        if il == c.n_layer - 1
            && let Some(ids) = out_ids
        {
            cur = b.get_rows(cur, ids)?;
            inp = b.get_rows(inp, ids)?;
        }
        cur = b.add(cur, inp)?;
        let mut ffn_inp = layer_norm(&mut b, c, weights, &p("attn_output_norm"), cur)?;
        // jina-bert-v2's second norm, of the layer's input added again
        if weights.opt(&mut b, &p("attn_norm_2.weight"))?.is_some() {
            let again = b.add(ffn_inp, inp)?;
            ffn_inp = layer_norm(&mut b, c, weights, &p("attn_norm_2"), again)?;
        }
        b.set_name(ffn_inp, &format!("ffn_inp-{il}"))?;
        let mut cur = ffn(&mut b, c, weights, il, ffn_inp)?;
        b.set_name(cur, &format!("ffn_out-{il}"))?;
        cur = b.add(cur, ffn_inp)?;
        inp = layer_norm(&mut b, c, weights, &p("layer_output_norm"), cur)?;
        b.set_name(inp, &format!("l_out-{il}"))?;
        layer_outputs.push(inp);
    }
    b.set_name(inp, "result_embd")?;
    Ok(Body {
        b,
        inputs: GraphInputs {
            tokens,
            positions,
            kq_mask: Some(mask),
            kq_mask_swa: None,
            out_ids,
            k_idx: None,
            v_idx: None,
            k_idx_swa: None,
            v_idx_swa: None,
            recurrent: None,
            pooling: PoolingInputs::default(),
        },
        hidden: inp,
        logits: None,
        caches: Vec::new(),
        layer_outputs,
    })
}

/// Layer `il`'s FFN: up (with its bias), GELU, down (BERT's); or gate
/// and up through the GLU, then down.
fn ffn(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    x: TensorId,
) -> Result<TensorId> {
    let p = |s: &str| format!("blk.{il}.{s}");
    let up = weights.req(b, &p("ffn_up.weight"))?;
    let up = linear(b, weights, up, x, &p("ffn_up.bias"))?;
    let h = match c.ffn {
        FfnKind::Ungated => b.gelu(up)?,
        FfnKind::Split(op) => {
            let gate = weights.req(b, &p("ffn_gate.weight"))?;
            let gate = b.mul_mat(gate, x)?;
            b.glu_split(op, gate, up)?
        }
        // the gate is the first half of up's rows
        FfnKind::Fused(op) => b.glu(op, up, false)?,
    };
    let down = weights.req(b, &p("ffn_down.weight"))?;
    linear(b, weights, down, h, &p("ffn_down.bias"))
}

/// LayerNorm `name` (its weight and bias) of `x`.
fn layer_norm(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    name: &str,
    x: TensorId,
) -> Result<TensorId> {
    let w = weights.req(b, &format!("{name}.weight"))?;
    let bias = weights.req(b, &format!("{name}.bias"))?;
    let n = b.norm(x, c.norm_eps)?;
    let n = b.mul(n, w)?;
    b.add(n, bias)
}

/// Layer `il`'s attention over the ubatch's tokens, as llama.cpp's
/// `build_attn_mha` without a cache: flash attention reads K and V cast
/// to F16; standard attention multiplies the F32 rows, V transposed.
#[allow(clippy::too_many_arguments)]
fn attention(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    shape: &BuildShape,
    weights: &mut Tensors<'_>,
    il: usize,
    x: TensorId,
    positions: TensorId,
    mask: TensorId,
) -> Result<TensorId> {
    let (hd, n_tokens) = (c.head_dim, shape.n_tokens);
    let p = |s: &str| format!("blk.{il}.{s}");
    let (mut q, mut k, v) = if c.fused_qkv {
        // llama.cpp's views of the one product, each head's values side
        // by side and the tokens a whole row apart
        let w = weights.req(b, &p("attn_qkv.weight"))?;
        let qkv = linear(b, weights, w, x, &p("attn_qkv.bias"))?;
        let (row, f) = (b.tensor(qkv)?.nb[1], std::mem::size_of::<f32>());
        let (nq, nkv) = (c.n_head * hd, c.n_embd_kv());
        let part = |b: &mut GraphBuilder, heads: usize, at: usize| {
            b.view_3d(qkv, [hd, heads, n_tokens], hd * f, row, at * f)
        };
        let q = part(b, c.n_head, 0)?;
        let k = part(b, c.n_head_kv, nq)?;
        (q, k, part(b, c.n_head_kv, nq + nkv)?)
    } else {
        let mut proj = |b: &mut GraphBuilder, what: &str, heads: usize| -> Result<TensorId> {
            let w = weights.req(b, &p(&format!("attn_{what}.weight")))?;
            let mut y = linear(b, weights, w, x, &p(&format!("attn_{what}.bias")))?;
            // jina-bert-v2's LayerNorms of all of Q and of K
            let norm = format!("attn_{what}_norm");
            if weights.opt(b, &p(&format!("{norm}.weight")))?.is_some() {
                y = layer_norm(b, c, weights, &p(&norm), y)?;
            }
            b.reshape(y, &[hd, heads, n_tokens])
        };
        let q = proj(b, "q", c.n_head)?;
        let k = proj(b, "k", c.n_head_kv)?;
        (q, k, proj(b, "v", c.n_head_kv)?)
    };
    if c.use_rope {
        let rope = c.rope(il);
        q = b.rope_ext(q, positions, None, rope)?;
        k = b.rope_ext(k, positions, None, rope)?;
    }
    b.set_name(q, &format!("Qcur-{il}"))?;
    b.set_name(k, &format!("Kcur-{il}"))?;
    b.set_name(v, &format!("Vcur-{il}"))?;
    let q = b.permute(q, [0, 2, 1, 3])?;
    let k = b.permute(k, [0, 2, 1, 3])?;
    let v = b.permute(v, [0, 2, 1, 3])?;
    let attn = match shape.attention {
        Attention::Flash => {
            let k = b.cast(k, DType::F16)?;
            let v = b.cast(v, DType::F16)?;
            let max_bias = c.max_alibi_bias;
            let o = b.flash_attn_ext(q, k, v, Some(mask), c.attention_scale, max_bias, 0.0)?;
            b.reshape(o, &[c.n_head * hd, n_tokens])?
        }
        Attention::Standard => {
            let kq = b.mul_mat(k, q)?;
            b.set_name(kq, &format!("kq-{il}"))?;
            let kq = b.soft_max_ext(kq, Some(mask), c.attention_scale, c.max_alibi_bias)?;
            let vt = b.transpose(v)?;
            let vt = b.cont(vt)?;
            let kqv = b.mul_mat(vt, kq)?;
            let merged = b.permute(kqv, [0, 2, 1, 3])?;
            let merged = b.cont(merged)?;
            b.reshape(merged, &[c.n_head * hd, n_tokens])?
        }
    };
    let wo = weights.req(b, &p("attn_output.weight"))?;
    linear(b, weights, wo, attn, &p("attn_output.bias"))
}
