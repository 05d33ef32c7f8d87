//! jina-bert-v2 (jina-embeddings-v2): the BERT encoder (`encoder.rs`)
//! placing its tokens by ALiBi (the mask holds minus each key's distance,
//! the heads' slopes up to a bias of 8) instead of learned positions, a
//! GEGLU FFN (the gate its own matrix, or the first half of `ffn_up`'s
//! rows), and where a model has them LayerNorms of Q and K and a second
//! norm after attention.

use ggraph_core::error::Result;
use ggraph_core::ir::GluOp;

use super::bert::read_token_types;
use super::config::{ArchSpec, FfnKind, ModelConfig};
use super::pooling_type::Pooling;
use crate::gguf::GgufHeader;

/// jina-bert-v2: an ALiBi BERT with a GEGLU FFN, no memory between
/// batches.
pub static JINA_BERT_V2: ArchSpec = ArchSpec {
    name: "jina-bert-v2",
    ffn: FfnKind::Split(GluOp::Geglu),
    encoder: true,
    embeddings_only: true,
    keeps_no_memory: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

/// llama.cpp's ALiBi bias for jina-bert-v2.
const MAX_ALIBI_BIAS: f32 = 8.0;

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    c.use_rope = false;
    c.max_alibi_bias = MAX_ALIBI_BIAS;
    // gate and up in one matrix where the file has no gate of its own
    if h.tensor("blk.0.ffn_gate.weight").is_none() {
        c.ffn = FfnKind::Fused(GluOp::Geglu);
    }
    read_token_types(h, c)
}

fn defaults(c: &mut ModelConfig) {
    c.use_rope = false;
    c.max_alibi_bias = MAX_ALIBI_BIAS;
    c.causal = false;
    c.pooling = Pooling::Mean;
    c.n_token_types = 2;
    c.n_ctx_train = 8192;
    c.n_ctx_orig = 8192;
}
