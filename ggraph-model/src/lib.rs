//! ggraph-model: what a model runner needs above the graph, the allocator
//! and the scheduler of `ggraph-core`: GGUF files, the architectures
//! llama.cpp runs, its tokenizer, placement of the weights across devices,
//! loading, the KV cache and decode loop, and memory estimates.
//!
//! A GGUF file (or a header, or a random model) opens as a
//! [`desc::ModelDesc`]; [`placement`] decides where every weight lives
//! (layer and row split, overrides); [`loaded::Model`] allocates and fills
//! the weights; [`context::Context`] decodes batches through a KV cache
//! ([`kv`]) and the scheduler. [`estimate`] predicts memory before a load:
//! exactly, by a dry run of the real allocator, and as Ollama does.
//! [`chat_template`] renders a conversation into a prompt as llama.cpp
//! does, from the GGUF's Jinja chat template.
//!
//! # Example
//!
//! A small llama with random weights, written as a GGUF and read back,
//! its vocabulary tokenising text, and its layers placed on two GPUs
//! that need not exist (placement is arithmetic over the tensor list):
//!
//! ```
//! use ggraph_core::dtype::DType;
//! use ggraph_model::arch::ModelConfig;
//! use ggraph_model::desc::ModelDesc;
//! use ggraph_model::gguf::parse_header;
//! use ggraph_model::make::{make_vocab, model_gguf};
//! use ggraph_model::placement::{GpuLayers, PlacementOptions, plan_placement};
//! use ggraph_model::tokenizer::Tokenizer;
//!
//! # fn main() -> ggraph_core::error::Result<()> {
//! // 512 tokens, 4 layers of width 256, 8 query heads over 2 KV heads,
//! // FFN width 768; F16 matrices from seed 7.
//! let config = ModelConfig::dense(512, 256, 4, 8, 2, 768);
//! let desc = ModelDesc::random(config, DType::F16, 7)?;
//!
//! let bytes = model_gguf(&desc, make_vocab(512))?.to_bytes()?;
//! let header = parse_header(&bytes, "<memory>")?;
//! let read = ModelDesc::from_header(&header, None)?;
//! assert_eq!(read.config, desc.config);
//!
//! let tokenizer = Tokenizer::from_header(&header)?;
//! let ids = tokenizer.encode("hello world", true, false)?;
//! assert_eq!(ids[0], 1); // BOS, as the vocabulary asks
//! assert_eq!(tokenizer.decode(&ids[1..], false, false)?, "hello world");
//!
//! // The last 3 layers (the output layer counts as one) on GPUs with
//! // 1 GiB free each; layers 0 and 1 stay on the host.
//! let opts = PlacementOptions {
//!     n_gpu_layers: GpuLayers::Count(3),
//!     ..PlacementOptions::default()
//! };
//! let plan = plan_placement(&read, 2, &[1 << 30, 1 << 30], &opts)?;
//! assert_eq!(plan.layer_device[..2], [None, None]);
//! assert!(plan.layer_device[2..].iter().all(Option::is_some));
//! # Ok(())
//! # }
//! ```
//!
//! Decoding needs devices to run on: a backend crate (`ggraph-cpu`, for
//! one) gives [`loaded::Model::load`] and [`context::Context::new`] theirs.

#![warn(missing_docs)]

pub mod arch;
pub mod batch;
pub mod chat_template;
pub mod context;
pub mod desc;
pub mod embedding;
pub mod estimate;
pub mod generation;
pub mod gguf;
pub mod harmony;
pub mod kv;
pub mod loaded;
pub mod make;
pub mod memory;
pub mod ollama;
pub mod placement;
pub mod reasoning;
pub mod sampling;
pub mod tokenizer;

/// The JSON library of header JSON and estimate documents, re-exported so
/// that users of these APIs need no dependency of their own.
pub use serde_json;
