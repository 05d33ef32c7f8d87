//! The memory a decode keeps between ubatches, as llama.cpp's
//! `llama_memory_i` keeps it: where a ubatch's tokens go, the sequence
//! operations, the tensors each layer reads, and what a graph's memory
//! inputs hold.
//!
//! [`KvMemory`] is the attention layers' memory: one KV cache, or a second
//! one of their own for the sliding-window layers (llama.cpp's
//! `llama_kv_cache` and `llama_kv_cache_iswa`). The context owns one and
//! reaches its caches only through it.

mod kv;

pub use kv::{KvMemory, KvMemoryParams, KvPlacement, PlaceError};
