//! gemma-embedding (EmbeddingGemma): gemma3's sandwich layers over the
//! ubatch alone, in both directions (no memory), the sliding layers'
//! window symmetric around each token, and sentence-transformers' dense
//! projections after pooling where the file has them.

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, FfnKind, ModelConfig};
use super::pooling_type::Pooling;
use crate::gguf::{GgufHeader, meta_error};

/// gemma-embedding: gemma3's layers as a bidirectional encoder.
pub static GEMMA_EMBEDDING: ArchSpec = ArchSpec {
    name: "gemma-embedding",
    rope: RopeMode::Neox,
    qk_norm: true,
    post_norms: true,
    ffn: FfnKind::Split(GluOp::Geglu),
    embed_scale: true,
    prescaled_q: true,
    embeddings_only: true,
    keeps_no_memory: true,
    swa_symmetric: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    let n_swa = h.hparam_u32("attention.sliding_window")? as usize;
    c.read_swa_pattern(h, n_swa, 6)?;
    c.rope_freq_base_swa = h.opt_hparam_f32("rope.freq_base_swa")?.unwrap_or(10000.0);
    // embeddings do not use causal attention, whatever the file says
    c.causal = false;
    for (key, want) in [
        ("dense_2_feat_in", c.n_embd),
        ("dense_3_feat_out", c.n_embd),
    ] {
        if let Some(n) = h.opt_hparam_u32(key)?
            && c.n_dense > 0
            && n as usize != want
        {
            return Err(meta_error(format!(
                "{} is {n}; llama.cpp needs it to be the width {want}",
                h.arch_key(key)?
            )));
        }
    }
    Ok(())
}

fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-6;
    c.causal = false;
    c.pooling = Pooling::Mean;
    c.set_swa_pattern(512, 6);
}
