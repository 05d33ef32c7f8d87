//! A model's hyperparameters read from a GGUF header the way llama.cpp
//! reads them (the common `{arch}.*` keys, then the architecture's own),
//! and its tensors checked against the weights the architecture reads.

use std::collections::HashMap;

use ggraph_core::error::Result;

use super::config::{ModelConfig, Presence};
use super::pooling_type::Pooling;
use super::registry::{arch_by_name, arch_names};
use crate::gguf::{GgufHeader, meta_error};

/// The most layers a header may declare (Ollama's bound as well).
pub const MAX_LAYERS: usize = 65536;

fn uniform(key: &str, v: &[u32]) -> Result<usize> {
    match v.first() {
        Some(&x) if v.iter().all(|&y| y == x) => Ok(x as usize),
        Some(_) => Err(meta_error(format!(
            "'{key}' differs between layers ({v:?}); ggraph's graphs need one value for all layers"
        ))),
        None => Err(meta_error(format!("'{key}': the model has no layers"))),
    }
}

/// The hyperparameters of a header, read as llama.cpp reads them
/// (defaults: `head_count_kv` = `head_count`, `key_length` =
/// `embedding_length / head_count`, `rope.dimension_count` = head size,
/// `rope.freq_base` = 10000, rope scale = 1 / `rope.scaling.factor`),
/// then those of its architecture; checked for consistency.
pub fn read_config(h: &GgufHeader) -> Result<ModelConfig> {
    let name = h.architecture()?;
    let arch = arch_by_name(name).ok_or_else(|| {
        meta_error(format!(
            "architecture '{name}' is not one ggraph builds ({})",
            arch_names().join(", ")
        ))
    })?;
    let key = |k: &str| format!("{name}.{k}");
    let n_layer = h.hparam_u32("block_count")? as usize;
    // per-layer tables are sized by the layer count: bound it before any
    // is made
    if n_layer == 0 {
        return Err(meta_error(format!(
            "{} is 0: a model needs at least one layer",
            key("block_count")
        )));
    }
    if n_layer > MAX_LAYERS {
        return Err(meta_error(format!(
            "{} {n_layer} is more than the {MAX_LAYERS} layers ggraph accepts",
            key("block_count")
        )));
    }
    let n_embd = h.hparam_u32("embedding_length")? as usize;
    let heads = h.layer_u32s("attention.head_count", n_layer)?;
    let n_head = uniform(&key("attention.head_count"), &heads)?;
    // a layer without KV heads is one of the architecture's recurrent
    // layers (llama.cpp's `is_recr` for LFM2 and the hybrids)
    let kv_heads = h.opt_layer_u32s("attention.head_count_kv", n_layer)?;
    let recurrent_layers: Vec<bool> = match &kv_heads {
        Some(v) => v.iter().map(|&n| n == 0).collect(),
        None => vec![false; n_layer],
    };
    if let Some(il) = recurrent_layers.iter().position(|&r| r)
        && arch.recurrent.is_none()
    {
        return Err(meta_error(format!(
            "{} gives layer {il} no KV heads; a {name} layer always attends",
            key("attention.head_count_kv")
        )));
    }
    // KV heads that differ between layers must differ as the layers'
    // kinds do (checked once the architecture has read its kinds)
    let n_head_kv = match kv_heads.iter().flatten().find(|&&n| n > 0) {
        Some(&n) => n as usize,
        None => n_head,
    };
    let ff_widths = h.opt_layer_u32s("feed_forward_length", n_layer)?;
    let n_ff = ff_widths
        .as_ref()
        .and_then(|v| v.first())
        .copied()
        .unwrap_or(0) as usize;
    let head_dim = match h.opt_hparam_u32("attention.key_length")? {
        Some(k) => k as usize,
        None if n_head > 0 => n_embd / n_head,
        None => 0,
    };
    if let Some(v) = h.opt_hparam_u32("attention.value_length")?
        && v as usize != head_dim
    {
        return Err(meta_error(format!(
            "{} {v} differs from the key length {head_dim}; ggraph's graphs need them equal",
            key("attention.value_length")
        )));
    }
    let scale = match h.opt_hparam_f32("rope.scaling.factor")? {
        Some(f) if f != 0.0 => Some(f),
        _ => h.opt_hparam_f32("rope.scale_linear")?.filter(|&f| f != 0.0),
    };
    let mut c = ModelConfig::new(
        arch,
        h.vocab_size()? as usize,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        n_ff,
    )
    .with_head_dim(head_dim);
    // a file's numbers, not the architecture's defaults
    c.set_swa_pattern(0, 1);
    c.attn_softcap = 0.0;
    c.final_softcap = 0.0;
    c.rope_freq_base = h.opt_hparam_f32("rope.freq_base")?.unwrap_or(10000.0);
    c.rope_freq_scale = scale.map_or(1.0, |f| 1.0 / f);
    // llama.cpp's scaling types: "none" never scales, YaRN mixes in
    // extrapolated angles; the others scale linearly (LongRoPE by its
    // factor tables besides)
    let scaling_key = h.arch_key("rope.scaling.type")?;
    c.rope_ext_factor = 0.0;
    match h.opt_str(&scaling_key)?.unwrap_or("linear") {
        "none" => c.rope_freq_scale = 1.0,
        "yarn" => c.rope_ext_factor = 1.0,
        "linear" | "longrope" => {}
        other => {
            return Err(meta_error(format!(
                "'{scaling_key}' is '{other}'; llama.cpp knows none, linear, yarn and longrope"
            )));
        }
    }
    c.rope_freq_base_swa = 10000.0;
    c.rope_freq_scale_swa = 1.0;
    c.n_rot = h
        .opt_hparam_u32("rope.dimension_count")?
        .map_or(head_dim, |n| n as usize);
    // an encoder's norms are LayerNorms, a decoder's RMS norms
    match arch.encoder {
        true => c.norm_eps = h.hparam_f32("attention.layer_norm_epsilon")?,
        false => c.rms_eps = h.hparam_f32("attention.layer_norm_rms_epsilon")?,
    }
    c.causal = h.opt_bool(&key("attention.causal"))?.unwrap_or(true);
    c.pooling = match h.opt_u32(&key("pooling_type"))? {
        None => Pooling::None,
        Some(n) => Pooling::from_number(n.into()).ok_or_else(|| {
            meta_error(format!(
                "{} is {n}; llama.cpp's poolings are 0 (none) to 4 (rank)",
                key("pooling_type")
            ))
        })?,
    };
    c.n_cls_out = match h.opt_array(&key("classifier.output_labels"))? {
        Some(labels) => labels.len().clamp(1, u32::MAX.into()) as usize,
        None => 1,
    };
    c.n_expert = h.opt_hparam_u32("expert_count")?.unwrap_or(0) as usize;
    c.n_expert_used = h.opt_hparam_u32("expert_used_count")?.unwrap_or(0) as usize;
    c.n_ff_expert = match h.opt_hparam_u32("expert_feed_forward_length")? {
        Some(n) => n as usize,
        None => n_ff,
    };
    c.n_ctx_orig = match h.opt_hparam_u32("rope.scaling.original_context_length")? {
        Some(n) => n as usize,
        None => h.opt_hparam_u32("context_length")?.unwrap_or(0) as usize,
    };
    c.n_ctx_train = h.opt_hparam_u32("context_length")?.unwrap_or(0) as usize;
    c.n_dense = h.opt_hparam_u32("dense_2_feat_out")?.unwrap_or(0) as usize;
    c.rope_attn_factor = h.opt_hparam_f32("rope.scaling.attn_factor")?.unwrap_or(1.0);
    c.recurrent_layers = recurrent_layers;
    if let Some(v) = ff_widths.filter(|v| v.iter().any(|&w| w as usize != n_ff)) {
        c.n_ff_layers = v.iter().map(|&w| w as usize).collect();
    }
    (arch.read)(h, &mut c)?;
    if let Some(v) = &kv_heads
        && let Some(il) =
            (0..n_layer).find(|&il| v[il] > 0 && v[il] as usize != c.heads(il).n_head_kv)
    {
        return Err(meta_error(format!(
            "'{}' differs between layers: layer {il} has {} KV heads, other layers of its kind \
             {}; ggraph's graphs need one value per kind of layer",
            key("attention.head_count_kv"),
            v[il],
            c.heads(il).n_head_kv
        )));
    }
    // Q, K and V in one matrix where the file's first attention layer has
    // it (a recurrent layer's `attn_qkv` is its own)
    if let Some(il) = (0..n_layer).find(|&il| !c.is_recurrent(il)) {
        c.fused_qkv = h.tensor(&format!("blk.{il}.attn_qkv.weight")).is_some();
    }
    c.validate()?;
    Ok(c)
}

/// Checks a model's tensors against the weights its architecture reads,
/// as llama.cpp's loader does: every required weight present, every
/// tensor one the architecture reads, every shape the expected one
/// (trailing dimensions of 1 aside, which GGUF drops).
pub fn check_tensors<'a>(
    c: &ModelConfig,
    tensors: impl IntoIterator<Item = (&'a str, &'a [usize])>,
) -> Result<()> {
    let decls = c.weights();
    let mut by_name: HashMap<&str, (usize, bool)> = decls
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), (i, false)))
        .collect();
    let trimmed = |s: &[usize]| {
        let mut v = s.to_vec();
        while v.len() > 1 && v.last() == Some(&1) {
            v.pop();
        }
        v
    };
    let arch = c.arch.name;
    for (name, shape) in tensors {
        if c.is_extra_layer_tensor(name) {
            continue;
        }
        let Some((i, seen)) = by_name.get_mut(name) else {
            return Err(meta_error(format!(
                "tensor '{name}' is not one the {arch} architecture reads"
            )));
        };
        let want = &decls[*i].shape;
        if trimmed(shape) != trimmed(want) {
            return Err(meta_error(format!(
                "tensor '{name}' has shape {shape:?}; a {arch} model of these hyperparameters has {want:?}"
            )));
        }
        *seen = true;
    }
    if let Some(d) = decls
        .iter()
        .find(|d| d.presence == Presence::Required && !by_name[d.name.as_str()].1)
    {
        return Err(meta_error(format!(
            "tensor '{}' {:?} is missing: a {arch} model needs it",
            d.name, d.shape
        )));
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::Value;
    use crate::gguf::metadata::tests::{header, llama_kv};

    #[test]
    fn an_absurd_layer_count_is_refused_before_tables_are_sized() {
        let mut kv = llama_kv();
        for (k, v) in kv.iter_mut() {
            if *k == "llama.block_count" {
                *v = Value::U32(4_000_000_000);
            }
        }
        let e = read_config(&header(kv)).unwrap_err().to_string();
        assert!(e.contains("4000000000"), "{e}");
    }

    #[test]
    fn a_llama_config_comes_from_a_llama_header() {
        let c = read_config(&header(llama_kv())).unwrap();
        assert_eq!(
            (
                c.n_vocab,
                c.n_embd,
                c.n_layer,
                c.n_head,
                c.n_head_kv,
                c.n_ff
            ),
            (100, 64, 2, 4, 2, 128)
        );
        assert_eq!((c.head_dim, c.n_rot), (16, 16));
        assert_eq!(c.rope_freq_base, 500000.0);
        assert_eq!(c.rms_eps, 1e-6);
        assert!(!c.is_moe());
        let mut kv = llama_kv();
        kv[0].1 = "gemma".into();
        assert!(read_config(&header(kv)).is_err());
    }
}
