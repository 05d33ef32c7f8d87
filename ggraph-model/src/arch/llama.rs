//! llama (llama 1-3, mistral, mixtral): pre-norm layers, separate Q, K
//! and V, SwiGLU (or a mixture of experts), normal rope with optional
//! frequency factors (`rope_freqs.weight`, llama 3.1), logits from
//! `output.weight` or, without it, the token embeddings.

use super::config::{ArchSpec, ModelConfig};

/// llama (llama 1-3, mistral, mixtral): pre-norm layers, separate Q, K and
/// V, SwiGLU or a mixture of experts, normal rope.
pub static LLAMA: ArchSpec = ArchSpec {
    name: "llama",
    defaults,
    ..ArchSpec::BASE
};

fn defaults(_: &mut ModelConfig) {}

impl ModelConfig {
    /// A dense llama with head_dim = n_embd / n_head and base 10000.
    pub fn dense(
        n_vocab: usize,
        n_embd: usize,
        n_layer: usize,
        n_head: usize,
        n_head_kv: usize,
        n_ff: usize,
    ) -> ModelConfig {
        ModelConfig::new(&LLAMA, n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff)
    }

    /// The llama-3-8B shape with `n_layer` layers.
    pub fn llama3_8b(n_layer: usize) -> ModelConfig {
        let mut c = ModelConfig::dense(128256, 4096, n_layer, 32, 8, 14336);
        c.rope_freq_base = 500000.0;
        c
    }
}
