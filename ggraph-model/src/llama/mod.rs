//! The llama graph (llama 1-3, mistral, and MoE variants like mixtral):
//! embedding, per layer rms_norm → attention with rope → residual →
//! rms_norm → SwiGLU FFN (dense or mixture of experts) → residual, then the
//! output norm and logits.
//!
//! Weights come from a [`WeightSource`] (bound tensors of a loaded model, or
//! fresh leafs for tests and benches) and use GGUF's tensor names.

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{Graph, GraphBuilder, RopeMode, RopeParams, TensorId};

use crate::kv::{CacheSource, KvLayout};

mod config;

pub use config::{LlamaConfig, MAX_LAYERS, llama_config};

/// Provides the model's weights to the graph.
pub trait WeightSource {
    /// The leaf for weight `name` of ggml shape `shape`; an error if the
    /// model's tensor has another shape. `None` for optional weights the
    /// model does not have.
    fn weight(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<TensorId>>;
}

/// Fresh (unbound) weight leafs of one type, norms in F32: for tests and
/// benches that fill or merely plan them.
pub struct FreshWeights {
    pub dtype: DType,
}

impl WeightSource for FreshWeights {
    fn weight(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<TensorId>> {
        if name == "rope_freqs.weight" {
            return Ok(None);
        }
        let dtype =
            if shape.len() == 1 || name.contains("norm") || name.ends_with("gate_inp.weight") {
                DType::F32
            } else {
                self.dtype
            };
        b.weight(name, dtype, shape).map(Some)
    }
}

/// How attention is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// kq = k·q, softmax with mask, v·kq: materialises the score matrix.
    /// With a KV cache, V is stored transposed (as llama.cpp does).
    Standard,
    /// One fused flash_attn_ext per layer; V is stored row-major.
    Flash,
}

/// The shape of one graph build: a ubatch over some visible cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildShape {
    /// Tokens in the ubatch.
    pub n_tokens: usize,
    /// Tokens whose logits are computed (the last layer keeps only these).
    pub n_outputs: usize,
    /// Cells the attention looks at (n_tokens without a cache).
    pub n_kv: usize,
    pub attention: Attention,
    /// The cache; None attends only to the ubatch's own tokens.
    pub kv: Option<KvLayout>,
    /// Type of the attention mask: F16 (exact for 0 and -inf, half the
    /// bytes) or F32 (as ggml builds it for standard attention).
    pub mask_type: DType,
}

impl BuildShape {
    /// A ubatch that attends only to itself (no cache), every token
    /// producing logits.
    pub fn prompt(n_tokens: usize, attention: Attention) -> BuildShape {
        BuildShape {
            n_tokens,
            n_outputs: n_tokens,
            n_kv: n_tokens,
            attention,
            kv: None,
            mask_type: DType::F16,
        }
    }

    /// A ubatch over `n_kv` visible cells of a cache.
    pub fn cached(
        n_tokens: usize,
        n_outputs: usize,
        n_kv: usize,
        attention: Attention,
        kv: KvLayout,
    ) -> BuildShape {
        BuildShape {
            n_tokens,
            n_outputs,
            n_kv,
            attention,
            kv: Some(kv),
            mask_type: DType::F16,
        }
    }
}

/// Input leafs of a llama graph.
#[derive(Clone, Debug)]
pub struct LlamaInputs {
    /// I32 [n_tokens] token ids.
    pub tokens: TensorId,
    /// I32 [n_tokens] positions.
    pub positions: TensorId,
    /// [n_kv, n_tokens] attention mask (0 or -inf), F16 or F32.
    pub kq_mask: TensorId,
    /// I32 [n_outputs] rows of the last layer to keep (absent when every
    /// token outputs).
    pub out_ids: Option<TensorId>,
    /// I32 [n_tokens] cache cells the ubatch writes (with a cache).
    pub k_idx: Option<TensorId>,
    /// I32 [n_tokens] cache cells the ubatch writes in V (the same cells as
    /// K; a separate input so that K and V may live on different devices).
    pub v_idx: Option<TensorId>,
}

/// A built llama graph and where its pieces are.
pub struct LlamaGraph {
    pub graph: Graph,
    pub inputs: LlamaInputs,
    /// F32 [n_vocab, n_outputs].
    pub logits: TensorId,
    /// F32 [n_embd, n_outputs]: the output norm's result, the rows the
    /// logits are computed from (llama.cpp's `result_norm`, its
    /// embeddings). Not a graph output unless marked as one.
    pub embeddings: TensorId,
    /// Per layer (k, v) cache tensors.
    pub caches: Vec<(TensorId, TensorId)>,
    /// Last node of each layer (the residual output).
    pub layer_outputs: Vec<TensorId>,
}

/// The rope of a llama's Q and K (and of the KV cache's K shift).
pub fn rope_params(c: &LlamaConfig) -> RopeParams {
    RopeParams::new(c.n_rot, RopeMode::Normal)
        .freq_base(c.rope_freq_base)
        .freq_scale(c.rope_freq_scale)
}

/// The model's rope frequency factors (`rope_freqs.weight`, n_rot / 2
/// values that divide each pair's frequency; llama 3.1 and later carry
/// them), or `None` when the model has none. Every rope over Q or K uses
/// them, the K shift of the cache included.
pub fn rope_freq_factors(
    b: &mut GraphBuilder,
    c: &LlamaConfig,
    weights: &mut dyn WeightSource,
) -> Result<Option<TensorId>> {
    weights.weight(b, "rope_freqs.weight", &[c.n_rot / 2])
}

/// Builds the llama graph for one ubatch.
pub fn build_llama(
    config: &LlamaConfig,
    shape: &BuildShape,
    weights: &mut dyn WeightSource,
    cache: &mut dyn CacheSource,
) -> Result<LlamaGraph> {
    config.validate()?;
    if shape.n_outputs == 0 || shape.n_outputs > shape.n_tokens {
        return Err(Error::InvalidArgument(format!(
            "n_outputs {} must be in 1..={}",
            shape.n_outputs, shape.n_tokens
        )));
    }
    if shape.kv.is_none() && shape.n_kv != shape.n_tokens {
        return Err(Error::InvalidArgument(
            "without a cache, n_kv must equal n_tokens".into(),
        ));
    }
    if let Some(kv) = &shape.kv
        && (shape.n_kv > kv.kv_size || shape.n_kv < shape.n_tokens.min(kv.kv_size))
    {
        return Err(Error::InvalidArgument(format!(
            "n_kv {} must be in n_tokens..=kv_size ({}..={})",
            shape.n_kv, shape.n_tokens, kv.kv_size
        )));
    }
    let c = config;
    let (n_tokens, n_kv) = (shape.n_tokens, shape.n_kv);
    let (hd, n_head, n_head_kv) = (c.head_dim, c.n_head, c.n_head_kv);
    let mut b = GraphBuilder::new();
    let rope_freqs = rope_freq_factors(&mut b, c, weights)?;
    let mut w = |b: &mut GraphBuilder, name: String, shape: &[usize]| -> Result<TensorId> {
        weights
            .weight(b, &name, shape)?
            .ok_or_else(|| Error::InvalidArgument(format!("model has no tensor '{name}'")))
    };

    let tokens = b.input("inp_tokens", DType::I32, &[n_tokens])?;
    let positions = b.input("inp_pos", DType::I32, &[n_tokens])?;
    if !matches!(shape.mask_type, DType::F32 | DType::F16) {
        return Err(Error::InvalidArgument(format!(
            "the attention mask is F32 or F16, not {}",
            shape.mask_type
        )));
    }
    let kq_mask = b.input("kq_mask", shape.mask_type, &[n_kv, n_tokens])?;
    let out_ids = if shape.n_outputs < n_tokens {
        Some(b.input("inp_out_ids", DType::I32, &[shape.n_outputs])?)
    } else {
        None
    };
    let transposed_v = shape.attention == Attention::Standard;
    let (k_idx, v_idx) = match shape.kv {
        Some(_) => {
            let k = b.input("kv_idx_k", DType::I32, &[n_tokens])?;
            let v = b.input("kv_idx_v", DType::I32, &[n_tokens])?;
            (Some(k), Some(v))
        }
        None => (None, None),
    };

    let tok_embd = w(&mut b, "token_embd.weight".into(), &[c.n_embd, c.n_vocab])?;
    let mut inp = b.get_rows(tok_embd, tokens)?;
    b.set_name(inp, "inp_embd")?;
    let rope = rope_params(c);
    let kq_scale = 1.0 / (hd as f32).sqrt();
    let mut caches = Vec::new();
    let mut layer_outputs = Vec::new();

    for il in 0..c.n_layer {
        let name = |s: &str| format!("blk.{il}.{s}.weight");
        let attn_norm = w(&mut b, name("attn_norm"), &[c.n_embd])?;
        let mut cur = b.rms_norm(inp, c.rms_eps)?;
        cur = b.mul(cur, attn_norm)?;

        let wq = w(&mut b, name("attn_q"), &[c.n_embd, n_head * hd])?;
        let wk = w(&mut b, name("attn_k"), &[c.n_embd, c.n_embd_kv()])?;
        let wv = w(&mut b, name("attn_v"), &[c.n_embd, c.n_embd_kv()])?;
        let q = b.mul_mat(wq, cur)?;
        let q = b.reshape(q, &[hd, n_head, n_tokens])?;
        let q = b.rope_ext(q, positions, rope_freqs, rope)?;
        let k = b.mul_mat(wk, cur)?;
        let k = b.reshape(k, &[hd, n_head_kv, n_tokens])?;
        let k = b.rope_ext(k, positions, rope_freqs, rope)?;
        let v = b.mul_mat(wv, cur)?;

        // keys and values the attention reads: [hd, n_kv, n_head_kv]
        let (k_all, v_all) = match (&shape.kv, k_idx, v_idx) {
            (Some(kv), Some(ki), Some(vi)) => {
                let (kc, vc) = cache.layer_cache(&mut b, il, kv, c.n_embd_kv())?;
                caches.push((kc, vc));
                let k2 = b.reshape(k, &[c.n_embd_kv(), n_tokens])?;
                let wk = b.set_rows(kc, k2, ki)?;
                b.expand(wk)?;
                let wv = if transposed_v {
                    // the cache holds V transposed: element (e, cell) at
                    // e * kv_size + cell. Seen as [1, kv_size, n_embd_kv]
                    // it has one-value rows per cell in every plane e, and
                    // V seen as [1, n_tokens, n_embd_kv] (a strided view)
                    // writes them with the same per-token indices
                    let es = 4; // v is F32
                    let planes = b.reshape(vc, &[1, kv.kv_size, c.n_embd_kv()])?;
                    let vt =
                        b.view_3d(v, [1, n_tokens, c.n_embd_kv()], c.n_embd_kv() * es, es, 0)?;
                    b.set_rows(planes, vt, vi)?
                } else {
                    b.set_rows(vc, v, vi)?
                };
                b.expand(wv)?;
                let ek = kv.k_type.row_size(hd).unwrap_or(0);
                let k_row = kv.k_type.row_size(c.n_embd_kv()).unwrap_or(0);
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
                    let v_row = kv.v_type.row_size(c.n_embd_kv()).unwrap_or(0);
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
        let qp = b.permute(q, [0, 2, 1, 3])?;
        let attn = match shape.attention {
            Attention::Standard => {
                let kq = b.mul_mat(k_all, qp)?;
                let kq = b.soft_max_ext(kq, Some(kq_mask), kq_scale, 0.0)?;
                let kqv = b.mul_mat(v_all, kq)?;
                let merged = b.permute(kqv, [0, 2, 1, 3])?;
                let merged = b.cont(merged)?;
                b.reshape(merged, &[n_head * hd, n_tokens])?
            }
            Attention::Flash => {
                let o = b.flash_attn_ext(qp, k_all, v_all, Some(kq_mask), kq_scale, 0.0, 0.0)?;
                b.reshape(o, &[n_head * hd, n_tokens])?
            }
        };
        let wo = w(&mut b, name("attn_output"), &[n_head * hd, c.n_embd])?;
        let mut cur = b.mul_mat(wo, attn)?;

        if il == c.n_layer - 1
            && let Some(ids) = out_ids
        {
            cur = b.get_rows(cur, ids)?;
            inp = b.get_rows(inp, ids)?;
        }
        let ffn_inp = b.add(cur, inp)?;
        let ffn_norm = w(&mut b, name("ffn_norm"), &[c.n_embd])?;
        let cur = b.rms_norm(ffn_inp, c.rms_eps)?;
        let cur = b.mul(cur, ffn_norm)?;
        let ffn_out = if c.is_moe() {
            moe_ffn(&mut b, c, il, cur, &mut w)?
        } else {
            let gate = w(&mut b, name("ffn_gate"), &[c.n_embd, c.n_ff])?;
            let up = w(&mut b, name("ffn_up"), &[c.n_embd, c.n_ff])?;
            let down = w(&mut b, name("ffn_down"), &[c.n_ff, c.n_embd])?;
            let g = b.mul_mat(gate, cur)?;
            let u = b.mul_mat(up, cur)?;
            let h = b.swiglu_split(g, u)?;
            b.mul_mat(down, h)?
        };
        inp = b.add(ffn_out, ffn_inp)?;
        b.set_name(inp, &format!("l_out-{il}"))?;
        layer_outputs.push(inp);
    }
    if c.n_layer == 0
        && let Some(ids) = out_ids
    {
        inp = b.get_rows(inp, ids)?;
    }
    let out_norm = w(&mut b, "output_norm.weight".into(), &[c.n_embd])?;
    let cur = b.rms_norm(inp, c.rms_eps)?;
    let cur = b.mul(cur, out_norm)?;
    b.set_name(cur, "result_norm")?;
    let output = match weights.weight(&mut b, "output.weight", &[c.n_embd, c.n_vocab])? {
        Some(o) => o,
        None => tok_embd, // tied embeddings
    };
    let logits = b.mul_mat(output, cur)?;
    b.set_name(logits, "result_output")?;
    b.set_output(logits)?;
    Ok(LlamaGraph {
        graph: b.build(),
        inputs: LlamaInputs {
            tokens,
            positions,
            kq_mask,
            out_ids,
            k_idx,
            v_idx,
        },
        logits,
        embeddings: cur,
        caches,
        layer_outputs,
    })
}

/// Fetches a required weight by name and shape.
type WeightFn<'a> = dyn FnMut(&mut GraphBuilder, String, &[usize]) -> Result<TensorId> + 'a;

/// Mixture of experts: route each token to its top experts by softmax
/// probability, weight their SwiGLU outputs by those (renormalised)
/// probabilities, and sum.
fn moe_ffn(
    b: &mut GraphBuilder,
    c: &LlamaConfig,
    il: usize,
    cur: TensorId,
    w: &mut WeightFn<'_>,
) -> Result<TensorId> {
    let name = |s: &str| format!("blk.{il}.{s}.weight");
    let (e, f, x, k) = (c.n_embd, c.n_ff_expert, c.n_expert, c.n_expert_used);
    let n_tokens = b.tensor(cur)?.ne[1];
    let gate_inp = w(b, name("ffn_gate_inp"), &[e, x])?;
    let gate_exps = w(b, name("ffn_gate_exps"), &[e, f, x])?;
    let up_exps = w(b, name("ffn_up_exps"), &[e, f, x])?;
    let down_exps = w(b, name("ffn_down_exps"), &[f, e, x])?;

    let logits = b.mul_mat(gate_inp, cur)?; // [x, n_tokens]
    let probs = b.soft_max(logits)?;
    let selected = b.top_k(probs, k)?; // [k, n_tokens]
    let probs3 = b.reshape(probs, &[1, x, n_tokens])?;
    let weights = b.get_rows(probs3, selected)?; // [1, k, n_tokens]
    let weights2 = b.reshape(weights, &[k, n_tokens])?;
    let sum = b.sum_rows(weights2)?; // [1, n_tokens]
    let weights2 = b.div(weights2, sum)?;
    let weights = b.reshape(weights2, &[1, k, n_tokens])?;

    let cur3 = b.reshape(cur, &[e, 1, n_tokens])?;
    let g = b.mul_mat_id(gate_exps, cur3, selected)?; // [f, k, n_tokens]
    let u = b.mul_mat_id(up_exps, cur3, selected)?;
    let h = b.swiglu_split(g, u)?;
    let experts = b.mul_mat_id(down_exps, h, selected)?; // [e, k, n_tokens]
    let experts = b.mul(experts, weights)?;
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
    Ok(out)
}

/// Fills a standard causal mask for tokens at `positions` attending to
/// cells at `cell_positions` (None = empty cell): 0 where the cell's
/// position is at or before the token's and the sequence matches, -inf
/// elsewhere. Row-major [n_kv, n_tokens].
pub fn causal_mask(positions: &[i32], cell_positions: &[Option<i32>]) -> Vec<f32> {
    let mut m = Vec::with_capacity(positions.len() * cell_positions.len());
    for &p in positions {
        for c in cell_positions {
            m.push(match c {
                Some(cp) if *cp <= p => 0.0,
                _ => f32::NEG_INFINITY,
            });
        }
    }
    m
}
