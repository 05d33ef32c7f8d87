//! Model architectures as data. Each file beside this one describes one
//! architecture as llama.cpp defines it (an [`ArchSpec`]: its variations
//! of the decoder layer, and the hyperparameters only it reads); the
//! registry lists them; one decoder builder (`decoder.rs`) makes every
//! architecture's graph from shared blocks (`blocks.rs`).
//!
//! A GGUF header gives a [`ModelConfig`] ([`read_config`]), whose
//! [`ModelConfig::weights`] names every tensor with its shape, so
//! placement, estimates, loading and `make-model` work for every
//! architecture alike. Adding an architecture: one file with its
//! `ArchSpec` (what it changes of [`ArchSpec::BASE`], the plain pre-norm
//! decoder), its `mod` line here, and its line in `registry.rs`.

mod bert;
mod blocks;
mod config;
mod decoder;
mod delta_net;
mod encoder;
mod gemma2;
mod gemma3;
mod gemma4;
mod gemma_embedding;
mod gpt_oss;
mod granitehybrid;
mod graph;
mod hparams;
mod jina_bert_v2;
mod lfm2;
mod llama;
mod mamba2;
mod model_graph;
mod nomic_bert;
mod phi3;
mod pooling;
mod pooling_type;
mod qwen2;
mod qwen3;
mod qwen35;
mod qwen3moe;
mod recurrent;
mod registry;
mod shape;
mod shortconv;
mod weights;

pub use bert::BERT;
pub use config::{ArchSpec, FfnKind, HeadShape, ModelConfig, Presence, RecurrentBlock, WeightDecl};
pub use decoder::causal_mask;
pub use gemma_embedding::GEMMA_EMBEDDING;
pub use gemma2::GEMMA2;
pub use gemma3::GEMMA3;
pub use gemma4::GEMMA4;
pub use gpt_oss::GPT_OSS;
pub use granitehybrid::GRANITEHYBRID;
pub use graph::build_graph;
pub use hparams::{MAX_LAYERS, check_tensors, read_config};
pub use jina_bert_v2::JINA_BERT_V2;
pub use lfm2::LFM2;
pub use llama::LLAMA;
pub use model_graph::{GraphInputs, ModelGraph};
pub use nomic_bert::NOMIC_BERT;
pub use phi3::PHI3;
pub use pooling::{PoolShape, PoolingInputs, mean_weights, picked_rows, pooled_seqs};
pub use pooling_type::Pooling;
pub use qwen2::QWEN2;
pub use qwen3::QWEN3;
pub use qwen3moe::QWEN3MOE;
pub use qwen35::{QWEN35, QWEN35MOE};
pub use recurrent::RecurrentInputs;
pub use registry::{ARCHITECTURES, arch_by_name, arch_names};
pub use shape::{Attention, BuildShape, RecurrentShape, SwaCache};
pub use weights::{FreshWeights, WeightSource, rope_freq_factors};
