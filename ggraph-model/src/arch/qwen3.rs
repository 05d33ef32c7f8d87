//! qwen3: llama's layers with Q and K RMS-normalised per head before the
//! NeoX rope; head_dim is its own key (`attention.key_length`).

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, FfnKind, ModelConfig};
use crate::gguf::GgufHeader;

pub static QWEN3: ArchSpec = ArchSpec {
    name: "qwen3",
    rope: RopeMode::Neox,
    qk_norm: true,
    fused_qkv: false,
    qkv_bias: false,
    post_norms: false,
    ffn: FfnKind::Split(GluOp::Swiglu),
    embed_scale: false,
    tied_output: false,
    read,
    defaults,
};

fn read(_: &GgufHeader, _: &mut ModelConfig) -> Result<()> {
    Ok(())
}

fn defaults(c: &mut ModelConfig) {
    c.rope_freq_base = 1_000_000.0;
    c.rms_eps = 1e-6;
}
