//! Writing a model description as a GGUF of its architecture: the metadata llama.cpp
//! reads, a vocabulary, and the tensors' bytes. Used to make small
//! random-weight models for tests and benches.

use super::arch::{ModelConfig, Pooling};
use super::desc::ModelDesc;
use super::gguf::{ArrayValues, GgmlType, GgufHeader, GgufWriter, Value};
use ggraph_core::error::{Error, Result};

/// A vocabulary of `n` tokens that round-trips any text: three
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

/// The token type llama.cpp reads for a piece of [`make_vocab`]:
/// unknown, control (BOS, EOS), byte, else normal.
fn token_type(piece: &str) -> i32 {
    match piece {
        "<unk>" => 2,
        "<s>" | "</s>" => 3,
        p if p.len() == 6 && p.starts_with("<0x") => 6,
        _ => 1,
    }
}

/// The `tokenizer.*` metadata of a SentencePiece-style vocabulary of
/// `tokens` ([`make_vocab`]'s layout: `<unk>`, `<s>`, `</s>` first), scored
/// so that earlier pieces merge first.
pub fn vocab_kv(tokens: Vec<String>) -> Vec<(String, Value)> {
    let n = tokens.len();
    let types = tokens.iter().map(|t| token_type(t)).collect();
    vec![
        ("tokenizer.ggml.model".into(), Value::from("llama")),
        (
            "tokenizer.ggml.tokens".into(),
            ArrayValues::String(tokens).into(),
        ),
        (
            "tokenizer.ggml.scores".into(),
            ArrayValues::F32((0..n).map(|i| -(i as f32)).collect()).into(),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            ArrayValues::I32(types).into(),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
    ]
}

/// A header holding only the vocabulary metadata of `tokens` (the
/// metadata of a random model).
pub fn vocab_header(tokens: Vec<String>) -> Result<GgufHeader> {
    GgufHeader::new(3, vocab_kv(tokens), vec![]).map_err(Error::InvalidArgument)
}

/// The metadata of a small GPT-2-style byte-level BPE vocabulary with
/// pre-tokenizer `pre`: the 256 byte characters, merges that spell a few
/// common words left to right, and the control tokens `<|endoftext|>`,
/// `<|im_start|>`, `<|im_end|>` and a user-defined `<tag>`. For tests and
/// fuzzing of the tokenizer.
pub fn bpe_vocab_header(pre: &str) -> Result<GgufHeader> {
    let byte = crate::tokenizer::byte_level::byte_char;
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte(b).to_string()).collect();
    let mut merges = Vec::new();
    for word in [
        " the", "the", " and", "ing", " hello", " world", " is", "er", "\n\n", "  ", "123", "'s",
    ] {
        let chars: Vec<String> = word.bytes().map(|b| byte(b).to_string()).collect();
        let mut left = chars[0].clone();
        for c in &chars[1..] {
            let merged = format!("{left}{c}");
            if !tokens.contains(&merged) {
                merges.push(format!("{left} {c}"));
                tokens.push(merged.clone());
            }
            left = merged;
        }
    }
    let mut types = vec![1; tokens.len()];
    for (t, ty) in [
        ("<|endoftext|>", 3),
        ("<|im_start|>", 3),
        ("<|im_end|>", 3),
        ("<tag>", 4),
    ] {
        tokens.push(t.into());
        types.push(ty);
    }
    let eos = tokens.len() as u32 - 4;
    let kv = vec![
        ("tokenizer.ggml.model".into(), Value::from("gpt2")),
        ("tokenizer.ggml.pre".into(), Value::from(pre)),
        (
            "tokenizer.ggml.tokens".into(),
            ArrayValues::String(tokens).into(),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            ArrayValues::I32(types).into(),
        ),
        (
            "tokenizer.ggml.merges".into(),
            ArrayValues::String(merges).into(),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(eos)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(eos)),
    ];
    GgufHeader::new(3, kv, vec![]).map_err(Error::InvalidArgument)
}

/// `attention.head_count_kv`: one number, or one per layer when the
/// model has recurrent layers its files mark so (0 for those) or
/// sliding-window layers with KV heads of their own.
fn head_count_kv(c: &ModelConfig) -> Value {
    let marked = c.has_recurrent() && c.arch.recurrent.is_some_and(|r| r.marked_by_kv_heads());
    let per_kind = c.swa_heads.is_some_and(|h| h.n_head_kv != c.n_head_kv);
    if marked || per_kind {
        let per_layer = (0..c.n_layer)
            .map(|il| {
                if marked && c.is_recurrent(il) {
                    0
                } else {
                    c.heads(il).n_head_kv as u32
                }
            })
            .collect();
        Value::from(ArrayValues::U32(per_layer))
    } else {
        Value::U32(c.n_head_kv as u32)
    }
}

/// `context_length`: the learned positions of an encoder, else the
/// context the rope was trained for.
fn context_length(c: &ModelConfig) -> usize {
    match c.arch.encoder {
        true => c.n_ctx_train,
        false => c.n_ctx_orig,
    }
}

/// `feed_forward_length`: one number, or one per layer where the widths
/// differ.
fn feed_forward_length(c: &ModelConfig) -> Value {
    if c.n_ff_layers.is_empty() {
        Value::U32(c.n_ff as u32)
    } else {
        let widths = c.n_ff_layers.iter().map(|&w| w as u32).collect();
        Value::from(ArrayValues::U32(widths))
    }
}

/// The GGUF of a model description with its tensors' bytes (generated
/// or from its file) and the vocabulary `tokens`: the `{arch}.*` keys
/// llama.cpp reads for its architecture, so that reading it back gives
/// the same configuration.
pub fn model_gguf(desc: &ModelDesc, tokens: Vec<String>) -> Result<GgufWriter> {
    let c = &desc.config;
    if tokens.len() != c.n_vocab {
        return Err(Error::InvalidArgument(format!(
            "{} tokens for a vocabulary of {}",
            tokens.len(),
            c.n_vocab
        )));
    }
    let arch = c.arch.name;
    let key = |k: &str| format!("{arch}.{k}");
    let mut w = GgufWriter::new();
    let u = |x: usize| Value::U32(x as u32);
    w.kv("general.architecture", arch)
        // not the architecture's name: llama.cpp reads a vocabulary whose
        // model is named "phi3" as phi-3's (and then wants its special tokens)
        .kv("general.name", "ggraph random weights")
        .kv(key("block_count"), u(c.n_layer))
        .kv(key("context_length"), u(context_length(c)))
        .kv(key("embedding_length"), u(c.n_embd))
        .kv(key("feed_forward_length"), feed_forward_length(c))
        .kv(key("attention.head_count"), u(c.n_head))
        .kv(key("attention.head_count_kv"), head_count_kv(c))
        .kv(key("attention.key_length"), u(c.head_dim))
        .kv(key("attention.value_length"), u(c.head_dim))
        .kv(key("rope.freq_base"), Value::F32(c.rope_freq_base))
        .kv(key("rope.dimension_count"), u(c.n_rot))
        .kv(key("vocab_size"), u(c.n_vocab));
    match c.arch.encoder {
        true => w
            .kv(key("attention.layer_norm_epsilon"), Value::F32(c.norm_eps))
            .kv("tokenizer.ggml.token_type_count", u(c.n_token_types)),
        false => w.kv(
            key("attention.layer_norm_rms_epsilon"),
            Value::F32(c.rms_eps),
        ),
    };
    if !c.causal {
        w.kv(key("attention.causal"), Value::Bool(false));
    }
    if c.n_dense > 0 {
        for (k, n) in [
            ("dense_2_feat_in", c.n_embd),
            ("dense_2_feat_out", c.n_dense),
            ("dense_3_feat_in", c.n_dense),
            ("dense_3_feat_out", c.n_embd),
        ] {
            w.kv(key(k), u(n));
        }
    }
    if c.pooling.pools() {
        let n = Pooling::ALL
            .iter()
            .position(|&p| p == c.pooling)
            .unwrap_or(0);
        w.kv(key("pooling_type"), u(n));
    }
    if c.rope_attn_factor != 1.0 {
        w.kv(
            key("rope.scaling.attn_factor"),
            Value::F32(c.rope_attn_factor),
        );
    }
    if c.rope_freq_scale != 1.0 {
        w.kv(
            key("rope.scaling.factor"),
            Value::F32(1.0 / c.rope_freq_scale),
        );
    }
    if c.rope_ext_factor != 0.0 {
        w.kv(key("rope.scaling.type"), "yarn")
            .kv(key("rope.scaling.original_context_length"), u(c.n_ctx_orig));
    }
    if c.is_moe() {
        w.kv(key("expert_count"), u(c.n_expert))
            .kv(key("expert_used_count"), u(c.n_expert_used))
            .kv(key("expert_feed_forward_length"), u(c.n_ff_expert));
    }
    if c.has_swa() {
        w.kv(key("attention.sliding_window"), u(c.n_swa))
            .kv(
                key("attention.sliding_window_pattern"),
                Value::from(ArrayValues::Bool(c.swa_layers.clone())),
            )
            .kv(key("rope.freq_base_swa"), Value::F32(c.rope_freq_base_swa));
    }
    if c.rope_sections != [0; 4] {
        let s = c.rope_sections.iter().map(|&x| x as i32).collect();
        w.kv(
            key("rope.dimension_sections"),
            Value::from(ArrayValues::I32(s)),
        );
    }
    if c.has_recurrent() {
        // the layer kinds, for the architectures that read them so
        // (qwen35) rather than from the KV head counts
        w.kv(
            key("attention.recurrent_layers"),
            Value::from(ArrayValues::Bool(c.recurrent_layers.clone())),
        );
    }
    if c.shortconv_l_cache > 0 {
        w.kv(key("shortconv.l_cache"), u(c.shortconv_l_cache));
    }
    if c.ssm_d_conv > 0 {
        w.kv(key("ssm.conv_kernel"), u(c.ssm_d_conv))
            .kv(key("ssm.inner_size"), u(c.ssm_d_inner))
            .kv(key("ssm.state_size"), u(c.ssm_d_state))
            .kv(key("ssm.time_step_rank"), u(c.ssm_n_head))
            .kv(key("ssm.group_count"), u(c.ssm_n_group));
    }
    for (k, x) in [
        ("embedding_scale", c.embedding_scale),
        ("residual_scale", c.residual_scale),
        ("logit_scale", c.logit_scale),
    ] {
        if x != 0.0 {
            w.kv(key(k), Value::F32(x));
        }
    }
    if !c.use_rope {
        w.kv(key("rope.scaling.finetuned"), Value::Bool(false));
    }
    if c.n_ff_shexp > 0 {
        w.kv(key("expert_shared_feed_forward_length"), u(c.n_ff_shexp));
    }
    if let Some(h) = c.swa_heads {
        w.kv(key("attention.key_length_swa"), u(h.head_dim))
            .kv(key("attention.value_length_swa"), u(h.head_dim))
            .kv(key("rope.dimension_count_swa"), u(h.n_rot));
    }
    if c.arch.per_layer_inputs {
        w.kv(
            key("embedding_length_per_layer_input"),
            u(c.n_embd_per_layer),
        );
    }
    if c.n_kv_shared > 0 {
        w.kv(key("attention.shared_kv_layers"), u(c.n_kv_shared));
    }
    if c.attn_softcap > 0.0 {
        w.kv(key("attn_logit_softcapping"), Value::F32(c.attn_softcap));
    }
    // gemma's architectures cap at 30 when the key is absent: 0 is written
    if c.final_softcap > 0.0 || c.arch.post_norms {
        w.kv(key("final_logit_softcapping"), Value::F32(c.final_softcap));
    }
    for (k, v) in vocab_kv(tokens) {
        w.kv(k, v);
    }
    // a copy is the file's tensor under a second name, not a tensor of
    // the file
    for t in desc.tensors.iter().filter(|t| t.copy_of.is_none()) {
        let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
        w.tensor(&t.name, GgmlType::from(t.dtype), &shape, desc.bytes_of(t)?)?;
    }
    Ok(w)
}
