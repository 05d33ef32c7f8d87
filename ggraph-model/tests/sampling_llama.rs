//! ggraph's samplers against llama.cpp's, draw for draw: the fixtures in
//! `fixtures/sampling` (made by its `make-fixtures` from llama.cpp 0.3.36's
//! `common_sampler`) hold the logits of two prompts on the real SmolLM2
//! F16 file and, for many parameter sets, the 200 tokens llama.cpp draws
//! from them in turn (each accepted before the next draw, after the
//! prompt's tokens), and the candidates after the chain at the first.
//! DRY needs the vocabulary: its cases run where the real model is
//! (`GGRAPH_REAL_GGUF`, as `scripts/test` sets it).

use std::path::{Path, PathBuf};

use ggraph_model::gguf::ModelFile;
use ggraph_model::sampling::TokenSampler;
use ggraph_model::tokenizer::Tokenizer;
use serde_json::Value;

#[path = "common/llama_sampling_params.rs"]
mod llama_sampling_params;
use llama_sampling_params::{float, int, known_samplers, params};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sampling")
}

fn logits(file: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixtures().join(file)).unwrap();
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn real_tokenizer() -> Option<Tokenizer> {
    let dir = PathBuf::from(std::env::var_os("GGRAPH_REAL_GGUF")?);
    let file = ModelFile::open(dir.join("F16.gguf").to_str()?).ok()?;
    Tokenizer::from_header(file.header()).ok()
}

#[test]
fn draws_are_llama_cpp_s_draw_for_draw() {
    let doc: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("draws.json")).unwrap()).unwrap();
    let n_vocab = doc["n_vocab"].as_u64().unwrap() as usize;
    let tokenizer = real_tokenizer();
    let mut checked = 0;
    let mut skipped = Vec::new();
    let mut unknown = Vec::new();
    let mut failures = Vec::new();
    for case in doc["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        if !known_samplers(&case["params"]) {
            unknown.push(name.to_string());
            continue;
        }
        let p = params(&case["params"]);
        let prompt = &doc["prompts"][case["prompt"].as_str().unwrap()];
        let logits = logits(prompt["logits"].as_str().unwrap());
        assert_eq!(logits.len(), n_vocab);
        let uses_dry = p.dry_multiplier != 0.0 && p.mirostat == 0;
        if uses_dry && tokenizer.is_none() {
            skipped.push(name.to_string());
            continue;
        }
        let chain = p.chain(n_vocab, tokenizer.as_ref()).unwrap();
        let mut sampler = TokenSampler::new(chain);
        for t in prompt["tokens"].as_array().unwrap() {
            sampler.accept(int(t), false).unwrap();
        }
        let want: Vec<i32> = case["draws"].as_array().unwrap().iter().map(int).collect();
        let mut got = Vec::with_capacity(want.len());
        let mut first = None;
        for _ in 0..want.len() {
            let id = sampler.sample(&logits).unwrap();
            sampler.accept(id, true).unwrap();
            if first.is_none() {
                first = Some(sampler.top_probs(usize::MAX));
            }
            got.push(id);
        }
        if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
            failures.push(format!(
                "{name}: draw {at} is {} where llama.cpp drew {} (chain {:?})",
                got[at],
                want[at],
                sampler.chain().names()
            ));
            continue;
        }
        // the first draw's candidates after the chain: same ids, same
        // probabilities
        let cands = &case["first"]["candidates"];
        let ours = first.unwrap();
        for c in cands.as_array().unwrap() {
            let (id, p) = (int(&c[0]), float(&c[2]));
            match ours.iter().find(|(o, _)| *o == id) {
                Some(&(_, q)) if (p - q).abs() <= 1e-6 * p.abs().max(1e-3) => {}
                other => failures.push(format!(
                    "{name}: candidate {id} has p {other:?} where llama.cpp has {p}"
                )),
            }
        }
        checked += 1;
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        unknown.is_empty(),
        "samplers ggraph lacks in: {}",
        unknown.join(", ")
    );
    assert!(checked >= 80, "only {checked} cases checked");
    if !skipped.is_empty() {
        eprintln!(
            "sampling_llama: {} DRY case(s) need the vocabulary (GGRAPH_REAL_GGUF unset): {}",
            skipped.len(),
            skipped.join(", ")
        );
    }
}
