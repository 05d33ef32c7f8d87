//! Model-level pieces: graph builders for model architectures, the GGUF
//! model file, and memory estimates.

pub mod desc;
pub mod estimate;
pub mod gguf;
pub mod llama;
pub mod loaded;
pub mod make;
pub mod ollama;
pub mod placement;
pub mod row_split;
pub mod tokenizer;

/// The JSON library of header JSON and estimate documents, re-exported so
/// that users of these APIs need no dependency of their own.
pub use serde_json;
