//! Writing a model description as a llama GGUF: the metadata llama.cpp
//! reads, a vocabulary, and the tensors' bytes. Used to make small
//! random-weight models for tests and benches.

use super::desc::ModelDesc;
use super::gguf::{ArrayValues, GgmlType, GgufWriter, Value};
use ggraph_core::error::{Error, Result};

/// A vocabulary of `n` tokens that a greedy tokeniser round-trips: three
/// specials (`<unk>`, `<s>`, `</s>`), the 256 bytes as `<0xXX>`, the
/// printable ASCII characters, the word marker `▁` with each lowercase
/// letter, then common pieces, then numbered filler tokens.
pub fn make_vocab(n: usize) -> Vec<String> {
    let mut v: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    v.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    v.extend((0x21u8..0x7f).map(|c| (c as char).to_string()));
    v.push("▁".into());
    v.extend((b'a'..=b'z').map(|c| format!("▁{}", c as char)));
    for piece in [
        "▁the", "▁a", "▁of", "▁and", "▁to", "▁in", "▁is", "▁that", "▁it", "▁for", "▁on", "▁with",
        "▁as", "▁was", "▁be", "▁at", "▁by", "▁this", "er", "in", "on", "an", "en", "at", "es",
        "or", "ed", "ing", "ion", "re", "▁hello", "▁world", "▁graph", "▁model",
    ] {
        if !v.iter().any(|x| x == piece) {
            v.push(piece.into());
        }
    }
    let mut i = 0;
    while v.len() < n {
        v.push(format!("<t{i}>"));
        i += 1;
    }
    v.truncate(n);
    v
}

/// The GGUF of a llama model description with its tensors' bytes
/// (generated or from its file) and the vocabulary `tokens`.
pub fn llama_gguf(desc: &ModelDesc, tokens: Vec<String>) -> Result<GgufWriter> {
    let c = &desc.config;
    if tokens.len() != c.n_vocab {
        return Err(Error::InvalidArgument(format!(
            "{} tokens for a vocabulary of {}",
            tokens.len(),
            c.n_vocab
        )));
    }
    let mut w = GgufWriter::new();
    let u = |x: usize| Value::U32(x as u32);
    w.kv("general.architecture", "llama")
        .kv("general.name", "ggraph random llama")
        .kv("llama.block_count", u(c.n_layer))
        .kv("llama.context_length", u(4096))
        .kv("llama.embedding_length", u(c.n_embd))
        .kv("llama.feed_forward_length", u(c.n_ff))
        .kv("llama.attention.head_count", u(c.n_head))
        .kv("llama.attention.head_count_kv", u(c.n_head_kv))
        .kv("llama.attention.key_length", u(c.head_dim))
        .kv("llama.attention.value_length", u(c.head_dim))
        .kv(
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(c.rms_eps),
        )
        .kv("llama.rope.freq_base", Value::F32(c.rope_freq_base))
        .kv("llama.rope.dimension_count", u(c.n_rot))
        .kv("llama.vocab_size", u(c.n_vocab));
    if c.is_moe() {
        w.kv("llama.expert_count", u(c.n_expert))
            .kv("llama.expert_used_count", u(c.n_expert_used))
            .kv("llama.expert_feed_forward_length", u(c.n_ff_expert));
    }
    let n = tokens.len();
    w.kv("tokenizer.ggml.model", "llama")
        .kv("tokenizer.ggml.tokens", ArrayValues::String(tokens))
        .kv(
            "tokenizer.ggml.scores",
            ArrayValues::F32((0..n).map(|i| -(i as f32)).collect()),
        )
        .kv("tokenizer.ggml.token_type", ArrayValues::I32(vec![1; n]))
        .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(2))
        .kv("tokenizer.ggml.unknown_token_id", Value::U32(0));
    for t in &desc.tensors {
        let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
        w.tensor(&t.name, GgmlType::from(t.dtype), &shape, desc.bytes_of(t)?)?;
    }
    Ok(w)
}
