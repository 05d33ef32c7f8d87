//! granitehybrid (IBM's Granite 4.0-H): Mamba-2 layers and attention
//! layers, the kind of each given by the file (a layer without KV heads
//! is a Mamba-2 one), with granite's scales (embeddings, each block's
//! output before its residual add, the logits, the attention scores) and
//! a dense SwiGLU FFN or a mixture of experts with a shared expert. The
//! rope is on unless `rope.scaling.finetuned` is false (the -H models
//! have no position embedding).

use ggraph_core::error::Result;

use super::config::{ArchSpec, ModelConfig, RecurrentBlock};
use crate::gguf::{GgufHeader, meta_error};

/// granitehybrid: Mamba-2 and attention layers, chosen per layer.
pub static GRANITEHYBRID: ArchSpec = ArchSpec {
    name: "granitehybrid",
    recurrent: Some(RecurrentBlock::Mamba2),
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    let u = |k: &str| -> Result<usize> { Ok(h.hparam_u32(k)? as usize) };
    c.ssm_d_conv = u("ssm.conv_kernel")?;
    c.ssm_d_inner = u("ssm.inner_size")?;
    c.ssm_d_state = u("ssm.state_size")?;
    c.ssm_n_head = u("ssm.time_step_rank")?;
    c.ssm_n_group = u("ssm.group_count")?;
    if c.ssm_d_inner != 2 * c.n_embd {
        return Err(meta_error(format!(
            "{} {} is not twice the embedding length {} (llama.cpp builds an expansion of 2 only)",
            h.arch_key("ssm.inner_size")?,
            c.ssm_d_inner,
            c.n_embd
        )));
    }
    let scale = |k: &str| -> Result<f32> { Ok(h.opt_hparam_f32(k)?.unwrap_or(0.0)) };
    c.embedding_scale = scale("embedding_scale")?;
    c.residual_scale = scale("residual_scale")?;
    c.logit_scale = scale("logit_scale")?;
    if let Some(s) = h.opt_hparam_f32("attention.scale")?
        && s != 0.0
    {
        c.attention_scale = s;
    }
    c.use_rope = h
        .opt_bool(&h.arch_key("rope.scaling.finetuned")?)?
        .unwrap_or(true);
    // the experts are feed_forward_length wide (llama.cpp reads no
    // expert width for this architecture)
    c.n_ff_expert = c.n_ff;
    c.n_ff_shexp = h
        .opt_hparam_u32("expert_shared_feed_forward_length")?
        .unwrap_or(0) as usize;
    Ok(())
}

/// A new model's layers: Mamba-2 with an attention layer every fourth
/// from the second (1, 5, 9, ...) and as the last (llama.cpp wants at
/// least one), an inner width of twice the
/// embedding, heads of 32 (at least one), one group, a state of 16 per
/// head dimension, a convolution of 4, and Granite 4.0-H's scales.
fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-5;
    c.ssm_d_conv = 4;
    c.ssm_d_inner = 2 * c.n_embd;
    c.ssm_d_state = 16;
    c.ssm_n_head = (c.ssm_d_inner / 32).max(1);
    c.ssm_n_group = 1;
    c.embedding_scale = 12.0;
    c.residual_scale = 0.22;
    c.logit_scale = 6.0;
    let n = c.n_layer;
    c.recurrent_layers = (0..n).map(|il| il % 4 != 1 && il + 1 != n).collect();
}
