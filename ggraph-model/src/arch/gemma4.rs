//! gemma4: gemma3's sandwich layers with V RMS-normed too (without a
//! weight, and taken from K's projection where a layer has no `attn_v`),
//! scores unscaled, sliding-window and full layers with heads of their own
//! sizes, the full layers' rope proportional (`rope_freqs.weight` stops
//! the pairs past a fraction), the last layers reading earlier layers'
//! caches, per-layer inputs added after each FFN (the E models), a learned
//! scale on each layer's output, the logits soft-capped at 30 unless the
//! file says otherwise, and in the MoE model a dense FFN beside the
//! experts in every layer.

use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, RopeMode};

use super::config::{ArchSpec, FfnKind, HeadShape, ModelConfig};
use crate::gguf::{GgufHeader, meta_error};

/// gemma4: normed Q, K and V, unscaled scores, per-kind head sizes,
/// proportional rope on the full layers, shared caches, per-layer inputs,
/// and experts beside the dense FFN.
pub static GEMMA4: ArchSpec = ArchSpec {
    name: "gemma4",
    rope: RopeMode::Neox,
    qk_norm: true,
    post_norms: true,
    ffn: FfnKind::Split(GluOp::Geglu),
    embed_scale: true,
    outputs_after_layers: true,
    value_norm: true,
    experts_beside_dense: true,
    freq_factors_full_only: true,
    layer_output_scale: true,
    per_layer_inputs: true,
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    // one flag per layer, with no period to fall back on
    let pattern = h.arch_key("attention.sliding_window_pattern")?;
    if h.opt_array(&pattern)?.is_none() {
        return Err(meta_error(format!(
            "key '{pattern}' is missing: a gemma4 model flags each sliding-window layer"
        )));
    }
    let n_swa = h.hparam_u32("attention.sliding_window")? as usize;
    c.read_swa_pattern(h, n_swa, 0)?;
    c.rope_freq_base_swa = h.opt_hparam_f32("rope.freq_base_swa")?.unwrap_or(10000.0);
    c.rope_freq_scale_swa = 1.0;

    let head_dim_swa = h.hparam_u32("attention.key_length_swa")? as usize;
    let value_swa = h.hparam_u32("attention.value_length_swa")? as usize;
    if value_swa != head_dim_swa {
        return Err(meta_error(format!(
            "{} {value_swa} differs from the key length {head_dim_swa}; gemma4 needs them equal",
            h.arch_key("attention.value_length_swa")?
        )));
    }
    // llama.cpp's default is the full layers' rotated dimensions
    let n_rot_swa = h
        .opt_hparam_u32("rope.dimension_count_swa")?
        .map_or(c.n_rot, |n| n as usize);
    // KV heads of each kind: the first layer of the kind says
    let kv_heads = h.opt_layer_u32s("attention.head_count_kv", c.n_layer)?;
    let first_of_kind = |swa: bool| {
        let il = (0..c.n_layer).find(|&il| c.is_swa(il) == swa)?;
        kv_heads.as_ref().map(|v| v[il] as usize)
    };
    let n_head_kv_swa = first_of_kind(true).unwrap_or(c.n_head_kv);
    if let Some(n) = first_of_kind(false) {
        c.n_head_kv = n;
    }
    c.n_embd_per_layer = c.n_embd / 8;
    let n_own = (3 * c.n_layer).div_ceil(7).div_ceil(5) * 5;
    c.n_kv_shared = c.n_layer.saturating_sub(n_own);
    c.swa_heads = Some(HeadShape {
        head_dim: head_dim_swa,
        n_head_kv: n_head_kv_swa,
        n_rot: n_rot_swa,
    });
    c.n_embd_per_layer = h.hparam_u32("embedding_length_per_layer_input")? as usize;
    c.n_kv_shared = h.opt_hparam_u32("attention.shared_kv_layers")?.unwrap_or(0) as usize;
    c.final_softcap = h.opt_hparam_f32("final_logit_softcapping")?.unwrap_or(30.0);
    // the Q and K norms replace the scores' scale
    c.attention_scale = 1.0;
    Ok(())
}

/// A small gemma4's numbers, shaped as the E models are: four
/// sliding-window layers (window 512, rope base 10000) to one full layer
/// (rope base 1e6), per-layer inputs an eighth of the width, the layers
/// past the first three sevenths (rounded up to whole groups of five)
/// reading earlier caches, logits capped at 30.
fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-6;
    c.rope_freq_base = 1_000_000.0;
    c.set_swa_pattern(512, 5);
    c.rope_freq_base_swa = 10000.0;
    c.final_softcap = 30.0;
    c.attention_scale = 1.0;
    c.n_embd_per_layer = c.n_embd / 8;
    let n_own = (3 * c.n_layer).div_ceil(7).div_ceil(5) * 5;
    c.n_kv_shared = c.n_layer.saturating_sub(n_own);
    c.swa_heads = Some(HeadShape {
        head_dim: c.head_dim,
        n_head_kv: c.n_head_kv,
        n_rot: c.n_rot,
    });
}
