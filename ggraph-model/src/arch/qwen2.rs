//! qwen2: llama's layers with biases on Q, K and V and the NeoX rope.

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, FfnKind, ModelConfig};
use crate::gguf::GgufHeader;

pub static QWEN2: ArchSpec = ArchSpec {
    name: "qwen2",
    rope: RopeMode::Neox,
    qk_norm: false,
    fused_qkv: false,
    qkv_bias: true,
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
