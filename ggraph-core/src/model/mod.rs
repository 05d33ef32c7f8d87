//! Model-level pieces: graph builders for model architectures.

pub mod llama;
