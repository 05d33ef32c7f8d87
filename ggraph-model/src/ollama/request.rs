//! What an estimate is asked for: Ollama's request parameters (context,
//! batch, parallel sequences, KV cache type, flash attention) and the free
//! memory of hypothetical GPUs.

use serde_json::{Value as Json, json};

use super::graph::KvCacheType;

/// What to estimate for.
#[derive(Clone, Debug, PartialEq)]
pub struct EstimateRequest {
    /// Context length per sequence (Ollama's `num_ctx`).
    pub ctx: u64,
    /// Tokens per batch (`num_batch`).
    pub batch: u64,
    /// Sequences served at once (`OLLAMA_NUM_PARALLEL`).
    pub parallel: u32,
    /// KV cache type (`OLLAMA_KV_CACHE_TYPE`).
    pub kv_type: KvCacheType,
    /// Flash attention: `None` lets the model decide (auto).
    pub flash_attention: Option<bool>,
    /// Free bytes of hypothetical GPUs 0, 1, ...
    pub gpu_free: Vec<u64>,
    /// Bytes to leave free on every GPU (`OLLAMA_GPU_OVERHEAD`).
    pub gpu_overhead: u64,
    /// Layers to offload (`num_gpu`); `None`: as many as fit.
    pub num_gpu: Option<u32>,
}

impl Default for EstimateRequest {
    /// Ollama's defaults: 4096 tokens of context, batches of 512, one
    /// sequence, f16 cache, flash attention auto, no GPUs.
    fn default() -> Self {
        EstimateRequest {
            ctx: 4096,
            batch: 512,
            parallel: 1,
            kv_type: KvCacheType::F16,
            flash_attention: None,
            gpu_free: Vec::new(),
            gpu_overhead: 0,
            num_gpu: None,
        }
    }
}

impl EstimateRequest {
    /// The `request` member of `ggraph estimate --json`; flash attention
    /// reads `auto`, `on` or `off`.
    pub fn to_json(&self) -> Json {
        json!({
            "ctx": self.ctx,
            "batch": self.batch,
            "parallel": self.parallel,
            "kv_type": self.kv_type.name(),
            "flash_attn": match self.flash_attention {
                None => "auto",
                Some(true) => "on",
                Some(false) => "off",
            },
            "gpu_free": self.gpu_free,
            "gpu_overhead": self.gpu_overhead,
            "num_gpu": self.num_gpu,
        })
    }
}
