//! qwen3: llama's layers with Q and K RMS-normalised per head before the
//! NeoX rope; head_dim is its own key (`attention.key_length`).

use ggraph_core::ir::RopeMode;

use super::config::ArchSpec;
use super::qwen2;

/// qwen3: llama's layers with per-head Q and K RMS norms and the NeoX rope.
pub static QWEN3: ArchSpec = ArchSpec {
    name: "qwen3",
    rope: RopeMode::Neox,
    qk_norm: true,
    defaults: qwen2::defaults,
    ..ArchSpec::BASE
};
