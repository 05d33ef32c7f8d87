//! phi3: llama's layers with Q, K and V in one matrix (`attn_qkv`), gate
//! and up in one (`ffn_up`, twice the width), and a NeoX rope over part
//! of each head (`rope.dimension_count`), with LongRoPE's factors where the
//! model has them (phi-3.5: `rope_factors_short`, and `rope_factors_long`
//! past the original context). llama.cpp turns phi3's sliding window off;
//! so does ggraph.

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, FfnKind, ModelConfig};
use crate::gguf::GgufHeader;

/// phi3: fused QKV and gate/up matrices, a NeoX rope over part of each
/// head, LongRoPE factors where the model has them.
pub static PHI3: ArchSpec = ArchSpec {
    name: "phi3",
    rope: RopeMode::Neox,
    fused_qkv: true,
    ffn: FfnKind::Fused(GluOp::Swiglu),
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(_: &GgufHeader, _: &mut ModelConfig) -> Result<()> {
    Ok(())
}

fn defaults(c: &mut ModelConfig) {
    // three quarters of each head rotated, as phi-4-mini has it
    c.n_rot = c.head_dim * 3 / 4 / 2 * 2;
}
