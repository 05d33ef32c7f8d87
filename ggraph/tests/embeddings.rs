//! Encoders and pooled embeddings against llama.cpp: the encoder fixtures
//! (`ggraph-model/tests/fixtures/arch/bert*.gguf`, by `make_models.py`)
//! and what llama.cpp 0.3.36 computed for them through its embedding API
//! (`embeddings.json`, by `make-embedding-fixtures`): pooled vectors of
//! three token sequences, each alone and the three in one batch, with
//! flash attention on and off, for several poolings.
//!
//! ggraph's CPU computes every op as llama.cpp's CPU does, so every value
//! equals llama.cpp's to the digits the fixture keeps.

use std::path::PathBuf;
use std::sync::Arc;

use ggraph::Device;
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams, DecodeError};
use ggraph::model::arch::{Attention, Pooling};
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::{PlacementOptions, SplitMode};
use ggraph::runner;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use serde_json::Value;

const EXPECTED: &str = include_str!("../../ggraph-model/tests/fixtures/arch/embeddings.json");

fn fixture(name: &str) -> ModelDesc {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ggraph-model/tests/fixtures/arch")
        .join(format!("{name}.gguf"));
    runner::open_model(path.to_str().unwrap()).unwrap()
}

fn context(desc: &ModelDesc, attention: Attention, pooling: Option<Pooling>) -> Context {
    let opts = PlacementOptions::default();
    let model = Model::load(desc, &[], CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
    let params = ContextParams {
        n_ctx: 64,
        n_batch: 64,
        n_ubatch: 64,
        n_seq_max: 4,
        attention,
        embeddings: true,
        pooling,
        ..ContextParams::default()
    };
    Context::new(Arc::new(model), params).unwrap()
}

fn rows(v: &Value) -> Vec<Vec<f32>> {
    let row = |r: &Value| -> Vec<f32> {
        r.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    v.as_array().unwrap().iter().map(row).collect()
}

fn texts(expected: &Value) -> Vec<Vec<i32>> {
    rows(&expected["texts"])
        .into_iter()
        .map(|t| t.into_iter().map(|x| x as i32).collect())
        .collect()
}

/// The three texts in one batch, a token of each in turn, as sequences 0,
/// 1 and 2.
fn interleaved(texts: &[Vec<i32>]) -> Batch {
    let mut b = Batch::default();
    let (mut positions, mut seqs) = (Vec::new(), Vec::new());
    let longest = texts.iter().map(Vec::len).max().unwrap();
    for i in 0..longest {
        for (s, t) in texts.iter().enumerate() {
            if let Some(&tok) = t.get(i) {
                b.tokens.push(tok);
                positions.push(i as i32);
                seqs.push(vec![s as u32]);
            }
        }
    }
    b.positions = Some(positions);
    b.seq_ids = Some(seqs);
    b.all_outputs()
}

/// The rows one decode gives: each sequence's pooled vector, or with
/// pooling none every token's row.
fn decoded(ctx: &mut Context, batch: &Batch, n_seqs: usize) -> Vec<Vec<f32>> {
    // as the driver clears llama.cpp's memory (a decoder's cache)
    ctx.clear_cache();
    ctx.decode(batch).unwrap();
    match ctx.pooling() {
        Pooling::None => {
            let n = ctx.model().config.n_embd;
            ctx.embeddings().chunks(n).map(<[f32]>::to_vec).collect()
        }
        _ => (0..n_seqs as u32)
            .map(|s| ctx.embeddings_seq(s).unwrap().to_vec())
            .collect(),
    }
}

fn assert_same(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: row {r}'s width");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            // the fixture keeps 9 significant digits: f32's own
            assert!(
                a == b,
                "{what}: row {r}, value {i}: ggraph {a}, llama.cpp {b}"
            );
        }
    }
}

fn check(name: &str) {
    let expected: Value = serde_json::from_str(EXPECTED).unwrap();
    let texts = texts(&expected);
    let desc = fixture(name);
    let runs = expected["models"][name].as_object().unwrap();
    for (pooling, run) in runs {
        let asked = match pooling.as_str() {
            "model" => None,
            p => Some(Pooling::parse(p).unwrap()),
        };
        for (fa, attention) in [("on", Attention::Flash), ("off", Attention::Standard)] {
            let what = format!("{name}, pooling {pooling}, flash attention {fa}");
            let mut ctx = context(&desc, attention, asked);
            assert_eq!(
                ctx.pooling().name(),
                run["pooling"].as_str().unwrap(),
                "{what}"
            );
            let want = &run[fa];
            let mut alone = Vec::new();
            for t in &texts {
                alone.extend(decoded(&mut ctx, &Batch::tokens(t).all_outputs(), 1));
            }
            assert_same(&format!("{what}, alone"), &alone, &rows(&want["alone"]));
            let batched = decoded(&mut ctx, &interleaved(&texts), texts.len());
            assert_same(
                &format!("{what}, batched"),
                &batched,
                &rows(&want["batched"]),
            );
        }
    }
}

#[test]
fn bert_matches_llama_cpp() {
    check("bert");
}

#[test]
fn bert_f16_matches_llama_cpp() {
    check("bert_f16");
}

#[test]
fn bert_q8_0_matches_llama_cpp() {
    check("bert_q8_0");
}

#[test]
fn a_bert_reranker_matches_llama_cpp() {
    check("bert_rank");
}

/// Every embedding model split over the CPU and two simulated GPUs, by
/// layers and by rows, gives the CPU's vectors: the same kernels run
/// everywhere.
#[test]
fn embedding_models_split_over_two_simulated_gpus_give_the_cpu_vectors() {
    let expected: Value = serde_json::from_str(EXPECTED).unwrap();
    let texts = texts(&expected);
    for name in expected["models"].as_object().unwrap().keys() {
        split_over_sims(name, &texts);
    }
}

fn split_over_sims(name: &str, texts: &[Vec<i32>]) {
    let desc = fixture(name);
    let want = {
        let mut ctx = context(&desc, Attention::Flash, None);
        decoded(&mut ctx, &interleaved(texts), texts.len())
    };
    for split_mode in [SplitMode::Layer, SplitMode::Row] {
        let sims: Vec<Arc<dyn Device>> = (0..2)
            .map(|i| SimDevice::new(i, SimConfig::gpu(64 << 20)) as Arc<dyn Device>)
            .collect();
        let opts = PlacementOptions {
            split_mode,
            ..PlacementOptions::default()
        };
        let model =
            Model::load(&desc, &sims, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
        let on_sims = model
            .weight_bytes()
            .iter()
            .filter(|(n, b)| n.starts_with("sim") && *b > 0)
            .count();
        assert_eq!(on_sims, 2, "{name} {split_mode:?}: weights on both devices");
        let params = ContextParams {
            n_ctx: 64,
            n_batch: 64,
            n_ubatch: 64,
            n_seq_max: 4,
            embeddings: true,
            ..ContextParams::default()
        };
        let mut ctx = Context::new(Arc::new(model), params).unwrap();
        let got = decoded(&mut ctx, &interleaved(texts), texts.len());
        assert_same(&format!("{name} split by {split_mode:?}"), &got, &want);
    }
}

#[test]
fn an_encoder_takes_a_batch_in_one_ubatch_and_keeps_nothing() {
    let desc = fixture("bert");
    let mut ctx = context(&desc, Attention::Flash, None);
    let text = [1, 51, 88, 125];
    ctx.decode(&Batch::tokens(&text)).unwrap();
    let first = ctx.embeddings_seq(0).unwrap().to_vec();
    // nothing was kept: the same text again starts afresh
    ctx.decode(&Batch::tokens(&text)).unwrap();
    assert_eq!(ctx.embeddings_seq(0).unwrap(), first.as_slice());
    assert_eq!(ctx.cells_used(), 0);
    let long = vec![5; 65];
    let err = ctx.decode(&Batch::tokens(&long)).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidBatch(_)), "{err}");
    assert!(err.to_string().contains("65"), "{err}");
    // and it still works
    ctx.decode(&Batch::tokens(&text)).unwrap();
    assert_eq!(ctx.embeddings_seq(0).unwrap(), first.as_slice());
}

/// A text longer than the positions the encoder learned is an error
/// naming both, whatever the batch takes.
#[test]
fn an_encoder_refuses_positions_past_its_learned_ones() {
    let desc = fixture("bert");
    let opts = PlacementOptions::default();
    let model = Model::load(&desc, &[], CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
    let params = ContextParams {
        n_ctx: 1024,
        n_batch: 1024,
        n_ubatch: 1024,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::new(model), params).unwrap();
    let err = ctx.decode(&Batch::tokens(&[5; 513])).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidBatch(_)), "{err}");
    assert!(
        err.to_string().contains("position 512") && err.to_string().contains("512 positions"),
        "{err}"
    );
    ctx.decode(&Batch::tokens(&[5; 512])).unwrap();
    assert_eq!(ctx.embeddings_seq(0).unwrap().len(), 64);
}

#[test]
fn an_encoder_computes_embeddings_and_a_reranker_needs_its_head() {
    let desc = fixture("bert");
    let opts = PlacementOptions::default();
    let model =
        Arc::new(Model::load(&desc, &[], CpuDevice::new(), &opts, LoadMode::Real, None).unwrap());
    let no_embd = ContextParams {
        n_ctx: 64,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(model.clone(), no_embd).unwrap();
    assert!(ctx.params.embeddings);
    assert_eq!(ctx.pooling(), Pooling::Mean);
    // nothing to sample from: a clear error, not an empty choice
    let err = runner::generate(&mut ctx, &[1, 51, 88], 2).unwrap_err();
    assert!(err.to_string().contains("not logits"), "{err}");
    let rank = ContextParams {
        n_ctx: 64,
        embeddings: true,
        pooling: Some(Pooling::Rank),
        ..ContextParams::default()
    };
    let err = Context::new(model, rank).err().unwrap();
    assert!(err.to_string().contains("classifier"), "{err}");
}

/// Qwen3-Embedding is qwen3 pooled by its last token: a decoder with its
/// KV cache, causal, its pooled rows instead of logits.
#[test]
fn qwen3_pooled_as_qwen3_embedding_matches_llama_cpp() {
    check("qwen3");
}

#[test]
fn nomic_bert_matches_llama_cpp() {
    check("nomic-bert");
}

/// EmbeddingGemma: gemma3's layers in both directions without a cache,
/// the sliding window symmetric, dense projections after pooling.
#[test]
fn gemma_embedding_matches_llama_cpp() {
    check("gemma-embedding");
}

/// jina-bert-v2: ALiBi, a GEGLU FFN of its own gate or fused into up,
/// norms of Q and K and a second norm after attention.
#[test]
fn jina_bert_v2_matches_llama_cpp() {
    check("jina-bert-v2");
    check("jina-bert-v2_fused");
}
