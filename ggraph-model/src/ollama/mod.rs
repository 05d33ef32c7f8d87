//! Ollama-compatible memory estimate: byte for byte what Ollama's
//! `GGML.GraphSize` (fs/ggml/ggml.go) and its llama-engine server
//! (`llamaServer.Load` and the layout in llm/server.go) compute, quirks
//! included, so that ggraph's own (exact) estimate can be shown next to
//! the figures Ollama users see.
//!
//! - [`graph_size`]: KV bytes per layer and full/partial-offload graph
//!   bytes for every architecture Ollama has a formula for (llama and its
//!   MoE layouts, llama4, mllama, gemma 1/2/3/3n, command-r, qwen2, phi2,
//!   stablelm, deepseek2, chatglm, gpt-oss with and without flash
//!   attention), with attention and recurrent layers, per-layer head
//!   counts, sliding-window and cross-attention overrides and KV cache
//!   types f16, q8_0, q4_0 and f32.
//! - [`estimate()`]: the request as Ollama adjusts it, the fallback graph for
//!   architectures without a formula, the reserved buffer (`blk.0 + kv[0]`)
//!   and the layer layout over GPUs.
//!
//! The quirks are documented where they are reproduced: [`kv`] (typed
//! getters, Ollama's type table), [`graph`] (formulas), [`mod@estimate`]
//! (request and load) and [`layout`] (fitting layers to GPUs).

pub mod estimate;
pub mod graph;
pub mod kv;
pub mod layout;
pub mod request;

pub use estimate::{GpuEstimate, GraphKind, OllamaEstimate, estimate};
pub use graph::{FlashAttention, GraphSize, KvCacheType, graph_size};
pub use layout::GPU_MINIMUM_MEMORY;
pub use request::EstimateRequest;
