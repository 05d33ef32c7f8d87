//! qwen2: llama's layers with biases on Q, K and V and the NeoX rope.

use ggraph_core::ir::RopeMode;

use super::config::{ArchSpec, ModelConfig};

/// qwen2: llama's layers with Q, K and V biases and the NeoX rope.
pub static QWEN2: ArchSpec = ArchSpec {
    name: "qwen2",
    rope: RopeMode::Neox,
    qkv_bias: true,
    defaults,
    ..ArchSpec::BASE
};

/// The qwen family's defaults: rope base 1e6, norm epsilon 1e-6.
pub(super) fn defaults(c: &mut ModelConfig) {
    c.rope_freq_base = 1_000_000.0;
    c.rms_eps = 1e-6;
}
