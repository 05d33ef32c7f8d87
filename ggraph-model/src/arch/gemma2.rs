//! gemma2: embeddings scaled by sqrt(n_embd); each layer norms before and
//! after both the attention and the GeGLU FFN; attention scores and
//! logits soft-capped (`c * tanh(x / c)`); every other layer (0, 2, ...)
//! attends over a sliding window; the logits always come from the token
//! embeddings.

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, FfnKind, ModelConfig};
use crate::gguf::GgufHeader;

/// gemma2: scaled embeddings, norms before and after attention and FFN,
/// GeGLU, soft-capped scores and logits, every other layer on a sliding
/// window, logits from the token embeddings.
pub static GEMMA2: ArchSpec = ArchSpec {
    name: "gemma2",
    rope: RopeMode::Neox,
    post_norms: true,
    ffn: FfnKind::Split(GluOp::Geglu),
    embed_scale: true,
    prescaled_q: true,
    tied_output: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

/// Layers of the 27B model, whose attention scale follows n_embd / n_head.
const LAYERS_27B: usize = 46;

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    let n_swa = h
        .opt_hparam_u32("attention.sliding_window")?
        .unwrap_or(4096);
    c.read_swa_pattern(h, n_swa as usize, 2)?;
    c.rope_freq_base_swa = h
        .opt_hparam_f32("rope.freq_base_swa")?
        .unwrap_or(c.rope_freq_base);
    c.rope_freq_scale_swa = c.rope_freq_scale;
    c.attn_softcap = h.opt_hparam_f32("attn_logit_softcapping")?.unwrap_or(50.0);
    c.final_softcap = h.opt_hparam_f32("final_logit_softcapping")?.unwrap_or(30.0);
    c.attention_scale = gemma_attention_scale(c, LAYERS_27B);
    Ok(())
}

fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-6;
    c.set_swa_pattern(4096, 2);
    c.rope_freq_base_swa = c.rope_freq_base;
    c.attn_softcap = 50.0;
    c.final_softcap = 30.0;
}

/// Gemma's attention scale: 1 / sqrt(head_dim), but 1 / sqrt(n_embd /
/// n_head) for the 27B models (`n_layer_27b` layers), as gemma_pytorch
/// and llama.cpp have it.
pub(super) fn gemma_attention_scale(c: &ModelConfig, n_layer_27b: usize) -> f32 {
    let d = if c.n_layer == n_layer_27b {
        c.n_embd / c.n_head.max(1)
    } else {
        c.head_dim
    };
    1.0 / (d.max(1) as f32).sqrt()
}
