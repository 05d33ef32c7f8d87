//! qwen3: llama's layers with Q and K RMS-normalised per head before the
//! NeoX rope; head_dim is its own key (`attention.key_length`).

use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, ExpertRouting, FfnKind, no_keys_of_its_own};
use super::qwen2;

/// qwen3: llama's layers with per-head Q and K RMS norms and the NeoX rope.
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
    defaults: qwen2::defaults,
};
