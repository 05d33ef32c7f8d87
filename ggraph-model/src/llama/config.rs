//! The hyperparameters of a llama-family model, and how they are read
//! from a GGUF header, the way llama.cpp reads them.

use ggraph_core::error::{Error, Result};

use crate::gguf::{GgufHeader, meta_error};

/// Hyperparameters of a llama-family model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    /// Per-head dimension (n_embd / n_head unless the model says otherwise).
    pub head_dim: usize,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    /// Rotated dimensions per head.
    pub n_rot: usize,
    pub rms_eps: f32,
    /// Experts per MoE layer (0 for a dense model).
    pub n_expert: usize,
    pub n_expert_used: usize,
    /// Expert FFN width (defaults to n_ff).
    pub n_ff_expert: usize,
}

impl LlamaConfig {
    /// A dense llama with head_dim = n_embd / n_head and base 10000.
    pub fn dense(
        n_vocab: usize,
        n_embd: usize,
        n_layer: usize,
        n_head: usize,
        n_head_kv: usize,
        n_ff: usize,
    ) -> LlamaConfig {
        let head_dim = n_embd / n_head.max(1);
        LlamaConfig {
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            head_dim,
            rope_freq_base: 10000.0,
            rope_freq_scale: 1.0,
            n_rot: head_dim,
            rms_eps: 1e-5,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_expert: n_ff,
        }
    }

    /// The llama-3-8B shape with `n_layer` layers.
    pub fn llama3_8b(n_layer: usize) -> LlamaConfig {
        let mut c = LlamaConfig::dense(128256, 4096, n_layer, 32, 8, 14336);
        c.rope_freq_base = 500000.0;
        c
    }

    /// K (and V) row width of one layer: head_dim * n_head_kv.
    pub fn n_embd_kv(&self) -> usize {
        self.head_dim * self.n_head_kv
    }

    pub fn is_moe(&self) -> bool {
        self.n_expert > 0
    }

    /// Checks that the numbers fit together.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("llama config: {m}")));
        if self.n_head == 0 || self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
            return bad(format!(
                "n_head {} must be a positive multiple of n_head_kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.n_rot > self.head_dim || self.n_rot % 2 != 0 {
            return bad(format!(
                "n_rot {} must be even and at most head_dim {}",
                self.n_rot, self.head_dim
            ));
        }
        if self.n_embd == 0 || self.n_vocab == 0 || self.head_dim == 0 {
            return bad("n_embd, n_vocab and head_dim must be positive".into());
        }
        if self.is_moe() && (self.n_expert_used == 0 || self.n_expert_used > self.n_expert) {
            return bad(format!(
                "n_expert_used {} must be in 1..={}",
                self.n_expert_used, self.n_expert
            ));
        }
        Ok(())
    }

    /// Every weight of the model: GGUF name and ggml shape.
    pub fn weight_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (e, q, kv) = (self.n_embd, self.n_head * self.head_dim, self.n_embd_kv());
        let mut w = vec![("token_embd.weight".to_string(), vec![e, self.n_vocab])];
        for i in 0..self.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            w.push((p("attn_norm"), vec![e]));
            w.push((p("attn_q"), vec![e, q]));
            w.push((p("attn_k"), vec![e, kv]));
            w.push((p("attn_v"), vec![e, kv]));
            w.push((p("attn_output"), vec![q, e]));
            w.push((p("ffn_norm"), vec![e]));
            if self.is_moe() {
                let (f, x) = (self.n_ff_expert, self.n_expert);
                w.push((p("ffn_gate_inp"), vec![e, x]));
                w.push((p("ffn_gate_exps"), vec![e, f, x]));
                w.push((p("ffn_up_exps"), vec![e, f, x]));
                w.push((p("ffn_down_exps"), vec![f, e, x]));
            } else {
                w.push((p("ffn_gate"), vec![e, self.n_ff]));
                w.push((p("ffn_up"), vec![e, self.n_ff]));
                w.push((p("ffn_down"), vec![self.n_ff, e]));
            }
        }
        w.push(("output_norm.weight".into(), vec![e]));
        w.push(("output.weight".into(), vec![e, self.n_vocab]));
        w
    }

    /// The layer a weight belongs to (None for embedding and output).
    pub fn layer_of(name: &str) -> Option<usize> {
        name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
    }
}

fn uniform(key: &str, v: &[u32]) -> Result<usize> {
    match v.first() {
        Some(&x) if v.iter().all(|&y| y == x) => Ok(x as usize),
        Some(_) => Err(meta_error(format!(
            "'{key}' differs between layers ({v:?}); the llama graph needs one value for all layers"
        ))),
        None => Err(meta_error(format!("'{key}': the model has no layers"))),
    }
}

/// The most layers a llama header may declare (Ollama's bound as well).
pub const MAX_LAYERS: usize = 65536;

/// The llama hyperparameters of a `llama` header, read as llama.cpp reads
/// them (defaults: `head_count_kv` = `head_count`, `key_length` =
/// `embedding_length / head_count`, `rope.dimension_count` = head size,
/// `rope.freq_base` = 10000, rope scale = 1 / `rope.scaling.factor`).
pub fn llama_config(h: &GgufHeader) -> Result<LlamaConfig> {
    let arch = h.architecture()?;
    if arch != "llama" {
        return Err(meta_error(format!(
            "architecture '{arch}' is not one the llama graph builds (expected 'llama')"
        )));
    }
    let n_layer = h.hparam_u32("block_count")? as usize;
    // per-layer tables are sized by the layer count: bound it before any
    // is made
    if n_layer > MAX_LAYERS {
        return Err(meta_error(format!(
            "llama.block_count {n_layer} is more than the {MAX_LAYERS} layers ggraph accepts"
        )));
    }
    let n_embd = h.hparam_u32("embedding_length")? as usize;
    let heads = h.layer_u32s("attention.head_count", n_layer)?;
    let n_head = uniform("llama.attention.head_count", &heads)?;
    let n_head_kv = match h.opt_layer_u32s("attention.head_count_kv", n_layer)? {
        Some(v) => uniform("llama.attention.head_count_kv", &v)?,
        None => n_head,
    };
    let n_ff = uniform(
        "llama.feed_forward_length",
        &h.layer_u32s("feed_forward_length", n_layer)?,
    )?;
    let head_dim = match h.opt_hparam_u32("attention.key_length")? {
        Some(k) => k as usize,
        None if n_head > 0 => n_embd / n_head,
        None => 0,
    };
    if let Some(v) = h.opt_hparam_u32("attention.value_length")?
        && v as usize != head_dim
    {
        return Err(meta_error(format!(
            "llama.attention.value_length {v} differs from the key length {head_dim}; the llama graph needs them equal"
        )));
    }
    let scale = match h.opt_hparam_f32("rope.scaling.factor")? {
        Some(f) if f != 0.0 => Some(f),
        _ => h.opt_hparam_f32("rope.scale_linear")?.filter(|&f| f != 0.0),
    };
    let n_ff_expert = match h.opt_hparam_u32("expert_feed_forward_length")? {
        Some(n) => n as usize,
        None => n_ff,
    };
    let c = LlamaConfig {
        n_vocab: h.vocab_size()? as usize,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        n_ff,
        head_dim,
        rope_freq_base: h.opt_hparam_f32("rope.freq_base")?.unwrap_or(10000.0),
        rope_freq_scale: scale.map_or(1.0, |f| 1.0 / f),
        n_rot: h
            .opt_hparam_u32("rope.dimension_count")?
            .map_or(head_dim, |n| n as usize),
        rms_eps: h.hparam_f32("attention.layer_norm_rms_epsilon")?,
        n_expert: h.opt_hparam_u32("expert_count")?.unwrap_or(0) as usize,
        n_expert_used: h.opt_hparam_u32("expert_used_count")?.unwrap_or(0) as usize,
        n_ff_expert,
    };
    c.validate()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::Value;
    use crate::gguf::metadata::tests::{header, llama_kv};

    #[test]
    fn an_absurd_layer_count_is_refused_before_tables_are_sized() {
        let mut kv = llama_kv();
        for (k, v) in kv.iter_mut() {
            if *k == "llama.block_count" {
                *v = Value::U32(4_000_000_000);
            }
        }
        let e = llama_config(&header(kv)).unwrap_err().to_string();
        assert!(e.contains("4000000000"), "{e}");
    }

    #[test]
    fn a_llama_config_comes_from_a_llama_header() {
        let c = llama_config(&header(llama_kv())).unwrap();
        assert_eq!(
            (
                c.n_vocab,
                c.n_embd,
                c.n_layer,
                c.n_head,
                c.n_head_kv,
                c.n_ff
            ),
            (100, 64, 2, 4, 2, 128)
        );
        assert_eq!((c.head_dim, c.n_rot), (16, 16));
        assert_eq!(c.rope_freq_base, 500000.0);
        assert_eq!(c.rms_eps, 1e-6);
        assert!(!c.is_moe());
        let mut kv = llama_kv();
        kv[0].1 = "gemma".into();
        assert!(llama_config(&header(kv)).is_err());
    }
}
