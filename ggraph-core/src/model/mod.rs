//! Model-level pieces: graph builders for model architectures, the GGUF
//! model file, and memory estimates.

pub mod estimate;
pub mod gguf;
pub mod llama;
pub mod ollama;
