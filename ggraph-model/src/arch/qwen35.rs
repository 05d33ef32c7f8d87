//! qwen35 (Qwen3.5 and Qwen3.6, dense): Gated DeltaNet layers and gated
//! attention layers, three of the first to one of the second unless the
//! file says otherwise (`full_attention_interval`, or
//! `attention.recurrent_layers`). Attention layers norm Q and K per head,
//! rope part of each head (the interleaved multi-section rope, which for
//! text is the NeoX rope over `rope.dimension_count` dimensions) and gate
//! their output; the norm before each FFN is `post_attention_norm`.

use ggraph_core::error::Result;
use ggraph_core::ir::RopeMode;

use super::config::{ArchSpec, ModelConfig, RecurrentBlock};
use crate::gguf::{ArrayValues, GgufHeader, meta_error};

/// qwen35: Gated DeltaNet and gated attention layers.
pub static QWEN35: ArchSpec = ArchSpec {
    name: "qwen35",
    rope: RopeMode::Neox,
    qk_norm: true,
    recurrent: Some(RecurrentBlock::GatedDeltaNet),
    gated_attention: true,
    ffn_norm: "post_attention_norm",
    outputs_after_layers: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

/// qwen35moe (Qwen3.5/3.6 MoE, the 35B-A3B and larger): qwen35's layers
/// with a mixture of experts and a gated shared expert in every FFN.
pub static QWEN35MOE: ArchSpec = ArchSpec {
    name: "qwen35moe",
    read: read_moe,
    defaults: defaults_moe,
    ..QWEN35
};

fn read_moe(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    read(h, c)?;
    if !c.is_moe() {
        return Err(meta_error(format!(
            "{} is missing or 0: a qwen35moe model routes to experts",
            h.arch_key("expert_count")?
        )));
    }
    // the experts' width, else llama.cpp's n_ff / n_expert_used; the
    // shared expert's, else n_ff
    if h.opt_hparam_u32("expert_feed_forward_length")?.is_none() {
        c.n_ff_expert = c.n_ff / c.n_expert_used.max(1);
    }
    c.n_ff_shexp = h
        .opt_hparam_u32("expert_shared_feed_forward_length")?
        .map_or(c.n_ff, |n| n as usize);
    c.shexp_gate = true;
    Ok(())
}

fn defaults_moe(c: &mut ModelConfig) {
    defaults(c);
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_expert = (c.n_ff / 4).max(1);
    c.n_ff_shexp = c.n_ff / 2;
    c.shexp_gate = true;
}

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    let u = |k: &str| -> Result<usize> { Ok(h.hparam_u32(k)? as usize) };
    c.ssm_d_conv = u("ssm.conv_kernel")?;
    c.ssm_d_inner = u("ssm.inner_size")?;
    c.ssm_d_state = u("ssm.state_size")?;
    c.ssm_n_head = u("ssm.time_step_rank")?;
    c.ssm_n_group = u("ssm.group_count")?;
    // the multi-token prediction layers come last; the main pass does not
    // run them (llama.cpp loads them only for speculative decoding)
    if let Some(n) = h.opt_hparam_u32("nextn_predict_layers")?
        && n > 0
    {
        let n = n as usize;
        if n >= c.n_layer {
            return Err(meta_error(format!(
                "{} is {n}, not fewer than the {} layers",
                h.arch_key("nextn_predict_layers")?,
                c.n_layer
            )));
        }
        c.n_layer -= n;
        c.n_layer_extra = n;
        c.swa_layers.truncate(c.n_layer);
        c.recurrent_layers.truncate(c.n_layer);
    }
    let key = h.arch_key("attention.recurrent_layers")?;
    c.recurrent_layers = match h.opt_array(&key)?.and_then(|a| a.values()) {
        Some(ArrayValues::Bool(v)) => v.clone(),
        Some(v) => match v.integers() {
            Some(ints) => ints.into_iter().map(|x| x != 0).collect(),
            None => return Err(meta_error(format!("'{key}' must be one flag per layer"))),
        },
        None => {
            let every = h
                .opt_hparam_u32("full_attention_interval")?
                .unwrap_or(4)
                .max(1) as usize;
            (0..c.n_layer).map(|il| (il + 1) % every != 0).collect()
        }
    };
    // a list may name the prediction layers too (as attention layers)
    let listed = c.n_layer + c.n_layer_extra;
    if c.recurrent_layers.len() == listed {
        c.recurrent_layers.truncate(c.n_layer);
    }
    if c.recurrent_layers.len() != c.n_layer {
        return Err(meta_error(format!(
            "'{key}' has {} flags for {} layers",
            c.recurrent_layers.len(),
            c.n_layer
        )));
    }
    read_rope_sections(h, c)
}

/// The interleaved multi-section rope gives each rotated pair the
/// position of its section; a text token has the same position in the
/// first three and 0 in the fourth. So the rope is the NeoX one when every
/// pair falls in the first three sections, as Qwen3.5's do; a file whose
/// sections leave pairs to the fourth is refused.
fn read_rope_sections(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    let key = h.arch_key("rope.dimension_sections")?;
    let a = h
        .opt_array(&key)?
        .ok_or_else(|| meta_error(format!("'{key}' is missing: a qwen35 model needs it")))?;
    let s: Vec<i128> = (a.values().and_then(|v| v.integers()))
        .filter(|v| v.len() <= 4 && v.iter().all(|&x| (0..=u32::MAX as i128).contains(&x)))
        .ok_or_else(|| meta_error(format!("'{key}' must be up to 4 counts")))?;
    for (i, x) in s.iter().enumerate() {
        c.rope_sections[i] = *x as u32;
    }
    let sec = |i: usize| c.rope_sections[i] as usize;
    let total: usize = (0..4).map(sec).sum();
    let fourth = (0..c.n_rot / 2).find(|&pair| {
        let sector = pair % total.max(1);
        let in_first_three = (sector % 3 == 0 && sector < 3 * sec(0))
            || (sector % 3 == 1 && sector < 3 * sec(1))
            || (sector % 3 == 2 && sector < 3 * sec(2));
        !in_first_three
    });
    match fourth {
        Some(pair) => Err(meta_error(format!(
            "'{key}' {s:?} puts rotated pair {pair} in the fourth (image) section; ggraph builds \
             text-only qwen35, whose sections cover the rotated dimensions"
        ))),
        None => Ok(()),
    }
}

/// A new model's layers: three Gated DeltaNet layers to one attention
/// layer (every fourth, and the last), value heads of the state size
/// (32), half as many key heads, a convolution of 4, and a quarter of
/// each attention head roped.
fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-6;
    c.rope_freq_base = 10_000_000.0;
    c.ssm_d_conv = 4;
    c.ssm_d_state = 32;
    c.ssm_n_head = (c.n_embd / 32).max(2);
    c.ssm_n_group = (c.ssm_n_head / 2).max(1);
    c.ssm_d_inner = c.ssm_n_head * c.ssm_d_state;
    c.n_rot = (c.head_dim / 4).max(2) & !1;
    let third = (c.n_rot / 2).div_ceil(3) as u32;
    c.rope_sections = [third, third, third, 0];
    let n = c.n_layer;
    c.recurrent_layers = (0..n).map(|il| (il + 1) % 4 != 0 && il + 1 != n).collect();
}
