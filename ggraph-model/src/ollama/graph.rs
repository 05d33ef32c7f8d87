//! Ollama's `GGML.GraphSize` (fs/ggml/ggml.go): KV cache bytes per layer
//! and compute graph bytes for full and partial offload.
//!
//! The arithmetic is Go's: `u64` that wraps, integer division that
//! truncates, left to right (`e*e*9/16` is `((e*e)*9)/16`), and a KV size
//! computed as `uint64(float64(n) * bytesPerElement)`. The quirks kept on
//! purpose (they are what Ollama computes):
//!
//! - Attention layers: `ctx * parallel * (head_k + head_v) *
//!   head_count_kv[i] * bytes`, with head sizes from
//!   `key_length`/`value_length`, else `embedding_length /
//!   min(head_count)`. A layer with zero heads or zero KV heads counts as
//!   recurrent: `((conv_kernel - 1) * (inner + 2 * groups * state) +
//!   state * inner) * 4`, always f32.
//! - The per-architecture formulas use the *largest* head counts, and
//!   "embeddingHeads" is embedding / *smallest* head count.
//! - mllama: cross-attention layers get `heads_kv * (head_k + head_v) * 4 *
//!   1601 * 4` whatever the context and cache type. Its rope term looks for
//!   a tensor `rope_freqs.weights` (with an s), which real files do not
//!   have, so it is 0 in practice.
//! - gemma3: every layer but each 6th is a sliding-window layer sized for
//!   `parallel * sliding_window + batch` tokens (with the largest KV head
//!   count). gemma3n: both graph sizes times 4.
//! - gpt-oss: even layers sized for `parallel*4096 + batch` tokens, odd
//!   ones for the context; the per-token size is truncated to an integer
//!   before multiplying. Its partial graph uses the KV total of the default
//!   loop (before the gpt-oss sizes replace it):
//!   `2*heads/max(min_heads_kv,1)*kv_total/6`, or with flash attention on
//!   `(4*parallel + ctx/1024 + 110) MiB`. Its full graph is 0, left to the
//!   caller's fallback.
//! - llama MoE: a `blk.0.ffn_gate_exps.weight` tensor (mixtral 8x22b
//!   layout) replaces the partial size with one that counts that tensor
//!   three times; a `blk.0.ffn_gate.0.weight` (8x7b layout) replaces both.
//! - chatglm: with `blk.0.attn_qkv.bias`, its first dimension enters both.
//! - Architectures without a branch get 0 for both graph sizes; the caller
//!   falls back (see [`super::estimate()`]).

use std::cmp::max;
use std::num::Wrapping;

use super::kv::{OllamaKv, group_layers, ollama_elements, ollama_error, ollama_tensor_size};
use crate::gguf::GgufHeader;
use ggraph_core::error::Result;

type W = Wrapping<u64>;

#[allow(non_snake_case)]
const fn W(x: u64) -> W {
    Wrapping(x)
}

/// A KV cache type, as Ollama sizes it (`kvCacheBytesPerElement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvCacheType {
    /// `f16`, 2 bytes per element: Ollama's default.
    F16,
    /// `q8_0`, sized at 1 byte per element; needs flash attention.
    Q8_0,
    /// `q4_0`, sized at half a byte per element; needs flash attention.
    Q4_0,
    /// `f32`, 4 bytes per element; GraphSize sizes it, but Ollama does not
    /// accept it for the cache.
    F32,
}

impl KvCacheType {
    /// Bytes per element: q8_0 1, q4_0 0.5 (block scales ignored), f32 4,
    /// f16 2.
    pub fn bytes_per_element(self) -> f64 {
        match self {
            KvCacheType::Q8_0 => 1.0,
            KvCacheType::Q4_0 => 0.5,
            KvCacheType::F32 => 4.0,
            KvCacheType::F16 => 2.0,
        }
    }

    /// Ollama's name (`OLLAMA_KV_CACHE_TYPE`): `f16`, `q8_0`, `q4_0`, `f32`.
    pub fn name(self) -> &'static str {
        match self {
            KvCacheType::F16 => "f16",
            KvCacheType::Q8_0 => "q8_0",
            KvCacheType::Q4_0 => "q4_0",
            KvCacheType::F32 => "f32",
        }
    }

    /// `f16`, `q8_0`, `q4_0`, `f32` (case-insensitive; empty is f16, as
    /// an unset `OLLAMA_KV_CACHE_TYPE`).
    pub fn from_name(s: &str) -> Option<KvCacheType> {
        match s.to_ascii_lowercase().as_str() {
            "" | "f16" => Some(KvCacheType::F16),
            "q8_0" => Some(KvCacheType::Q8_0),
            "q4_0" => Some(KvCacheType::Q4_0),
            "f32" => Some(KvCacheType::F32),
            _ => None,
        }
    }

    /// Quantized, in Ollama's sense (`KVCacheTypeIsQuantized`).
    pub fn is_quantized(self) -> bool {
        matches!(self, KvCacheType::Q8_0 | KvCacheType::Q4_0)
    }
}

/// Ollama's `ml.FlashAttentionType` as passed to GraphSize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashAttention {
    /// Not set by the user: llama.cpp decides (`--flash-attn auto`).
    Auto,
    /// Set on, and the model supports it.
    Enabled,
    /// Set off, or set on for a model that does not support it.
    Disabled,
}

impl FlashAttention {
    /// The name in the estimate's JSON: `auto`, `enabled` or `disabled`.
    pub fn name(self) -> &'static str {
        match self {
            FlashAttention::Auto => "auto",
            FlashAttention::Enabled => "enabled",
            FlashAttention::Disabled => "disabled",
        }
    }
}

/// What GraphSize returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphSize {
    /// KV cache bytes of each layer (block_count entries).
    pub kv: Vec<u64>,
    /// Graph bytes when some layers stay on the CPU (0: no formula).
    pub partial: u64,
    /// Graph bytes when every layer is offloaded (0: no formula).
    pub full: u64,
}

/// `uint64(x)` for a non-negative float: truncation (values past 2^64
/// saturate here, where Go's result is unspecified).
fn f2u(x: f64) -> u64 {
    x as u64
}

fn kv_bytes(n: W, bytes_per_element: f64) -> u64 {
    f2u(n.0 as f64 * bytes_per_element)
}

/// Ollama's GraphSize for `h` with `context` tokens per sequence, `batch`
/// tokens per batch and `num_parallel` sequences.
pub fn graph_size(
    h: &GgufHeader,
    context: u64,
    batch: u64,
    num_parallel: u32,
    kv_type: KvCacheType,
    flash_attention: FlashAttention,
) -> Result<GraphSize> {
    let kv = OllamaKv::new(h);
    let parallel = W(u64::from(num_parallel));
    let context = W(context) * parallel;
    let batch = W(batch);

    let embedding = W(kv.embedding_length());
    let heads = W(kv.head_count_max()?);
    let heads_arr = kv.head_count()?;
    let heads_kv = W(kv.head_count_kv_max()?);
    let heads_kv_arr = kv.head_count_kv()?;
    let vocab = W(kv.vocab()?);

    let embedding_heads = W(kv.embedding_head_count_max()?);
    let embedding_heads_k = W(kv.embedding_head_count_k()?);
    let embedding_heads_v = W(kv.embedding_head_count_v()?);

    let layers = group_layers(h.tensors());
    let bytes = kv_type.bytes_per_element();

    // The default cache: attention layers, and layers without heads taken
    // as recurrent (their state is f32 whatever the cache type).
    let n_layers = kv.block_count()? as usize;
    let mut kvs = vec![0u64; n_layers];
    let mut kv_total = W(0);
    for i in 0..n_layers {
        if heads_arr[i] > 0 && heads_kv_arr[i] > 0 {
            kvs[i] = kv_bytes(
                context * (embedding_heads_k + embedding_heads_v) * W(heads_kv_arr[i]),
                bytes,
            );
        } else {
            let d_conv = W(kv.uint("ssm.conv_kernel", 0).into());
            let d_state = W(kv.uint("ssm.state_size", 0).into());
            let d_inner = W(kv.uint("ssm.inner_size", 0).into());
            let n_groups = W(kv.uint("ssm.group_count", 0).into());
            let embd_r = if d_conv.0 > 0 {
                (d_conv - W(1)) * (d_inner + W(2) * n_groups * d_state)
            } else {
                W(0)
            };
            let embd_s = d_state * d_inner;
            kvs[i] = ((embd_r + embd_s) * W(4)).0;
        }
        kv_total += W(kvs[i]);
    }

    let blk0 = layers.get("blk.0");
    let (mut full, mut partial) = (W(0), W(0));
    let four = W(4);
    match kv.architecture() {
        "llama" | "llama4" => {
            full = max(
                four * batch * (W(1) + four * embedding + context * (W(1) + heads)),
                four * batch * (embedding + vocab),
            );
            partial = four * batch * embedding;
            partial += max(
                four * batch * (W(1) + embedding + max(context, embedding))
                    + embedding * embedding * W(9) / W(16)
                    + four * context * (batch * heads + embedding_heads * heads_kv),
                four * batch * (embedding + vocab) + embedding * vocab * W(105) / W(128),
            );
            if let Some(gate_exps) = blk0.and_then(|l| l.get("ffn_gate_exps.weight")) {
                // mixtral 8x22b
                let ff = W(kv.uint("feed_forward_length", 0).into());
                partial = max(
                    W(3) * W(ollama_tensor_size(gate_exps))
                        + four
                            * batch
                            * (W(2) * ff
                                + heads_kv
                                + embedding
                                + context
                                + embedding_heads * heads_kv),
                    four * (context * batch * heads
                        + context * embedding_heads * heads_kv
                        + batch * W(1024)
                        + embedding_heads * heads_kv * batch),
                );
            } else if let Some(gate) = blk0.and_then(|l| l.get("ffn_gate.0.weight")) {
                // mixtral 8x7b
                let ff1 = W(*gate.shape.get(1).ok_or_else(|| {
                    ollama_error(
                        "blk.0.ffn_gate.0.weight has fewer than 2 dimensions (Ollama would index past its shape)",
                    )
                })?);
                if heads.0 == 0 {
                    return Err(ollama_error(
                        "the mixtral 8x7b formula divides by the head count, which is 0 (Ollama would panic)",
                    ));
                }
                full = four
                    * batch
                    * (W(2) + W(3) * embedding + context * (W(1) + heads) + W(2) * heads_kv + ff1);
                partial = max(
                    four * batch
                        * (W(3)
                            + embedding_heads * heads_kv
                            + embedding
                            + context * (W(1) + heads)
                            + ff1)
                        + (embedding * embedding + W(3) * embedding * heads_kv * ff1) * W(9)
                            / W(16),
                    four * batch * (W(1) + W(2) * embedding + context * (W(1) + heads))
                        + embedding
                            * (W(6) * context * heads_kv / heads + embedding * W(9) / W(16)),
                );
            }
        }
        "mllama" => {
            let (vision_tokens, tiles) = (W(1601), W(4));
            let cross = kv.ints("attention.cross_attention_layers");
            for (i, k) in kvs.iter_mut().enumerate() {
                if cross.contains(&(i as i32)) {
                    *k = (heads_kv
                        * (embedding_heads_k + embedding_heads_v)
                        * four
                        * vision_tokens
                        * tiles)
                        .0;
                }
            }
            full = max(
                four * batch
                    * (W(2)
                        + W(3) * embedding
                        + embedding_heads_k * heads
                        + context * (W(1) + heads)),
                four * batch * (embedding + vocab),
            );
            // Ollama looks up "rope_freqs" / "weights"; real files name the
            // tensor rope_freqs.weight, so this is 0 for them.
            let rope_freqs = layers
                .get("rope_freqs")
                .and_then(|l| l.get("weights"))
                .map_or(0, |t| ollama_elements(t));
            partial = max(
                four * (batch
                    * (W(2) * embedding
                        + W(1)
                        + context * (W(1) + heads)
                        + embedding_heads_k * heads)
                    + W(rope_freqs)
                    + embedding_heads_k * context * heads_kv),
                four * batch * (embedding + vocab) + embedding * vocab * W(105) / W(128),
            );
        }
        arch @ ("gemma" | "gemma2" | "gemma3" | "gemma3n") => {
            full = max(
                four * batch * (embedding + vocab),
                four * batch
                    * (W(2)
                        + context
                        + context * heads
                        + W(2) * embedding
                        + W(2) * embedding_heads_k * heads),
            );
            partial = max(
                four * embedding * batch
                    + embedding * vocab * W(105) / W(128)
                    + four * vocab * batch,
                four * batch
                    * (W(2) * embedding
                        + W(1)
                        + W(2) * embedding_heads_k * heads
                        + context
                        + context * heads)
                    + four * embedding_heads_k * context * W(8)
                    + embedding * embedding_heads_k * heads * W(9) / W(16),
            );
            if arch == "gemma3n" {
                full *= four;
                partial *= four;
            }
            if arch == "gemma3" {
                const GLOBAL_EVERY: usize = 6;
                let window = parallel * W(kv.uint("attention.sliding_window", 0).into()) + batch;
                for (i, k) in kvs.iter_mut().enumerate() {
                    if (i + 1) % GLOBAL_EVERY != 0 {
                        *k = kv_bytes(
                            window * (embedding_heads_k + embedding_heads_v) * heads_kv,
                            bytes,
                        );
                    }
                }
            }
        }
        "command-r" => {
            full = max(
                four * batch * (embedding + vocab),
                four * batch * (W(2) + four * embedding + context * (W(1) + heads)),
            );
            partial = max(
                four * batch * (embedding + vocab) + embedding * vocab * W(105) / W(128),
                four * batch * (W(1) + W(2) * embedding + context * (W(1) + heads))
                    + four * embedding * context
                    + embedding * embedding * W(9) / W(16),
            );
        }
        "qwen2" => {
            full = max(
                four * batch * (embedding + vocab),
                four * batch * (W(1) + W(2) * embedding + context + context * heads),
            );
            partial = max(
                four * batch * (embedding + vocab) + embedding * vocab * W(105) / W(128),
                four * (batch * (W(1) + W(2) * embedding + context * (W(1) + heads))
                    + embedding * (W(1) + context)),
            );
        }
        "phi2" => {
            full = max(
                four * batch * (embedding + vocab),
                four * batch * (W(1) + four * embedding + context + context * heads),
            );
            partial = max(
                four * batch * (W(2) * embedding + vocab) + embedding * vocab * W(105) / W(128),
                four * batch * (W(2) + W(3) * embedding + context + context * heads),
            );
        }
        "stablelm" => {
            full = four * batch * (context * (W(1) + heads) + W(3) * embedding + W(2));
            partial = max(four * batch * (vocab + W(2) * embedding), full);
        }
        "deepseek2" => {
            full = max(
                four * batch * (W(3) * embedding + vocab),
                four * batch
                    * (W(3) * embedding
                        + W(2)
                        + context * (W(1) + heads_kv)
                        + W(2) * embedding_heads_k * heads_kv),
            );
            partial = max(
                four * batch * (W(3) * embedding + vocab) + embedding * vocab * W(105) / W(128),
                four * batch
                    * (W(2) * embedding
                        + W(1)
                        + W(2) * embedding_heads_k * heads_kv
                        + context
                        + context * heads_kv)
                    + four * embedding_heads_k * context * heads_kv
                    + embedding * embedding_heads_k * heads_kv * W(9) / W(16),
            );
        }
        "chatglm" => {
            full = four * batch * (embedding + vocab);
            partial = four * batch * (embedding + vocab) + embedding * vocab * W(105) / W(128);
            if let Some(bias) = blk0.and_then(|l| l.get("attn_qkv.bias")) {
                let b0 = W(*bias.shape.first().ok_or_else(|| {
                    ollama_error(
                        "blk.0.attn_qkv.bias has no dimensions (Ollama would index past its shape)",
                    )
                })?);
                full = max(
                    full,
                    four * batch
                        * (W(2)
                            + W(2) * embedding
                            + context
                            + context * heads
                            + embedding_heads_k * heads
                            + b0),
                );
                partial = max(
                    partial,
                    four * batch
                        * (W(1)
                            + W(2) * embedding
                            + embedding_heads_k * heads
                            + context
                            + context * heads)
                        + four * embedding_heads_k * context
                        + four * context * embedding_heads_k
                        + four * b0,
                );
            }
        }
        "gptoss" | "gpt-oss" => {
            for (i, k) in kvs.iter_mut().enumerate() {
                let per_token = kv_bytes((embedding_heads_k + embedding_heads_v) * heads_kv, bytes);
                *k = if i % 2 == 0 {
                    (W(per_token) * (parallel * W(4096) + batch)).0
                } else {
                    (W(per_token) * context).0
                };
            }
            // kv_total is the default loop's, not the gpt-oss sizes above.
            let min_kv = max(kv.head_count_kv_min()?, 1);
            partial = W(2) * W(kv.head_count_max()?) / W(min_kv) * kv_total / W(6);
            if flash_attention == FlashAttention::Enabled {
                partial = (four * parallel + W(context.0 >> 10) + W(110)) * W(1 << 20);
            }
        }
        _ => {}
    }

    Ok(GraphSize {
        kv: kvs,
        partial: partial.0,
        full: full.0,
    })
}
