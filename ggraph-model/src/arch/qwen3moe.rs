//! qwen3moe: qwen3's attention over a mixture of experts in every layer:
//! softmax over the router's logits, the top `expert_used_count`
//! experts, their weights renormalised to sum to one.

use ggraph_core::error::Result;
use ggraph_core::ir::RopeMode;

use super::config::{ArchSpec, ModelConfig};
use super::qwen2;
use crate::gguf::{GgufHeader, meta_error};

/// qwen3moe: qwen3's attention over a mixture of experts in every layer
/// (top `expert_used_count` of the router's softmax, renormalised).
pub static QWEN3MOE: ArchSpec = ArchSpec {
    name: "qwen3moe",
    rope: RopeMode::Neox,
    qk_norm: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    if c.n_expert == 0 || c.n_expert_used == 0 {
        return Err(meta_error(format!(
            "qwen3moe needs experts: {}.expert_count and expert_used_count must be positive",
            c.arch.name
        )));
    }
    // without its own key, the expert width is n_ff spread over the
    // experts a token uses (as llama.cpp reads it)
    if h.opt_hparam_u32("expert_feed_forward_length")?.is_none() {
        c.n_ff_expert = c.n_ff / c.n_expert_used;
    }
    Ok(())
}

fn defaults(c: &mut ModelConfig) {
    qwen2::defaults(c);
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_expert = c.n_ff / 2;
}
