//! qwen2: llama's layers with biases on Q, K and V and the NeoX rope.

use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, ExpertRouting, FfnKind, ModelConfig, no_keys_of_its_own};

/// qwen2: llama's layers with Q, K and V biases and the NeoX rope.
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
    recurrent: None,
    output_norm: "output_norm",
    gated_attention: false,
    ffn_norm: "ffn_norm",
    attention_sinks: false,
    output_bias: false,
    routing: ExpertRouting::SoftmaxThenTopK,
    moe_biases: false,
    outputs_after_layers: false,
    value_norm: false,
    experts_beside_dense: false,
    freq_factors_full_only: false,
    layer_output_scale: false,
    per_layer_inputs: false,
    read: no_keys_of_its_own,
    defaults,
};

/// The qwen family's defaults: rope base 1e6, norm epsilon 1e-6.
pub(super) fn defaults(c: &mut ModelConfig) {
    c.rope_freq_base = 1_000_000.0;
    c.rms_eps = 1e-6;
}
