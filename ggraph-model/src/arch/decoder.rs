//! The decoder graph every architecture builds: token embeddings, the
//! layers, the output norm and the logits. An [`ArchSpec`]'s flags choose
//! the blocks (`blocks.rs`); nothing here names an architecture.
//!
//! [`ArchSpec`]: super::config::ArchSpec

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GraphBuilder, TensorId};

use super::blocks::{
    AttentionInputs, dense_beside_experts, ffn, layer_norm, rms_norm, self_attention, softcap,
};
use super::config::{ModelConfig, RecurrentBlock};
use super::delta_net::gated_delta_net;
use super::mamba2::mamba2;
use super::model_graph::{Body, GraphInputs};
use super::pooling::PoolingInputs;
use super::recurrent::{RecurrentBuild, RecurrentInputs};
use super::shape::BuildShape;
use super::shortconv::short_conv;
use super::weights::{Tensors, WeightSource, rope_freq_factors};
use crate::kv::CacheSource;

/// The decoder's graph of one ubatch, up to the output norm (and the
/// logits when `head`).
pub(super) fn build_decoder(
    config: &ModelConfig,
    shape: &BuildShape,
    weights: &mut dyn WeightSource,
    cache: &mut dyn CacheSource,
    head: bool,
) -> Result<Body> {
    let c = config;
    let (n_tokens, n_kv) = (shape.n_tokens, shape.n_kv);
    let mut b = GraphBuilder::new();
    let rope_freqs = rope_freq_factors(&mut b, c, shape.n_ctx_seq, weights)?;
    // from here on by name, with the shapes of the model's table
    let weights = &mut Tensors::new(c, weights);

    let tokens = b.input("inp_tokens", DType::I32, &[n_tokens])?;
    let positions = b.input("inp_pos", DType::I32, &[n_tokens])?;
    // only the masks some layer reads: a graph input no node reads gets no
    // memory, and a model whose layers all slide (gemma3's smallest
    // shapes) has no full-attention layer
    let attends = |il: usize| !c.is_recurrent(il);
    let any_full = (0..c.n_layer).any(|il| attends(il) && !c.is_swa(il));
    let kq_mask = if any_full {
        Some(b.input("kq_mask", shape.mask_type, &[n_kv, n_tokens])?)
    } else {
        None
    };
    let kq_mask_swa = if c.has_swa() {
        let n_kv_swa = shape.swa.map_or(n_kv, |s| s.n_kv);
        Some(b.input("kq_mask_swa", shape.mask_type, &[n_kv_swa, n_tokens])?)
    } else {
        None
    };
    let out_ids = if shape.n_outputs < n_tokens {
        Some(b.input("inp_out_ids", DType::I32, &[shape.n_outputs])?)
    } else {
        None
    };
    // the main cache's cells, where some layer writes there (sliding-window
    // layers write their own cache when they have one)
    let main_cache_used =
        (0..c.n_layer).any(|il| attends(il) && !(c.is_swa(il) && shape.swa.is_some()));
    let (k_idx, v_idx) = match shape.kv {
        Some(_) if main_cache_used => {
            let k = b.input("kv_idx_k", DType::I32, &[n_tokens])?;
            let v = b.input("kv_idx_v", DType::I32, &[n_tokens])?;
            (Some(k), Some(v))
        }
        _ => (None, None),
    };
    let (k_idx_swa, v_idx_swa) = match shape.swa {
        Some(_) => {
            let k = b.input("kv_idx_k_swa", DType::I32, &[n_tokens])?;
            let v = b.input("kv_idx_v_swa", DType::I32, &[n_tokens])?;
            (Some(k), Some(v))
        }
        None => (None, None),
    };
    let recurrent = match (c.has_recurrent(), shape.recurrent) {
        (false, _) => None,
        (true, Some(r)) => Some((r, RecurrentInputs::new(&mut b, r.n_seqs)?)),
        (true, None) => {
            return Err(Error::InvalidArgument(format!(
                "a {} model has recurrent layers: its graph needs the ubatch's sequences and \
                 the state (BuildShape::with_recurrent)",
                c.arch.name
            )));
        }
    };
    let attn_inputs = AttentionInputs {
        positions,
        kq_mask,
        kq_mask_swa,
        k_idx,
        v_idx,
        k_idx_swa,
        v_idx_swa,
        rope_freqs,
    };

    let tok_embd = weights.req(&mut b, "token_embd.weight")?;
    let mut inp = b.get_rows(tok_embd, tokens)?;
    b.set_name(inp, "inp_embd")?;
    if c.arch.embed_scale {
        inp = b.scale(inp, (c.n_embd as f32).sqrt())?;
    }
    if c.embedding_scale != 0.0 {
        inp = b.scale(inp, c.embedding_scale)?;
    }
    let per_layer_inputs = if c.n_embd_per_layer > 0 {
        Some(per_layer_inputs(&mut b, c, weights, tokens, inp)?)
    } else {
        None
    };
    let mut caches = Vec::new();
    let mut attended = vec![None; c.n_layer];
    let mut layer_outputs = Vec::new();

    for il in 0..c.n_layer {
        let cur = layer_norm(&mut b, c, weights, il, "attn_norm", inp)?;
        b.set_name(cur, &format!("attn_norm-{il}"))?;
        let mut cur = match (&recurrent, c.arch.recurrent) {
            (Some((r, inputs)), Some(block)) if c.is_recurrent(il) => {
                let st = &mut RecurrentBuild {
                    state: cache,
                    shape: r,
                    inputs,
                };
                match block {
                    RecurrentBlock::ShortConv => short_conv(&mut b, c, weights, st, il, cur)?,
                    RecurrentBlock::Mamba2 => mamba2(&mut b, c, weights, st, il, cur)?,
                    RecurrentBlock::GatedDeltaNet => {
                        gated_delta_net(&mut b, c, weights, st, il, cur)?
                    }
                }
            }
            _ => self_attention(
                &mut b,
                c,
                shape,
                weights,
                cache,
                &attn_inputs,
                il,
                cur,
                &mut caches,
                &mut attended,
            )?,
        };
        b.set_name(cur, &format!("attn_out-{il}"))?;
        if il == c.n_layer - 1
            && !c.arch.outputs_after_layers
            && let Some(ids) = out_ids
        {
            cur = b.get_rows(cur, ids)?;
            inp = b.get_rows(inp, ids)?;
        }
        if c.arch.post_norms {
            cur = layer_norm(&mut b, c, weights, il, "post_attention_norm", cur)?;
        }
        if c.residual_scale != 0.0 {
            cur = b.scale(cur, c.residual_scale)?;
        }
        let ffn_inp = b.add(cur, inp)?;
        b.set_name(ffn_inp, &format!("ffn_inp-{il}"))?;
        let mut cur = if c.arch.experts_beside_dense && c.is_moe() {
            dense_beside_experts(&mut b, c, weights, il, ffn_inp)?
        } else {
            let cur = layer_norm(&mut b, c, weights, il, c.arch.ffn_norm, ffn_inp)?;
            b.set_name(cur, &format!("ffn_norm-{il}"))?;
            ffn(&mut b, c, weights, il, cur)?
        };
        b.set_name(cur, &format!("ffn_out-{il}"))?;
        if c.arch.post_norms {
            cur = layer_norm(&mut b, c, weights, il, "post_ffw_norm", cur)?;
        }
        if c.residual_scale != 0.0 {
            cur = b.scale(cur, c.residual_scale)?;
        }
        inp = b.add(cur, ffn_inp)?;
        if let Some(all) = per_layer_inputs {
            inp = add_per_layer_input(&mut b, c, weights, il, inp, all)?;
        }
        if let Some(scale) = weights.opt(&mut b, &format!("blk.{il}.layer_output_scale.weight"))? {
            inp = b.mul(inp, scale)?;
        }
        b.set_name(inp, &format!("l_out-{il}"))?;
        layer_outputs.push(inp);
    }
    if (c.n_layer == 0 || c.arch.outputs_after_layers)
        && let Some(ids) = out_ids
    {
        inp = b.get_rows(inp, ids)?;
    }
    let out_norm = weights.req(&mut b, &format!("{}.weight", c.arch.output_norm))?;
    let norm = rms_norm(&mut b, inp, out_norm, c.rms_eps)?;
    b.set_name(norm, "result_norm")?;
    let logits = match head {
        true => Some(output_head(&mut b, c, weights, tok_embd, norm)?),
        false => None,
    };
    Ok(Body {
        b,
        inputs: GraphInputs {
            tokens,
            positions,
            kq_mask,
            kq_mask_swa,
            out_ids,
            k_idx,
            v_idx,
            k_idx_swa,
            v_idx_swa,
            recurrent: recurrent.map(|(_, inputs)| inputs),
            pooling: PoolingInputs::default(),
        },
        hidden: norm,
        logits,
        caches,
        layer_outputs,
    })
}

/// The logits of the normed rows: the output matrix (a model with tied
/// embeddings has its copy of the token embeddings as `output.weight`,
/// `ModelDesc`, on the output layer's device), its bias, scale and cap.
fn output_head(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    tok_embd: TensorId,
    norm: TensorId,
) -> Result<TensorId> {
    let output = weights.model_tensor(b, "output.weight", &[c.n_embd, c.n_vocab])?;
    let mut logits = b.mul_mat(output.unwrap_or(tok_embd), norm)?;
    if let Some(bias) = weights.opt(b, "output.bias")? {
        logits = b.add(logits, bias)?;
    }
    if c.logit_scale != 0.0 {
        logits = b.scale(logits, 1.0 / c.logit_scale)?;
    }
    if c.final_softcap > 0.0 {
        logits = softcap(b, logits, c.final_softcap)?;
    }
    b.set_name(logits, "result_output")?;
    Ok(logits)
}

/// Gemma 4's per-layer inputs `[n_embd_per_layer, n_tokens, n_layer]`:
/// each token's row of `per_layer_token_embd` (times sqrt of its width)
/// plus the RMS-normed projection of the scaled embeddings `embd` (times
/// 1/sqrt(n_embd)), times 1/sqrt(2), as llama.cpp computes them.
fn per_layer_inputs(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    tokens: TensorId,
    embd: TensorId,
) -> Result<TensorId> {
    let (p, n_tokens) = (c.n_embd_per_layer, b.tensor(tokens)?.ne[0]);
    let table = weights.req(b, "per_layer_token_embd.weight")?;
    let own = b.get_rows(table, tokens)?;
    let own = b.reshape(own, &[p, c.n_layer, n_tokens])?;
    let own = b.scale(own, (p as f32).sqrt())?;
    let proj_w = weights.req(b, "per_layer_model_proj.weight")?;
    let proj = b.mul_mat(proj_w, embd)?;
    let proj = b.scale(proj, 1.0 / (c.n_embd as f32).sqrt())?;
    let proj = b.reshape(proj, &[p, c.n_layer, n_tokens])?;
    let norm = weights.req(b, "per_layer_proj_norm.weight")?;
    let proj = rms_norm(b, proj, norm, c.rms_eps)?;
    let sum = b.add(proj, own)?;
    let sum = b.scale(sum, 1.0 / 2f32.sqrt())?;
    b.set_name(sum, "inp_per_layer")?;
    let by_layer = b.permute(sum, [0, 2, 1, 3])?;
    b.cont(by_layer)
}

/// Layer `il`'s output `x` plus its per-layer input (of `all`, from
/// [`per_layer_inputs`]): gelu of `inp_gate` · x, times the layer's
/// input, projected back by `proj`, RMS-normed.
fn add_per_layer_input(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    il: usize,
    x: TensorId,
    all: TensorId,
) -> Result<TensorId> {
    let (p, n_rows) = (c.n_embd_per_layer, b.tensor(x)?.ne[1]);
    let t = b.tensor(all)?;
    let (row, plane, n_tokens) = (t.nb[1], t.nb[2], t.ne[1]);
    // every row: an architecture with per-layer inputs picks the output
    // rows after the layers
    if n_rows != n_tokens {
        return Err(Error::InvalidArgument(format!(
            "layer {il} has {n_rows} of the ubatch's {n_tokens} rows for its per-layer input"
        )));
    }
    let own = b.view_2d(all, p, n_tokens, row, il * plane)?;
    let gate_w = weights.req(b, &format!("blk.{il}.inp_gate.weight"))?;
    let gate = b.mul_mat(gate_w, x)?;
    let gate = b.gelu(gate)?;
    let gated = b.mul(gate, own)?;
    let proj_w = weights.req(b, &format!("blk.{il}.proj.weight"))?;
    let out = b.mul_mat(proj_w, gated)?;
    let out = layer_norm(b, c, weights, il, "post_norm", out)?;
    b.set_name(out, &format!("per_layer_embd_out-{il}"))?;
    b.add(x, out)
}

/// Fills a causal mask for tokens at `positions` attending to cells at
/// `cell_positions` (None = empty cell): 0 where the cell's position is at
/// or before the token's (and, with a window `n_swa` > 0, less than
/// `n_swa` before it), -inf elsewhere. Row-major `[n_kv, n_tokens]`: one
/// row of `cell_positions.len()` values per token.
pub fn causal_mask(positions: &[i32], cell_positions: &[Option<i32>], n_swa: usize) -> Vec<f32> {
    let mut m = Vec::with_capacity(positions.len() * cell_positions.len());
    for &p in positions {
        for c in cell_positions {
            m.push(match c {
                Some(cp) if *cp <= p && (n_swa == 0 || ((p - cp) as usize) < n_swa) => 0.0,
                _ => f32::NEG_INFINITY,
            });
        }
    }
    m
}
