//! Every architecture against llama.cpp: one small random-weight GGUF per
//! architecture (`ggraph-model/tests/fixtures/arch/`, written with the
//! PyPI `gguf` package by its `make_models.py`) and what llama.cpp 0.3.36
//! computed on it (`expected.json`, by its `make-fixtures`): the logits of
//! a 20-token prompt's last position and 12 greedy tokens, with flash
//! attention on and off.
//!
//! ggraph's CPU computes every op of every fixture as llama.cpp's CPU
//! does, so its last logits equal llama.cpp's with the same attention
//! setting to every digit the fixture keeps, and its greedy tokens are
//! llama.cpp's. llama.cpp's two attention paths differ from each other
//! (its F16 rounding of Q, of the softmax or of the V accumulator), and so
//! do its batched and one-token paths: by `spread`, the largest
//! |logit on - off| or |batch - stepwise| of a file; two sequences in one
//! batch and a fork, whose batches differ from llama.cpp's, are held to
//! its logits within `SPREADS` spreads.
//!
//! Each model then runs split over the CPU and two simulated GPUs (layer
//! split, then row split), with the same greedy tokens as on the CPU alone.

use std::path::PathBuf;
use std::sync::Arc;

use ggraph::Device;
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::{ARCHITECTURES, Attention};
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::{PlacementOptions, SplitMode};
use ggraph::{DType, runner};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use serde_json::Value;

const EXPECTED: &str = include_str!("../../ggraph-model/tests/fixtures/arch/expected.json");
const EMBEDDINGS: &str = include_str!("../../ggraph-model/tests/fixtures/arch/embeddings.json");

/// How far ggraph's logits may be from llama.cpp's, in units of the
/// file's flash attention spread.
const SPREADS: f32 = 2.0;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ggraph-model/tests/fixtures/arch")
}

fn ids(v: &Value) -> Vec<i32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap() as i32)
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn params(attention: Attention) -> ContextParams {
    ContextParams {
        n_ctx: 64,
        n_batch: 64,
        n_ubatch: 64,
        attention,
        // llama.cpp's default cache types
        k_type: DType::F16,
        v_type: DType::F16,
        ..ContextParams::default()
    }
}

fn open(arch: &str) -> ModelDesc {
    let path = fixture_dir().join(format!("{arch}.gguf"));
    runner::open_model(path.to_str().unwrap()).unwrap()
}

fn context(
    desc: &ModelDesc,
    devices: &[Arc<dyn Device>],
    opts: &PlacementOptions,
    attention: Attention,
) -> Context {
    let model = Model::load(desc, devices, CpuDevice::new(), opts, LoadMode::Real, None).unwrap();
    Context::new(Arc::new(model), params(attention)).unwrap()
}

fn on_the_cpu(desc: &ModelDesc) -> Model {
    let opts = PlacementOptions::default();
    Model::load(desc, &[], CpuDevice::new(), &opts, LoadMode::Real, None).unwrap()
}

/// The last position's logits of `prompt`, decoded as one batch.
fn last_logits(ctx: &mut Context, prompt: &[i32]) -> Vec<f32> {
    ctx.decode(&Batch::tokens(prompt)).unwrap();
    ctx.logits().to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn greedy(ctx: &mut Context, prompt: &[i32], n: usize) -> Vec<i32> {
    runner::generate(ctx, prompt, n).unwrap().generated
}

fn check(arch: &str) {
    check_fixture(arch, arch);
}

/// The fixture `name`, a model of architecture `arch`.
fn check_fixture(name: &str, arch: &str) {
    let expected: Value = serde_json::from_str(EXPECTED).unwrap();
    let prompt = ids(&expected["prompt"]);
    let want = &expected["models"][name];
    // llama.cpp's own disagreement with itself: flash attention on against
    // off, and a prompt as one batch against one token at a time
    let spread = ["fa_on", "fa_off"]
        .iter()
        .map(|fa| want[fa]["stepwise_max_abs_diff"].as_f64().unwrap())
        .fold(want["fa_on_off_max_abs_diff"].as_f64().unwrap(), f64::max) as f32;
    let desc = open(name);
    assert_eq!(desc.config.arch.name, arch);
    let want_greedy = ids(&want["fa_off"]["greedy"]);
    assert_eq!(want_greedy, ids(&want["fa_on"]["greedy"]));
    let bound = SPREADS * spread;
    for attention in [Attention::Standard, Attention::Flash] {
        let mut ctx = context(&desc, &[], &PlacementOptions::default(), attention);
        let logits = last_logits(&mut ctx, &prompt);
        let (off, on) = (
            floats(&want["fa_off"]["last_logits"]),
            floats(&want["fa_on"]["last_logits"]),
        );
        let d = max_diff(&logits, &off).min(max_diff(&logits, &on));
        eprintln!(
            "{name} {attention:?}: max |logit - llama.cpp| {d:.5} (llama.cpp's own spread {spread:.5})"
        );
        // every op as llama.cpp's CPU computes it, products and mixtures
        // of experts included: the same last logits to every digit the
        // fixture keeps (seven significant)
        let same = match attention {
            Attention::Standard => &off,
            Attention::Flash => &on,
        };
        // to the fixture's seven significant digits, rounded as it
        // was: printed with nine, then rounded to seven
        let r7 = |v: &[f32]| {
            v.iter()
                .map(|x| {
                    let nine: f64 = format!("{:.8e}", *x as f64).parse().unwrap();
                    format!("{nine:.6e}")
                })
                .collect::<Vec<_>>()
        };
        let (got, want) = (r7(&logits), r7(same));
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            first.is_none(),
            "{name} {attention:?}: logit {first:?} is not llama.cpp's: {:?} against {:?}",
            first.map(|i| &got[i]),
            first.map(|i| &want[i]),
        );
        let mut ctx = context(&desc, &[], &PlacementOptions::default(), attention);
        let got = greedy(&mut ctx, &prompt, want_greedy.len());
        assert_eq!(got, want_greedy, "{arch} {attention:?}: greedy tokens");
    }

    two_sequences_and_a_fork(&desc, want, bound);

    // the same tokens split over the CPU and two simulated GPUs
    let sims = || -> Vec<Arc<dyn Device>> {
        (0..2)
            .map(|i| SimDevice::new(i, SimConfig::gpu(64 << 20)) as Arc<dyn Device>)
            .collect()
    };
    // and for a mixture of experts, the experts kept on the host
    // (llama.cpp's --cpu-moe)
    let mut placements = vec![
        (SplitMode::Layer, PlacementOptions::default()),
        (SplitMode::Row, PlacementOptions::default()),
    ];
    if desc.config.is_moe() {
        placements.push((SplitMode::Layer, PlacementOptions::default().cpu_moe()));
    }
    for (split, opts) in placements {
        let opts = PlacementOptions {
            split_mode: split,
            ..opts
        };
        let mut ctx = context(&desc, &sims(), &opts, Attention::Standard);
        let got = greedy(&mut ctx, &prompt, want_greedy.len());
        assert_eq!(
            got, want_greedy,
            "{arch}: split by {split:?} over two simulated GPUs"
        );
    }
}

/// The second sequence and the fork's tokens of `arch_logits.cpp`.
const SECOND: [i32; 9] = [1, 200, 150, 100, 50, 20, 10, 30, 40];
const FORK: [i32; 2] = [5, 9];

/// A batch of (sequence, token) items continuing each sequence, with
/// the logits of the items flagged.
fn items(items: &[(u32, i32, bool)]) -> Batch {
    Batch {
        tokens: items.iter().map(|i| i.1).collect(),
        positions: None,
        seq_ids: Some(items.iter().map(|i| vec![i.0]).collect()),
        outputs: Some(items.iter().map(|i| i.2).collect()),
    }
}

fn argmax(v: &[f32]) -> i32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as i32
}

/// llama.cpp's sections 3 and 4 (`arch_logits.cpp`), without flash
/// attention: two sequences in one batch and a step of both, then a
/// prompt forked by `seq_cp` and one token in each branch.
fn two_sequences_and_a_fork(desc: &ModelDesc, want: &Value, bound: f32) {
    let expected: Value = serde_json::from_str(EXPECTED).unwrap();
    let prompt = ids(&expected["prompt"]);
    let arch = &desc.config.arch.name;
    let params = ContextParams {
        n_ctx: 512,
        n_seq_max: 2,
        ..params(Attention::Standard)
    };
    let mut ctx = Context::new(Arc::new(on_the_cpu(desc)), params).unwrap();
    let n_vocab = desc.config.n_vocab;
    let check = |what: &str, got: &[f32], key: &str| {
        let d = max_diff(got, &floats(&want["fa_off"][key]));
        eprintln!("{arch} {what}: max |logit - llama.cpp| {d:.5}");
        assert!(d <= bound, "{arch} {what}: logits {d} from llama.cpp's");
    };
    let mut first: Vec<(u32, i32, bool)> = (0..12).map(|i| (0, prompt[i], i == 11)).collect();
    first.extend((0..SECOND.len()).map(|i| (1, SECOND[i], i + 1 == SECOND.len())));
    ctx.decode(&items(&first)).unwrap();
    let two = ctx.logits().to_vec();
    check("two sequences in one batch", &two, "two_seqs_logits");
    let next = [
        (0, argmax(&two[..n_vocab]), true),
        (1, argmax(&two[n_vocab..]), true),
    ];
    ctx.decode(&items(&next)).unwrap();
    check("a step of two sequences", ctx.logits(), "two_seqs_next");

    ctx.clear_cache();
    ctx.decode(&Batch::tokens(&prompt)).unwrap();
    ctx.seq_cp(0, 1, None, None).unwrap();
    ctx.decode(&items(&[(0, FORK[0], true), (1, FORK[1], true)]))
        .unwrap();
    check("a fork by seq_cp", ctx.logits(), "fork_logits");
}

/// Every architecture has llama.cpp's logits here, or an embedding model
/// its embeddings (`tests/embeddings.rs`).
#[test]
fn every_architecture_has_a_fixture() {
    let expected: Value = serde_json::from_str(EXPECTED).unwrap();
    let embeddings: Value = serde_json::from_str(EMBEDDINGS).unwrap();
    for a in ARCHITECTURES {
        let fixtures = if a.embeddings_only {
            &embeddings
        } else {
            &expected
        };
        assert!(
            fixtures["models"][a.name].is_object(),
            "no llama.cpp fixture for {}",
            a.name
        );
    }
}

#[test]
fn llama_matches_llama_cpp() {
    check("llama");
}

#[test]
fn qwen2_matches_llama_cpp() {
    check("qwen2");
}

#[test]
fn qwen3_matches_llama_cpp() {
    check("qwen3");
}

#[test]
fn qwen3moe_matches_llama_cpp() {
    check("qwen3moe");
}

/// Every matrix MXFP4, the experts through mul_mat_id: llama.cpp's
/// repacked kernels' order (a block's whole sum a step).
#[test]
fn qwen3moe_in_mxfp4_matches_llama_cpp() {
    check_fixture("qwen3moe_mxfp4", "qwen3moe");
}

#[test]
fn gemma2_matches_llama_cpp() {
    check("gemma2");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check("gemma3");
}

/// Every layer sliding: no layer reads the full causal mask or the main
/// cache, so the graph has neither input (llama.cpp runs such a file).
#[test]
fn gemma3_with_only_sliding_layers_matches_llama_cpp() {
    check_fixture("gemma3_sliding", "gemma3");
}

#[test]
fn phi3_matches_llama_cpp() {
    check("phi3");
}

/// phi-3.5's LongRoPE: the long factors (the context is past the original
/// one) and the rope's attention factor.
#[test]
fn phi3_with_longrope_matches_llama_cpp() {
    check_fixture("phi3_longrope", "phi3");
}

/// LFM2: short-convolution layers (state per sequence) and attention
/// layers, in F32, F16 and Q8_0.
#[test]
fn lfm2_matches_llama_cpp() {
    check("lfm2");
}

#[test]
fn lfm2_in_f16_matches_llama_cpp() {
    check_fixture("lfm2_f16", "lfm2");
}

#[test]
fn lfm2_in_q8_0_matches_llama_cpp() {
    check_fixture("lfm2_q8_0", "lfm2");
}

/// LFM2 whose attention layers slide (a window of 6 under a 20-token
/// prompt): hybrid memory with a sliding-window cache.
#[test]
fn lfm2_with_sliding_attention_matches_llama_cpp() {
    check_fixture("lfm2_swa", "lfm2");
}

/// Granite 4.0-H: Mamba-2 layers (a convolution's and a scan's state per
/// sequence) and attention layers, with granite's scales; in F32, F16
/// and Q8_0, and a mixture of experts with a shared expert and no
/// position embedding.
#[test]
fn granitehybrid_matches_llama_cpp() {
    check("granitehybrid");
}

#[test]
fn granitehybrid_in_f16_matches_llama_cpp() {
    check_fixture("granitehybrid_f16", "granitehybrid");
}

#[test]
fn granitehybrid_in_q8_0_matches_llama_cpp() {
    check_fixture("granitehybrid_q8_0", "granitehybrid");
}

#[test]
fn granitehybrid_with_experts_matches_llama_cpp() {
    check_fixture("granitehybrid_moe", "granitehybrid");
}

/// Qwen3.5: Gated DeltaNet layers (a convolution's state and a state
/// matrix per head per sequence) and gated attention with a partial
/// multi-section rope.
#[test]
fn qwen35_matches_llama_cpp() {
    check("qwen35");
}

/// Qwen3.5's MoE form: routed experts and a shared expert gated per
/// token.
#[test]
fn qwen35moe_matches_llama_cpp() {
    check("qwen35moe");
}

#[test]
fn qwen35moe_in_f16_matches_llama_cpp() {
    check_fixture("qwen35moe_f16", "qwen35moe");
}

#[test]
fn qwen35moe_in_q8_0_matches_llama_cpp() {
    check_fixture("qwen35moe_q8_0", "qwen35moe");
}

#[test]
fn gpt_oss_matches_llama_cpp() {
    check("gpt-oss");
}

#[test]
fn gpt_oss_in_f16_matches_llama_cpp() {
    check_fixture("gpt-oss_f16", "gpt-oss");
}

/// As gpt-oss ships: experts in MXFP4, the other matrices in Q8_0.
#[test]
fn gpt_oss_with_mxfp4_experts_matches_llama_cpp() {
    check_fixture("gpt-oss_mxfp4", "gpt-oss");
}

/// Gemma 4 as the E models are: sliding and full layers with heads of
/// their own sizes, proportional rope, V from K's projection in a layer
/// without `attn_v`, the last two layers reading earlier layers' caches,
/// per-layer inputs, scaled layer outputs.
#[test]
fn gemma4_matches_llama_cpp() {
    check("gemma4");
}

#[test]
fn gemma4_in_f16_matches_llama_cpp() {
    check_fixture("gemma4_f16", "gemma4");
}

#[test]
fn gemma4_in_q8_0_matches_llama_cpp() {
    check_fixture("gemma4_q8_0", "gemma4");
}

/// Gemma 4's MoE form: experts (gate and up in one tensor, a scale each)
/// beside the dense FFN in every layer.
#[test]
fn gemma4_with_experts_matches_llama_cpp() {
    check_fixture("gemma4moe", "gemma4");
}

#[test]
fn gemma4_with_experts_in_q8_0_matches_llama_cpp() {
    check_fixture("gemma4moe_q8_0", "gemma4");
}

/// A Qwen3.5 file with a multi-token prediction layer (the sixth block),
/// which the main pass never runs: read as the five-layer model, the
/// prediction layer's tensors not loaded; llama.cpp's logits equal the
/// file without it.
#[test]
fn qwen35_with_a_prediction_layer_runs_the_main_model() {
    let desc = open("qwen35_mtp");
    assert_eq!((desc.config.n_layer, desc.config.n_layer_extra), (5, 1));
    assert!(desc.tensors.iter().all(|t| !t.name.starts_with("blk.5.")));
    check_fixture("qwen35_mtp", "qwen35");
}

#[test]
fn qwen35_in_f16_matches_llama_cpp() {
    check_fixture("qwen35_f16", "qwen35");
}

#[test]
fn qwen35_in_q8_0_matches_llama_cpp() {
    check_fixture("qwen35_q8_0", "qwen35");
}

/// A context of 512 cells on the CPU, ubatches of 16: the sliding-window
/// layers' own cache (unless `swa_full`) is 256 cells, half of it.
fn long_context(desc: &ModelDesc, swa_full: bool, attention: Attention) -> Context {
    let params = ContextParams {
        n_ctx: 512,
        n_batch: 64,
        n_ubatch: 16,
        swa_full,
        ..params(attention)
    };
    Context::new(Arc::new(on_the_cpu(desc)), params).unwrap()
}

/// The sliding-window layers' own cache (256 cells here, for a window of
/// 6) reuses the cells that fall out of the window: 299 tokens decode
/// through it with the tokens and logits of the full-size cache
/// (`swa_full`, llama.cpp's `--swa-full`), in less memory.
#[test]
fn a_sliding_window_cache_reuses_its_cells_and_matches_the_full_one() {
    let desc = open("gemma3");
    let run = |swa_full: bool| {
        let mut ctx = long_context(&desc, swa_full, Attention::Flash);
        let expected: Value = serde_json::from_str(EXPECTED).unwrap();
        let prompt = ids(&expected["prompt"]);
        let g = runner::generate(&mut ctx, &prompt, 280).unwrap();
        let kv: u64 = ctx.kv_bytes_per_buffer_type().iter().map(|(_, b)| b).sum();
        (g.generated, ctx.logits().to_vec(), kv, ctx)
    };
    let (full_tokens, full_logits, full_kv, full) = run(true);
    let (tokens, logits, kv, ctx) = run(false);
    assert!(full.memory().swa().is_none());
    let swa = ctx
        .memory()
        .swa()
        .expect("gemma3 has sliding-window layers");
    assert_eq!(swa.layout().kv_size, 256);
    assert_eq!(ctx.memory().main().unwrap().n_layers_held(), 1);
    assert_eq!(swa.n_layers_held(), 5);
    // the prompt and 279 generated tokens (the 280th is not decoded) in
    // 256 cells: out-of-window cells were written over
    assert_eq!(ctx.memory().cells().used(), 299);
    assert_eq!(swa.cells.used(), 256);
    assert_eq!(tokens, full_tokens);
    // not bit for bit: the full cache's 512 cells take flash attention's
    // split over the threads, the sliding cache's 256 its one-query loop,
    // as ggml chooses by the number of keys, and the two add in other
    // orders
    let d = max_diff(&logits, &full_logits);
    assert!(d < 1e-2, "last logits differ by {d}");
    assert!(kv < full_kv, "{kv} bytes of cache, {full_kv} with swa_full");
}

/// Sequence operations reach both caches of a model with sliding-window
/// layers: removing, shifting (K rotated with each layer's rope) and
/// defragmenting give the logits of the same operations on one full-size
/// cache.
#[test]
fn sequence_operations_apply_to_the_sliding_window_cache_too() {
    let desc = open("gemma2");
    let run = |swa_full: bool| {
        let mut ctx = long_context(&desc, swa_full, Attention::Standard);
        assert_eq!(ctx.memory().swa().is_some(), !swa_full);
        let prompt: Vec<i32> = (0..40).map(|i| 3 + (i * 7) % 280).collect();
        ctx.decode(&Batch::tokens(&prompt)).unwrap();
        ctx.seq_rm(Some(0), Some(0), Some(8)).unwrap();
        ctx.seq_add(0, Some(8), None, -8).unwrap();
        ctx.decode(&Batch::tokens(&[77])).unwrap();
        let shifted = ctx.logits().to_vec();
        ctx.defragment().unwrap();
        ctx.decode(&Batch::tokens(&[78])).unwrap();
        (shifted, ctx.logits().to_vec())
    };
    let (full_shifted, full_after) = run(true);
    let (shifted, after) = run(false);
    let d = max_diff(&shifted, &full_shifted).max(max_diff(&after, &full_after));
    assert!(d < 1e-3, "logits differ by {d}");
}
