//! gpt-oss (llama.cpp's `openai-moe`): attention with a learned sink
//! logit per head and biases on every projection, sliding-window and
//! full layers in turn (the even ones slide), YaRN rope, and a mixture
//! of experts in every layer whose router picks the top logits and
//! softmaxes those, each expert with biases and gpt-oss's clamped SwiGLU.

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, ExpertRouting, FfnKind, ModelConfig};
use crate::gguf::{GgufHeader, meta_error};

/// gpt-oss: sinks and biases in attention, alternating sliding-window
/// layers, and biased experts routed by a softmax over the top logits.
pub static GPT_OSS: ArchSpec = ArchSpec {
    name: "gpt-oss",
    rope: RopeMode::Neox,
    qkv_bias: true,
    ffn: FfnKind::Split(GluOp::SWIGLU_OAI),
    ffn_norm: "post_attention_norm",
    attention_sinks: true,
    output_bias: true,
    routing: ExpertRouting::TopKThenSoftmax,
    moe_biases: true,
    outputs_after_layers: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    if !c.is_moe() {
        return Err(meta_error(format!(
            "{} is missing or 0: a gpt-oss model routes to experts",
            h.arch_key("expert_count")?
        )));
    }
    let width_key = h.arch_key("expert_feed_forward_length")?;
    if h.opt_hparam_u32("expert_feed_forward_length")?.is_none() {
        return Err(meta_error(format!("key '{width_key}' is missing")));
    }
    let n_swa = h.hparam_u32("attention.sliding_window")? as usize;
    c.read_swa_pattern(h, n_swa, 2)?;
    c.rope_freq_base_swa = h
        .opt_hparam_f32("rope.freq_base_swa")?
        .unwrap_or(c.rope_freq_base);
    c.rope_freq_scale_swa = c.rope_freq_scale;
    // llama.cpp scales the scores by the rotated dimensions' root
    c.attention_scale = 1.0 / (c.n_rot as f32).sqrt();
    Ok(())
}

/// gpt-oss-20b's numbers where a random model keeps them: a window of
/// 128, rope base 150000 stretched 32 times by YaRN from 4096.
fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-5;
    c.rope_freq_base = 150_000.0;
    c.rope_freq_scale = 1.0 / 32.0;
    c.rope_ext_factor = 1.0;
    c.n_ctx_orig = 4096;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_expert = c.n_ff / 2;
    c.set_swa_pattern(128, 2);
    c.rope_freq_base_swa = c.rope_freq_base;
    c.rope_freq_scale_swa = c.rope_freq_scale;
}
