//! bert: the BERT encoder (`encoder.rs`) as llama.cpp reads it: LayerNorm
//! epsilon, token types, learned positions up to the trained context,
//! attention in both directions, mean pooling unless the file says
//! otherwise (sentence-transformers' BGE and MiniLM files do).

use ggraph_core::error::Result;

use super::config::{ArchSpec, FfnKind, ModelConfig};
use super::pooling_type::Pooling;
use crate::gguf::{GgufHeader, meta_error};

/// bert: the BERT family's post-norm encoder, with no memory between
/// batches.
pub static BERT: ArchSpec = ArchSpec {
    name: "bert",
    ffn: FfnKind::Ungated,
    encoder: true,
    embeddings_only: true,
    keeps_no_memory: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    c.use_rope = false;
    read_token_types(h, c)
}

/// The token-type count (a vocabulary key), which a BERT-family model
/// must have.
pub(super) fn read_token_types(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    const TYPES: &str = "tokenizer.ggml.token_type_count";
    c.n_token_types = match h.opt_u32(TYPES)? {
        Some(n) if n > 0 => n as usize,
        _ => {
            return Err(meta_error(format!(
                "{TYPES} is missing or 0: a {} model needs to define its token types",
                c.arch.name
            )));
        }
    };
    Ok(())
}

fn defaults(c: &mut ModelConfig) {
    c.use_rope = false;
    c.causal = false;
    c.pooling = Pooling::Mean;
    c.n_token_types = 2;
    c.n_ctx_train = 512;
    c.n_ctx_orig = 512;
}
