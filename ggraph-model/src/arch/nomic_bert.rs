//! nomic-bert: the BERT encoder (`encoder.rs`) with rotary positions
//! instead of learned ones (NeoX's), Q, K and V in one matrix, and a
//! SwiGLU FFN (nomic-embed-text).

use ggraph_core::error::Result;
use ggraph_core::ir::RopeMode;

use super::bert::read_token_types;
use super::config::{ArchSpec, ModelConfig};
use super::pooling_type::Pooling;
use crate::gguf::GgufHeader;

/// nomic-bert: a rotary BERT with a SwiGLU FFN, no memory between
/// batches.
pub static NOMIC_BERT: ArchSpec = ArchSpec {
    name: "nomic-bert",
    rope: RopeMode::Neox,
    fused_qkv: true,
    encoder: true,
    embeddings_only: true,
    keeps_no_memory: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    read_token_types(h, c)
}

fn defaults(c: &mut ModelConfig) {
    c.causal = false;
    c.pooling = Pooling::Mean;
    c.n_token_types = 2;
    c.rope_freq_base = 1000.0;
    c.n_ctx_train = 2048;
    c.n_ctx_orig = 2048;
}
