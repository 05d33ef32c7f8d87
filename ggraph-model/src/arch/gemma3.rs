//! gemma3: gemma2's sandwich layers with Q and K RMS-normalised per head
//! and no attention soft-cap; five sliding-window layers to one global
//! (when the model has a window), the sliding ones with their own rope
//! base (`rope.freq_base_swa`, 10000 when absent).

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, FfnKind, ModelConfig};
use super::gemma2::gemma_attention_scale;
use crate::gguf::GgufHeader;

/// gemma3: gemma2's layers with per-head Q and K norms and no attention
/// soft-cap; five sliding-window layers to one global.
pub static GEMMA3: ArchSpec = ArchSpec {
    name: "gemma3",
    rope: RopeMode::Neox,
    qk_norm: true,
    post_norms: true,
    ffn: FfnKind::Split(GluOp::Geglu),
    embed_scale: true,
    prescaled_q: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

/// Layers of the 27B model, whose attention scale follows n_embd / n_head.
const LAYERS_27B: usize = 62;

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    match h.opt_hparam_u32("attention.sliding_window")? {
        Some(n_swa) if n_swa > 0 => {
            c.read_swa_pattern(h, n_swa as usize, 6)?;
            c.rope_freq_base_swa = h.opt_hparam_f32("rope.freq_base_swa")?.unwrap_or(10000.0);
        }
        _ => c.set_swa_pattern(0, 1),
    }
    c.final_softcap = h.opt_hparam_f32("final_logit_softcapping")?.unwrap_or(0.0);
    c.attention_scale = gemma_attention_scale(c, LAYERS_27B);
    Ok(())
}

fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-6;
    c.rope_freq_base = 1_000_000.0;
    c.set_swa_pattern(512, 6);
}
