//! ggraph-model: what a model runner needs above the graph, the
//! allocator and the scheduler of `ggraph-core`.
//!
//! A GGUF file (or a header, or a random model) opens as a
//! [`desc::ModelDesc`]; [`placement`] decides where every weight lives
//! (layer and row split, overrides); [`loaded::Model`] allocates and fills
//! the weights; [`context::Context`] decodes batches through a KV cache
//! ([`kv`]) and the scheduler. [`estimate`] predicts memory before a load:
//! exactly, by a dry run of the real allocator, and as Ollama does.
//! [`chat_template`] renders a conversation into a prompt as llama.cpp
//! does, from the GGUF's Jinja chat template.

pub mod arch;
pub mod batch;
pub mod chat_template;
pub mod context;
pub mod desc;
pub mod estimate;
pub mod gguf;
pub mod kv;
pub mod loaded;
pub mod make;
pub mod ollama;
pub mod placement;
pub mod tokenizer;

/// The JSON library of header JSON and estimate documents, re-exported so
/// that users of these APIs need no dependency of their own.
pub use serde_json;
