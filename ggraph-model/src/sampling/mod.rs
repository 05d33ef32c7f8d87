//! Choosing the next token from logits, as llama.cpp's samplers do: a
//! chain of samplers over a candidate list ([`Candidates`]), each
//! reshaping or cutting it, the last choosing one with a seeded draw.
//!
//! [`SamplingParams`] holds llama.cpp's `common_params_sampling` with its
//! defaults, and builds the chain its tools build
//! ([`SamplingParams::chain`]): logit bias, then the configurable samplers
//! in order (penalties, DRY, top-n-sigma, top-k, typical, top-p, min-p,
//! XTC, temperature by default), then the draw; or temperature and
//! Mirostat. The arithmetic is llama.cpp 0.3.36's, float for float, and
//! the draws are those of its `std::mt19937` with libstdc++'s
//! distributions ([`rng`]), so the same logits, parameters and seed give
//! the same tokens (`ggraph-model/tests/sampling_llama.rs` holds it to
//! llama.cpp's own draws), ties too: the sorts are libstdc++'s.
//!
//! A [`Sampler`] is the seam: a user's own sampler joins a chain as any
//! other.

mod candidates;
mod chain;
mod cpp_sort;
mod dry;
mod filters;
mod gbnf;
mod grammar;
mod model_defaults;
pub mod rng;
mod sampler;
mod selectors;
mod token_sampler;
mod window;

pub use candidates::{Candidates, TokenData, raw_probabilities};
pub use chain::{RANDOM_SEED, SamplerChain, SamplerType, SamplingParams};
pub use dry::Dry;
pub use filters::{LogitBias, MinP, Penalties, Temperature, TopK, TopNSigma, TopP, Typical, Xtc};
pub use gbnf::gbnf_to_lark;
pub use grammar::{Grammar, GrammarSource, GrammarVocab};
pub use model_defaults::ModelSampling;
pub use sampler::Sampler;
pub use selectors::{AdaptiveP, Dist, Greedy, Mirostat, MirostatV2};
pub use token_sampler::{Constraint, TokenSampler};
