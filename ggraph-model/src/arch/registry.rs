//! Every architecture ggraph builds. Adding one: a file beside this one
//! with its [`ArchSpec`] (and its `mod` line in `mod.rs`), and its entry
//! here.

use super::bert::BERT;
use super::config::ArchSpec;
use super::gemma_embedding::GEMMA_EMBEDDING;
use super::gemma2::GEMMA2;
use super::gemma3::GEMMA3;
use super::gemma4::GEMMA4;
use super::gpt_oss::GPT_OSS;
use super::granitehybrid::GRANITEHYBRID;
use super::jina_bert_v2::JINA_BERT_V2;
use super::lfm2::LFM2;
use super::llama::LLAMA;
use super::nomic_bert::NOMIC_BERT;
use super::phi3::PHI3;
use super::qwen2::QWEN2;
use super::qwen3::QWEN3;
use super::qwen3moe::QWEN3MOE;
use super::qwen35::{QWEN35, QWEN35MOE};

/// The architectures, by `general.architecture` name.
pub static ARCHITECTURES: [&ArchSpec; 17] = [
    &LLAMA,
    &QWEN2,
    &QWEN3,
    &QWEN3MOE,
    &GEMMA2,
    &GEMMA3,
    &PHI3,
    &LFM2,
    &GRANITEHYBRID,
    &QWEN35,
    &QWEN35MOE,
    &GPT_OSS,
    &GEMMA4,
    &BERT,
    &NOMIC_BERT,
    &GEMMA_EMBEDDING,
    &JINA_BERT_V2,
];

/// The architecture named `name`, if ggraph builds it.
pub fn arch_by_name(name: &str) -> Option<&'static ArchSpec> {
    ARCHITECTURES.iter().copied().find(|a| a.name == name)
}

/// The names of the architectures, for messages and help.
pub fn arch_names() -> Vec<&'static str> {
    ARCHITECTURES.iter().map(|a| a.name).collect()
}
