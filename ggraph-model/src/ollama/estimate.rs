//! What Ollama's llama-engine server computes before it loads a model:
//! the request as `NewLlamaServer` adjusts it, then `llamaServer.Load`:
//! GraphSize, the reserved buffer, per-layer sizes and the layout.
//!
//! Request adjustments (each one adds a note to the estimate):
//! - `num_ctx` above the model's `context_length` is cut to it;
//! - `num_batch` is at most `num_ctx`; an embedding model (one with
//!   `{arch}.pooling_type`) gets `num_batch = num_ctx`;
//! - flash attention: unset means the architecture's default, but the
//!   llama engine then passes "auto"; set on, it is kept only if the model
//!   supports it (equal, non-zero key and value head sizes; not gemma2, not
//!   embedding models). The hypothetical GPUs are taken to support it;
//! - a quantized KV cache (q8_0, q4_0) needs flash attention enabled,
//!   otherwise f16 is used; f32 is not a type Ollama accepts for the cache
//!   (`SupportsKVCacheType`), so it falls back to f16 (GraphSize itself
//!   sizes f32 at 4 bytes, which [`super::graph_size`] keeps).
//!
//! Load:
//! - `buffer = size(blk.0) + kv[0]` is taken off every GPU's free memory
//!   ("the size of one layer as a buffer"); nothing if there is no blk.0;
//! - layer `i < block_count` weighs `size(blk.i) + kv[i]` if the model has
//!   tensors `blk.i.*` (a layer without tensors weighs nothing, its cache
//!   included); the output layer (index block_count) weighs
//!   `size(output_norm) + size(output)`, or `token_embd` when there is no
//!   `output`; input weights are not counted;
//! - a partial graph of 0 becomes `max_heads / max(min_heads_kv, 1) *
//!   kv_total / 6`, then a full graph of 0 becomes the partial one;
//! - the layout is made once with no graph reserved, then again with
//!   `max(partial, full)` reserved on every GPU it used, until the number of
//!   GPUs used stops growing; every GPU used then holds the full graph if
//!   all layers (output included) are on GPUs, else the partial one;
//! - not modelled: projectors (the llama engine takes their size from the
//!   LoRA list, which is empty here), Metal, system memory checks.

use serde_json::{Value as Json, json};

use super::graph::{FlashAttention, KvCacheType, graph_size};
use super::kv::{OllamaKv, group_layers, layer_size, ollama_error};
use super::layout::{LayerAssignment, build_layout};
use super::request::EstimateRequest;
use crate::gguf::GgufHeader;
use ggraph_core::error::Result;

/// Full or partial graph: which one the GPUs hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphKind {
    /// Every layer, the output layer included, is on GPUs: each GPU used
    /// holds GraphSize's full-offload graph.
    Full,
    /// Some layers stay in system memory: each GPU used holds the
    /// partial-offload graph.
    Partial,
}

impl GraphKind {
    /// The name in the estimate's JSON: `full` or `partial`.
    pub fn name(self) -> &'static str {
        match self {
            GraphKind::Full => "full",
            GraphKind::Partial => "partial",
        }
    }
}

/// One GPU of the estimate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuEstimate {
    /// "0", "1", ...: the position in the request.
    pub id: String,
    /// Free memory the request gives for it, in bytes.
    pub free_bytes: u64,
    /// Layer indices on this GPU, ascending; block_count is the output.
    pub layers: Vec<usize>,
    /// Bytes of its layers' weights.
    pub weights_bytes: u64,
    /// KV cache bytes of its layers.
    pub cache_bytes: u64,
    /// Graph bytes reserved on it (0 when it holds no layer).
    pub graph_bytes: u64,
}

impl GpuEstimate {
    /// Weights, cache and graph together, in bytes (a wrapping sum, as Go's
    /// `uint64` arithmetic is).
    pub fn total_bytes(&self) -> u64 {
        self.weights_bytes
            .wrapping_add(self.cache_bytes)
            .wrapping_add(self.graph_bytes)
    }
}

/// Ollama's estimate for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct OllamaEstimate {
    /// `general.architecture`.
    pub architecture: String,
    /// The context after Ollama's adjustments (`num_ctx`, at most the
    /// model's `context_length`), in tokens per sequence.
    pub ctx: u64,
    /// The batch after Ollama's adjustments (`num_batch`: at most `ctx`,
    /// equal to it for an embedding model).
    pub batch: u64,
    /// Parallel sequences (`OLLAMA_NUM_PARALLEL`), as requested.
    pub parallel: u32,
    /// The KV cache type Ollama uses (f16 where it refuses the one asked
    /// for).
    pub kv_type: KvCacheType,
    /// Flash attention as the llama engine passes it to GraphSize.
    pub flash_attention: FlashAttention,
    /// What Ollama changed or assumed, in words.
    pub notes: Vec<String>,
    /// KV cache bytes per layer (block_count entries).
    pub kv: Vec<u64>,
    /// The sum of `kv`, in bytes.
    pub kv_total: u64,
    /// Graph bytes when some layers stay in system memory, after the
    /// fallback for architectures GraphSize has no formula for.
    pub graph_partial: u64,
    /// Graph bytes when every layer is on GPUs (the partial size when
    /// GraphSize gives 0).
    pub graph_full: u64,
    /// Weight bytes of each layer, the output layer last (`total_layers`
    /// entries).
    pub layer_weights: Vec<u64>,
    /// KV cache bytes of each layer, the same indices (0 for the output
    /// layer and for layers without tensors).
    pub layer_cache: Vec<u64>,
    /// Bytes taken off every GPU first (`blk.0 + kv[0]`); `None` without blk.0.
    pub reserved_buffer: Option<u64>,
    /// Every GPU of the request, in its order, used or not.
    pub gpus: Vec<GpuEstimate>,
    /// Layers Ollama offloads, the output layer counted.
    pub layers_on_gpu: usize,
    /// `block_count + 1`: the repeating layers and the output layer.
    pub total_layers: usize,
    /// Which graph the GPUs used hold.
    pub graph_kind: GraphKind,
    /// Weight bytes of the layers that stay in system memory.
    pub cpu_weights_bytes: u64,
    /// KV cache bytes of those layers.
    pub cpu_cache_bytes: u64,
}

struct Resolved {
    ctx: u64,
    batch: u64,
    kv_type: KvCacheType,
    flash_attention: FlashAttention,
    notes: Vec<String>,
}

fn resolve(kv: &OllamaKv<'_>, req: &EstimateRequest) -> Result<Resolved> {
    let mut notes = Vec::new();
    let mut ctx = req.ctx;
    let train = kv.context_length();
    if ctx > train && train > 0 {
        notes.push(format!(
            "num_ctx {ctx} is more than the model's context_length {train}; Ollama uses {train}"
        ));
        ctx = train;
    }
    let mut batch = req.batch.min(ctx);
    if batch != req.batch {
        notes.push(format!("num_batch is at most num_ctx: {batch}"));
    }

    let fa = req.flash_attention.unwrap_or(kv.flash_attention_default());
    let supported = kv.supports_flash_attention()?;
    let fa = if fa && !supported {
        notes.push("flash attention is not supported by this model (Ollama turns it off)".into());
        false
    } else {
        fa
    };
    let flash_attention = match req.flash_attention {
        None => FlashAttention::Auto,
        Some(_) if fa => FlashAttention::Enabled,
        Some(_) => FlashAttention::Disabled,
    };

    let kv_type = match req.kv_type {
        t if t.is_quantized() && flash_attention != FlashAttention::Enabled => {
            notes.push(format!(
                "a {} KV cache needs flash attention enabled (--flash-attn on); Ollama uses f16",
                t.name()
            ));
            KvCacheType::F16
        }
        KvCacheType::F32 => {
            notes.push("Ollama does not accept f32 for the KV cache; it uses f16".into());
            KvCacheType::F16
        }
        t => t,
    };

    if kv.has("pooling_type") && batch < ctx {
        notes.push(format!(
            "embedding model: Ollama sets the batch to the context ({ctx})"
        ));
        batch = ctx;
    }
    if kv.ollama_engine_required() {
        notes.push(format!(
            "Ollama runs '{}' on its own engine, which measures memory by a trial load; these are the llama engine's formulas",
            kv.architecture()
        ));
    }
    Ok(Resolved {
        ctx,
        batch,
        kv_type,
        flash_attention,
        notes,
    })
}

/// Ollama's estimate of `h` for `req` (GPUs `req.gpu_free`, in order).
pub fn estimate(h: &GgufHeader, req: &EstimateRequest) -> Result<OllamaEstimate> {
    let kv = OllamaKv::new(h);
    let r = resolve(&kv, req)?;
    let mut notes = r.notes;
    let gs = graph_size(
        h,
        r.ctx,
        r.batch,
        req.parallel,
        r.kv_type,
        r.flash_attention,
    )?;

    let block_count = kv.block_count()? as usize;
    let total_layers = block_count + 1;
    let layers = group_layers(h.tensors());

    let mut free: Vec<u64> = req.gpu_free.clone();
    let reserved_buffer = match layers.get("blk.0") {
        Some(blk0) => {
            let kv0 = *gs.kv.first().ok_or_else(|| {
                ollama_error("the model has a blk.0 layer but block_count is 0 (Ollama would index past its KV list)")
            })?;
            let buffer = layer_size(blk0).wrapping_add(kv0);
            for f in &mut free {
                *f = f.saturating_sub(buffer);
            }
            Some(buffer)
        }
        None => {
            notes.push("the model has no blk.0 layer; no buffer is reserved".into());
            None
        }
    };

    let mut weights = vec![0u64; total_layers];
    let mut cache = vec![0u64; total_layers];
    for i in 0..block_count {
        if let Some(blk) = layers.get(&format!("blk.{i}")) {
            weights[i] = layer_size(blk);
            cache[i] = gs.kv[i];
        }
    }
    let mut output = layers.get("output_norm").map_or(0, layer_size);
    output = output.wrapping_add(match layers.get("output") {
        Some(l) => layer_size(l),
        None => layers.get("token_embd").map_or(0, layer_size),
    });
    weights[total_layers - 1] = output;

    let kv_total = gs.kv.iter().fold(0u64, |a, &k| a.wrapping_add(k));
    let (mut partial, mut full) = (gs.partial, gs.full);
    if partial == 0 {
        let heads_kv = kv.head_count_kv_min()?.max(1);
        let gqa = kv.head_count_max()? / heads_kv;
        partial = gqa.wrapping_mul(kv_total) / 6;
        notes.push(format!(
            "no partial-offload graph formula for '{}': heads/kv_heads * kv_total / 6",
            kv.architecture()
        ));
    }
    if full == 0 {
        full = partial;
    }

    let layer_bytes: Vec<u64> = weights
        .iter()
        .zip(&cache)
        .map(|(w, c)| w.wrapping_add(*c))
        .collect();
    let requested = req.num_gpu.map_or(-1, i64::from);
    let mut graph = vec![0u64; free.len()];
    let mut assigned: Vec<LayerAssignment> = Vec::new();
    loop {
        let prev = assigned.len();
        assigned = build_layout(&layer_bytes, &free, &graph, req.gpu_overhead, requested);
        if assigned.len() > prev {
            for g in &assigned {
                graph[g.gpu] = partial.max(full);
            }
        } else {
            break;
        }
    }
    let layers_on_gpu: usize = assigned.iter().map(|g| g.layers.len()).sum();
    let graph_kind = if layers_on_gpu < total_layers {
        GraphKind::Partial
    } else {
        GraphKind::Full
    };
    let graph_bytes = match graph_kind {
        GraphKind::Full => full,
        GraphKind::Partial => partial,
    };

    let mut gpus: Vec<GpuEstimate> = req
        .gpu_free
        .iter()
        .enumerate()
        .map(|(i, &f)| GpuEstimate {
            id: i.to_string(),
            free_bytes: f,
            layers: Vec::new(),
            weights_bytes: 0,
            cache_bytes: 0,
            graph_bytes: 0,
        })
        .collect();
    let mut on_gpu = vec![false; total_layers];
    for a in &assigned {
        let g = &mut gpus[a.gpu];
        for &l in &a.layers {
            g.layers.push(l);
            g.weights_bytes = g.weights_bytes.wrapping_add(weights[l]);
            g.cache_bytes = g.cache_bytes.wrapping_add(cache[l]);
            on_gpu[l] = true;
        }
        g.graph_bytes = graph_bytes;
    }
    for g in &mut gpus {
        g.layers.sort_unstable();
    }
    let (mut cpu_weights_bytes, mut cpu_cache_bytes) = (0u64, 0u64);
    for l in (0..total_layers).filter(|&l| !on_gpu[l]) {
        cpu_weights_bytes = cpu_weights_bytes.wrapping_add(weights[l]);
        cpu_cache_bytes = cpu_cache_bytes.wrapping_add(cache[l]);
    }

    Ok(OllamaEstimate {
        architecture: kv.architecture().to_string(),
        ctx: r.ctx,
        batch: r.batch,
        parallel: req.parallel,
        kv_type: r.kv_type,
        flash_attention: r.flash_attention,
        notes,
        kv: gs.kv,
        kv_total,
        graph_partial: partial,
        graph_full: full,
        layer_weights: weights,
        layer_cache: cache,
        reserved_buffer,
        gpus,
        layers_on_gpu,
        total_layers,
        graph_kind,
        cpu_weights_bytes,
        cpu_cache_bytes,
    })
}

impl OllamaEstimate {
    /// The `ollama` member of `ggraph estimate --json`.
    pub fn to_json(&self) -> Json {
        let gpus: Vec<Json> = self
            .gpus
            .iter()
            .map(|g| {
                json!({
                    "id": g.id,
                    "layers": g.layers,
                    "free": g.free_bytes,
                    "weights": g.weights_bytes,
                    "cache": g.cache_bytes,
                    "graph": g.graph_bytes,
                    "total": g.total_bytes(),
                })
            })
            .collect();
        json!({
            "architecture": self.architecture,
            "ctx": self.ctx,
            "batch": self.batch,
            "parallel": self.parallel,
            "kv_type": self.kv_type.name(),
            "flash_attention": self.flash_attention.name(),
            "notes": self.notes,
            "kv": self.kv,
            "kv_total": self.kv_total,
            "graph_partial": self.graph_partial,
            "graph_full": self.graph_full,
            "layer_weights": self.layer_weights,
            "layer_cache": self.layer_cache,
            "reserved_buffer": self.reserved_buffer,
            "gpus": gpus,
            "layers_on_gpu": self.layers_on_gpu,
            "total_layers": self.total_layers,
            "graph_kind": self.graph_kind.name(),
            "cpu": {"weights": self.cpu_weights_bytes, "cache": self.cpu_cache_bytes},
        })
    }
}
