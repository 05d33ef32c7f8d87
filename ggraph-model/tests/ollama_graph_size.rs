//! Ollama's GraphSize, one case per architecture branch and KV cache type.
//!
//! Every expected figure was worked out from Ollama's Go code
//! (fs/ggml/ggml.go, `GraphSize`) with the numbers below, in Go's `u64`
//! arithmetic: left to right, integer division truncating. The arithmetic
//! is written out for the first cases; the rest follow the same formulas
//! with the numbers given.

use ggraph_model::gguf::{GgufHeader, header_from_json};
use ggraph_model::ollama::{FlashAttention, GraphSize, KvCacheType, graph_size};
use serde_json::{Map, Value as Json, json};

/// A model header: architecture, block count, embedding length, head
/// counts and vocabulary size, plus whatever a case adds.
struct Model {
    arch: String,
    kv: Map<String, Json>,
    tensors: Vec<Json>,
}

fn model(arch: &str, blocks: u32, embd: u32, heads: u32, heads_kv: u32, vocab: u64) -> Model {
    Model {
        arch: arch.to_string(),
        kv: Map::new(),
        tensors: Vec::new(),
    }
    .kv("general.architecture", json!(arch))
    .kv("block_count", json!(blocks))
    .kv("embedding_length", json!(embd))
    .kv("attention.head_count", json!(heads))
    .kv("attention.head_count_kv", json!(heads_kv))
    .kv(
        "tokenizer.ggml.tokens",
        json!({"type": "array[string]", "size": vocab}),
    )
}

impl Model {
    /// Adds a pair; keys without `general.`/`tokenizer.` get the
    /// architecture prefix.
    fn kv(mut self, key: &str, v: Json) -> Model {
        let key = if key.starts_with("general.") || key.starts_with("tokenizer.") {
            key.to_string()
        } else {
            format!("{}.{key}", self.arch)
        };
        self.kv.insert(key, v);
        self
    }

    fn tensor(mut self, name: &str, ty: &str, shape: &[u64]) -> Model {
        self.tensors
            .push(json!({"name": name, "type": ty, "shape": shape}));
        self
    }

    fn header(&self) -> GgufHeader {
        header_from_json(&json!({"kv": self.kv, "tensors": self.tensors}), "case").unwrap()
    }

    fn size(&self, ctx: u64, batch: u64, parallel: u32, kv: KvCacheType) -> GraphSize {
        graph_size(
            &self.header(),
            ctx,
            batch,
            parallel,
            kv,
            FlashAttention::Auto,
        )
        .unwrap()
    }
}

fn uniform(kv: &GraphSize, n: usize, per_layer: u64) {
    assert_eq!(kv.kv, vec![per_layer; n]);
}

#[test]
fn command_r_35b_matches_the_figures_ollama_users_see() {
    // 40 layers, n_embd 8192, 64 heads, 8 KV heads, vocab 256000, num_ctx
    // 32000, batch 512, f16.
    let g = model("command-r", 40, 8192, 64, 8, 256000).size(32000, 512, 1, KvCacheType::F16);
    // KV per layer: 32000 * (128 + 128) * 8 * 2 = 131,072,000; x 40.
    uniform(&g, 40, 131_072_000);
    assert_eq!(g.kv.iter().sum::<u64>(), 5_242_880_000);
    // partial = max(4*512*(8192+256000) + 8192*256000*105/128 = 2,261,385,216,
    //               4*512*(1+2*8192+32000*65) + 4*8192*32000 + 8192*8192*9/16
    //               = 4,293,396,480 + 1,048,576,000 + 37,748,736)
    assert_eq!(g.partial, 5_379_721_216);
    // full = max(4*512*(8192+256000) = 541,065,216,
    //            4*512*(2+4*8192+32000*65) = 4,326,952,960)
    assert_eq!(g.full, 4_326_952_960);
}

#[test]
fn llama_kv_scales_with_the_cache_type() {
    // llama 3 8B: 32 layers, 4096, 32 heads, 8 KV heads, vocab 128256.
    let m = model("llama", 32, 4096, 32, 8, 128256);
    // 8192 * (128 + 128) * 8 = 16,777,216 elements per layer.
    for (t, per_layer) in [
        (KvCacheType::F16, 33_554_432),
        (KvCacheType::Q8_0, 16_777_216),
        (KvCacheType::Q4_0, 8_388_608),
        (KvCacheType::F32, 67_108_864),
    ] {
        let g = m.size(8192, 512, 1, t);
        uniform(&g, 32, per_layer);
        // The graph does not depend on the cache type.
        // full = max(4*512*(1+4*4096+8192*33) = 587,204,608, 4*512*(4096+128256))
        assert_eq!(g.full, 587_204_608, "{t:?}");
        // partial = 4*512*4096 + max(4*512*(1+4096+8192) + 4096*4096*9/16
        //           + 4*8192*(512*32+128*8), 4*512*(4096+128256) + 4096*128256*105/128)
        //         = 8,388,608 + max(25,167,872 + 9,437,184 + 570,425,344, 271,056,896 + 430,935,040)
        assert_eq!(g.partial, 710_385_664, "{t:?}");
    }
    // llama4 shares the llama branch.
    let m4 = model("llama4", 32, 4096, 32, 8, 128256);
    assert_eq!(
        m4.size(8192, 512, 1, KvCacheType::F16),
        m.size(8192, 512, 1, KvCacheType::F16)
    );
}

#[test]
fn parallel_sequences_multiply_the_context() {
    // 4 sequences of 2048 cost what one of 8192 costs.
    let m = model("llama", 32, 4096, 32, 8, 128256);
    assert_eq!(
        m.size(2048, 512, 4, KvCacheType::F16),
        m.size(8192, 512, 1, KvCacheType::F16)
    );
}

#[test]
fn mixtral_8x22b_counts_the_expert_gate_tensor() {
    // blk.0.ffn_gate_exps.weight Q4_K [6144, 16384, 8]:
    // 805,306,368 values * 144 / 256 = 452,984,832 bytes.
    let m = model("llama", 56, 6144, 48, 8, 32768)
        .kv("feed_forward_length", json!(16384))
        .tensor("blk.0.ffn_gate_exps.weight", "Q4_K", &[6144, 16384, 8]);
    let g = m.size(4096, 512, 1, KvCacheType::F16);
    uniform(&g, 56, 16_777_216);
    // partial = max(3*452,984,832 + 4*512*(2*16384+8+6144+4096+128*8),
    //               4*(4096*512*48 + 4096*128*8 + 512*1024 + 128*8*512))
    assert_eq!(g.partial, 1_449_148_416);
    // full keeps the llama formula.
    assert_eq!(g.full, 461_375_488);
}

#[test]
fn mixtral_8x7b_uses_the_first_expert_gate_width() {
    let m = model("llama", 32, 4096, 32, 8, 32000).tensor(
        "blk.0.ffn_gate.0.weight",
        "Q4_0",
        &[4096, 14336],
    );
    let g = m.size(4096, 512, 1, KvCacheType::F16);
    uniform(&g, 32, 16_777_216);
    // full = 4*512*(2 + 3*4096 + 4096*33 + 2*8 + 14336)
    assert_eq!(g.full, 331_386_880);
    assert_eq!(g.partial, 1_118_836_736);
}

#[test]
fn mllama_cross_attention_layers_hold_the_vision_tokens() {
    let cross = [3, 8, 13, 18, 23, 28, 33, 38];
    let m = model("mllama", 40, 4096, 32, 8, 128256)
        .kv("attention.cross_attention_layers", json!(cross));
    let g = m.size(2048, 512, 1, KvCacheType::F16);
    for (i, &k) in g.kv.iter().enumerate() {
        // Cross-attention: 8 * (128+128) * 4 * 1601 * 4 whatever the context;
        // self-attention: 2048 * 256 * 8 * 2.
        let want = if cross.contains(&i) {
            52_461_568
        } else {
            8_388_608
        };
        assert_eq!(k, want, "layer {i}");
    }
    assert_eq!(g.full, 271_056_896);
    assert_eq!(g.partial, 701_997_056);
}

#[test]
fn gemma_and_gemma2_use_the_key_length() {
    let gemma = model("gemma", 18, 2048, 8, 1, 256000)
        .kv("attention.key_length", json!(256))
        .kv("attention.value_length", json!(256));
    let g = gemma.size(8192, 512, 1, KvCacheType::F16);
    uniform(&g, 18, 8_388_608);
    assert_eq!((g.partial, g.full), (958_562_304, 528_482_304));

    let gemma2 = model("gemma2", 26, 2304, 8, 4, 256000)
        .kv("attention.key_length", json!(256))
        .kv("attention.value_length", json!(256));
    let g = gemma2.size(8192, 512, 1, KvCacheType::F16);
    uniform(&g, 26, 33_554_432);
    assert_eq!((g.partial, g.full), (1_012_846_592, 529_006_592));
}

#[test]
fn gemma3_sizes_five_of_six_layers_for_the_sliding_window() {
    // 2 sequences, q8_0 (1 byte), window 1024: local layers hold
    // 2*1024 + 512 tokens: 2560 * 512 * 4 * 1 = 5,242,880; every 6th layer
    // holds the whole context: 16384 * 512 * 4 = 33,554,432.
    let m = model("gemma3", 34, 2560, 8, 4, 262144)
        .kv("attention.key_length", json!(256))
        .kv("attention.value_length", json!(256))
        .kv("attention.sliding_window", json!(1024));
    let g = m.size(8192, 512, 2, KvCacheType::Q8_0);
    for (i, &k) in g.kv.iter().enumerate() {
        let want = if (i + 1) % 6 == 0 {
            33_554_432
        } else {
            5_242_880
        };
        assert_eq!(k, want, "layer {i}");
    }
    assert_eq!(g.kv.iter().sum::<u64>(), 319_815_680);
    assert_eq!((g.partial, g.full), (1_092_616_192, 542_113_792));
}

#[test]
fn gemma3n_multiplies_both_graphs_by_four() {
    let m = model("gemma3n", 30, 2048, 8, 2, 262144)
        .kv("attention.key_length", json!(256))
        .kv("attention.value_length", json!(256));
    let g = m.size(4096, 512, 1, KvCacheType::F16);
    uniform(&g, 30, 8_388_608);
    assert_eq!((g.partial, g.full), (3_925_868_544, 2_164_260_864));
    assert_eq!(g.full % 4, 0);
}

#[test]
fn qwen2_phi2_stablelm() {
    let g = model("qwen2", 28, 3584, 28, 4, 152064).size(32768, 512, 1, KvCacheType::F16);
    uniform(&g, 28, 67_108_864);
    assert_eq!((g.partial, g.full), (2_430_615_552, 1_960_839_168));

    let g = model("phi2", 32, 2560, 32, 32, 51200).size(2048, 512, 1, KvCacheType::F16);
    uniform(&g, 32, 20_971_520);
    assert_eq!((g.partial, g.full), (222_863_360, 159_385_600));

    // stablelm: partial = max(4*512*(50304+2*2560), full) = full here.
    let g = model("stablelm", 32, 2560, 32, 32, 50304).size(4096, 512, 1, KvCacheType::F16);
    uniform(&g, 32, 41_943_040);
    assert_eq!((g.partial, g.full), (292_556_800, 292_556_800));
}

#[test]
fn deepseek2_uses_different_key_and_value_lengths() {
    // KV per layer: 4096 * (192 + 128) * 16 * 2.
    let m = model("deepseek2", 27, 2048, 16, 16, 102400)
        .kv("attention.key_length", json!(192))
        .kv("attention.value_length", json!(128));
    let g = m.size(4096, 512, 1, KvCacheType::F16);
    uniform(&g, 27, 41_943_040);
    assert_eq!((g.partial, g.full), (394_330_112, 222_298_112));
}

#[test]
fn chatglm_with_a_qkv_bias_grows_its_full_graph() {
    let m = model("chatglm", 28, 4096, 32, 2, 151552);
    let g = m.size(8192, 512, 1, KvCacheType::F16);
    uniform(&g, 28, 8_388_608);
    // Without the bias: full = 4*512*(4096+151552).
    assert_eq!((g.partial, g.full), (827_981_824, 318_767_104));
    let g = m
        .tensor("blk.0.attn_qkv.bias", "F32", &[4608])
        .size(8192, 512, 1, KvCacheType::F16);
    // full = max(318,767,104, 4*512*(2 + 2*4096 + 8192 + 8192*32 + 128*32 + 4608))
    assert_eq!((g.partial, g.full), (827_981_824, 588_255_232));
}

#[test]
fn gpt_oss_alternates_sliding_and_full_layers() {
    let m = model("gpt-oss", 24, 2880, 64, 8, 201088)
        .kv("attention.key_length", json!(64))
        .kv("attention.value_length", json!(64));
    let h = m.header();
    // (64+64)*8*2 = 2048 bytes per token; even layers hold 1*4096 + 512
    // tokens, odd layers the context (8192).
    let g = graph_size(&h, 8192, 512, 1, KvCacheType::F16, FlashAttention::Auto).unwrap();
    for (i, &k) in g.kv.iter().enumerate() {
        assert_eq!(
            k,
            if i % 2 == 0 { 9_437_184 } else { 16_777_216 },
            "layer {i}"
        );
    }
    // Without flash attention: 2*64/8 * kv_total / 6 with the default
    // loop's total, 24 * 8192*128*8*2 = 402,653,184 (not the gpt-oss sizes).
    assert_eq!(g.partial, 1_073_741_824);
    assert_eq!(g.full, 0);
    // Disabled is the same as auto.
    let off = graph_size(&h, 8192, 512, 1, KvCacheType::F16, FlashAttention::Disabled).unwrap();
    assert_eq!(off, g);
    // With flash attention: (4*2 + 16384>>10 + 110) MiB for 2 sequences.
    let g = graph_size(&h, 8192, 512, 2, KvCacheType::F16, FlashAttention::Enabled).unwrap();
    assert_eq!(g.partial, 134 << 20);
    assert_eq!(g.kv[0], 2048 * (2 * 4096 + 512));
    assert_eq!(g.kv[1], 2048 * 16384);
}

#[test]
fn layers_without_kv_heads_are_sized_as_recurrent_state() {
    // Layers 1 and 2 have no KV heads: (3*(4096+2*8*128) + 128*4096) * 4
    // bytes of f32 state whatever the cache type.
    let m = model("hybrid", 4, 4096, 32, 8, 1000)
        .kv("attention.head_count_kv", json!([8, 0, 0, 8]))
        .kv("ssm.conv_kernel", json!(4))
        .kv("ssm.state_size", json!(128))
        .kv("ssm.inner_size", json!(4096))
        .kv("ssm.group_count", json!(8));
    for t in [KvCacheType::F16, KvCacheType::Q4_0] {
        let g = m.size(4096, 512, 1, t);
        assert_eq!(g.kv[1], 2_170_880);
        assert_eq!(g.kv[2], 2_170_880);
    }
    let g = m.size(4096, 512, 1, KvCacheType::F16);
    assert_eq!(g.kv, vec![16_777_216, 2_170_880, 2_170_880, 16_777_216]);
    // No formula for this architecture: both graphs 0 (the estimate falls
    // back, see ollama_estimate.rs).
    assert_eq!((g.partial, g.full), (0, 0));
}

#[test]
fn per_layer_head_counts_size_each_layer() {
    // KV heads per layer; the head-count array has an entry past the last
    // layer, which still counts for the maximum (64), as in Ollama.
    let m = model("llama", 4, 4096, 32, 8, 32000)
        .kv("attention.head_count", json!([32, 32, 32, 32, 64]))
        .kv("attention.head_count_kv", json!([8, 8, 4, 4]));
    let g = m.size(4096, 512, 1, KvCacheType::F16);
    assert_eq!(g.kv, vec![16_777_216, 16_777_216, 8_388_608, 8_388_608]);
    assert_eq!((g.partial, g.full), (588_253_184, 578_816_000));
}

#[test]
fn ollama_reads_only_uint32_hyperparameters() {
    // A block count stored as uint64 is missing to Ollama: no layers.
    let m = model("llama", 32, 4096, 32, 8, 128256)
        .kv("block_count", json!({"type": "uint64", "value": 32}));
    let g = m.size(4096, 512, 1, KvCacheType::F16);
    assert!(g.kv.is_empty());
}

#[test]
fn where_ollama_would_panic_there_is_an_error() {
    // No vocabulary.
    let mut m = model("llama", 2, 64, 4, 4, 10);
    m.kv.remove("tokenizer.ggml.tokens");
    let e = graph_size(
        &m.header(),
        64,
        8,
        1,
        KvCacheType::F16,
        FlashAttention::Auto,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("tokenizer.ggml.tokens"), "{e}");
    // mixtral 8x7b formula with zero heads divides by zero.
    let m = model("llama", 2, 64, 0, 1, 10).tensor("blk.0.ffn_gate.0.weight", "F32", &[64, 32]);
    let e = graph_size(
        &m.header(),
        64,
        8,
        1,
        KvCacheType::F16,
        FlashAttention::Auto,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("divides by the head count"), "{e}");
    // A block count no model has is refused rather than sized layer by
    // layer.
    let m = model("llama", 70_000, 64, 4, 4, 10);
    let e = graph_size(
        &m.header(),
        64,
        8,
        1,
        KvCacheType::F16,
        FlashAttention::Auto,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("70000") && e.contains("not a model"), "{e}");
}
