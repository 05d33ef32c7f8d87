//! The memory a decode keeps between ubatches, as llama.cpp's
//! `llama_memory_i` keeps it: where a ubatch's tokens go, the sequence
//! operations, the tensors each layer reads, and what a graph's memory
//! inputs hold.
//!
//! [`KvMemory`] is the attention layers' memory: one KV cache, or a second
//! one of their own for the sliding-window layers (llama.cpp's
//! `llama_kv_cache` and `llama_kv_cache_iswa`). [`RecurrentMemory`] is
//! the recurrent layers' state, one per sequence (llama.cpp's
//! `llama_memory_recurrent`). [`NoMemory`] is llama.cpp's memory "none"
//! of an encoder, which keeps nothing between batches. [`Memory`] holds
//! what a model's layers need (llama.cpp's hybrid memory); the context owns one and
//! reaches its caches and state only through it.

mod hybrid;
mod kv;
mod none;
mod recurrent;

pub use hybrid::{Memory, MemoryPlacement};
pub use kv::{KvMemory, KvMemoryParams, KvPlacement, PlaceError};
pub use none::NoMemory;
pub use recurrent::{RecurrentMemory, RecurrentPlacement};
