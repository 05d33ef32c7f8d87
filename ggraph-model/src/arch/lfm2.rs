//! lfm2 (Liquid's LFM2): a hybrid of gated short-convolution layers and
//! attention layers, the kind of each layer given by the file (a layer
//! without KV heads convolves). Attention layers norm Q and K per head
//! and use the NeoX rope; every layer has a SwiGLU FFN; the final norm's
//! weight is `token_embd_norm`. With `attention.sliding_window`, the
//! attention layers slide.

use ggraph_core::error::Result;
use ggraph_core::ir::RopeMode;

use super::config::{ArchSpec, ModelConfig, RecurrentBlock};
use crate::gguf::{GgufHeader, meta_error};

/// lfm2: short-convolution and attention layers, chosen per layer.
pub static LFM2: ArchSpec = ArchSpec {
    name: "lfm2",
    rope: RopeMode::Neox,
    qk_norm: true,
    recurrent: Some(RecurrentBlock::ShortConv),
    output_norm: "token_embd_norm",
    read,
    defaults,
    ..ArchSpec::BASE
};

fn read(h: &GgufHeader, c: &mut ModelConfig) -> Result<()> {
    let l_cache = h.hparam_u32("shortconv.l_cache")? as usize;
    if l_cache < 2 {
        return Err(meta_error(format!(
            "{} is {l_cache}: a short convolution spans at least 2 tokens",
            h.arch_key("shortconv.l_cache")?
        )));
    }
    c.shortconv_l_cache = l_cache;
    if let Some(n_swa) = h.opt_hparam_u32("attention.sliding_window")?
        && n_swa > 0
    {
        c.n_swa = n_swa as usize;
        c.swa_layers = c.recurrent_layers.iter().map(|&r| !r).collect();
        // the sliding layers rope as the others (llama.cpp's lfm2 graph
        // uses the model's one base)
        c.rope_freq_base_swa = c.rope_freq_base;
        c.rope_freq_scale_swa = c.rope_freq_scale;
    }
    Ok(())
}

/// A new model's layers: convolutions with an attention layer every
/// third layer from the third (2, 5, 8, ...) and as the last (llama.cpp
/// wants at least one), and LFM2-350M's convolution of 3 tokens.
fn defaults(c: &mut ModelConfig) {
    c.rms_eps = 1e-5;
    c.rope_freq_base = 1_000_000.0;
    c.shortconv_l_cache = 3;
    let n = c.n_layer;
    c.recurrent_layers = (0..n).map(|il| il % 3 != 2 && il + 1 != n).collect();
}
