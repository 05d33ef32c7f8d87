//! Sampling on the real model (SmolLM2-135M-Instruct F16, as
//! `scripts/real-gguf` makes it; `GGRAPH_REAL_GGUF`):
//!
//! * whole generations with a seed give llama.cpp's tokens: the runs
//!   `llama-completion --seed N` made in
//!   `ggraph-model/tests/fixtures/sampling/completions.json`, through the
//!   library's generation loop (the prompt's tokens accepted first, as
//!   llama-completion does);
//! * output held to a JSON schema is valid JSON for the schema, every
//!   seed.
//!
//! The logits come from ggraph's own decode, within llama.cpp's flash
//! attention spread of its logits (tests/real_gguf.rs), not bit for bit.
//! Where the chain cuts the candidates (top-k, top-p, min-p, Mirostat)
//! that does not move a draw, and the generations are equal token for
//! token. A draw over the whole vocabulary (top-k 0, top-p 1, min-p 0)
//! sums 49152 probabilities, each off by that difference, and a token of
//! low probability has a narrow slice of the sum: those runs agree up to
//! the first token drawn at a probability below `NARROW`, and must agree
//! that far.

use std::path::PathBuf;
use std::sync::Arc;

use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::Attention;
use ggraph::model::generation::{self, Hooks, Request, StopReason};
use ggraph::model::loaded::Model;
use ggraph::model::sampling::{GrammarSource, GrammarVocab, SamplingParams, TokenSampler};
use ggraph::model::tokenizer::Tokenizer;
use ggraph::runner;
use serde_json::{Value, json};

#[path = "../../ggraph-model/tests/common/llama_sampling_params.rs"]
#[allow(dead_code)]
mod llama_sampling_params;
use llama_sampling_params::params;

/// A token drawn at a lower probability than this, over the whole
/// vocabulary, may part from llama.cpp's draw (see the module's note).
const NARROW: f32 = 0.05;

const COMPLETIONS: &str =
    include_str!("../../ggraph-model/tests/fixtures/sampling/completions.json");

fn model() -> Option<Arc<Model>> {
    let Some(dir) = std::env::var_os("GGRAPH_REAL_GGUF") else {
        eprintln!("sampling_real: GGRAPH_REAL_GGUF unset: not checked (scripts/test sets it)");
        return None;
    };
    let path = PathBuf::from(dir).join("F16.gguf");
    Some(runner::load_on_host(path.to_str().unwrap()).unwrap())
}

fn context(model: &Arc<Model>) -> Context {
    let params = ContextParams {
        n_ctx: 512,
        attention: Attention::Standard,
        ..ContextParams::default()
    };
    Context::new(model.clone(), params).unwrap()
}

#[test]
fn seeded_generations_are_llama_completion_s() {
    let Some(model) = model() else { return };
    let tokenizer = model.tokenizer().unwrap();
    let doc: Value = serde_json::from_str(COMPLETIONS).unwrap();
    let mut failures = Vec::new();
    for run in doc["runs"].as_array().unwrap() {
        let name = format!("{} ({})", run["name"].as_str().unwrap(), run["prompt"]);
        let prompt: Vec<i32> = run["prompt_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap() as i32)
            .collect();
        let want: Vec<i32> = run["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap() as i32)
            .collect();
        let text = run["prompt_text"].as_str().map(str::to_string);
        if let Some(text) = text {
            assert_eq!(
                tokenizer.encode(&text, true, true).unwrap(),
                prompt,
                "{name}"
            );
        }
        let p = params(&run["params"]);
        let mut sampler =
            TokenSampler::new(p.chain(model.config.n_vocab, Some(&tokenizer)).unwrap());
        let mut ctx = context(&model);
        let whole_vocabulary = p.mirostat == 0 && p.top_k == 0 && p.top_p >= 1.0 && p.min_p <= 0.0;
        let req = Request {
            n_predict: 32,
            n_probs: if whole_vocabulary { usize::MAX } else { 0 },
            ..Request::default()
        };
        // each token's probability in its draw
        let mut drawn_p = Vec::new();
        let hooks = Hooks {
            on_token: Box::new(|t| {
                if let Some(&(_, p)) = t.probs.iter().find(|(id, _)| *id == t.id) {
                    drawn_p.push(p);
                }
                true
            }),
            ..Hooks::default()
        };
        let g = generation::generate(
            &mut ctx,
            &prompt,
            &mut sampler,
            Some(&tokenizer),
            &req,
            hooks,
        )
        .unwrap();
        // llama.cpp's ids end with the end-of-generation token it chose
        let eog = run["eog"].as_bool().unwrap();
        let want_generated = if eog {
            &want[..want.len() - 1]
        } else {
            &want[..]
        };
        if whole_vocabulary {
            let narrow = drawn_p
                .iter()
                .position(|&p| p < NARROW)
                .unwrap_or(drawn_p.len());
            let agree = g
                .generated
                .iter()
                .zip(want_generated)
                .take_while(|(a, b)| a == b)
                .count();
            eprintln!("{name}: llama.cpp's tokens for {agree}; the first narrow draw at {narrow}");
            if agree < narrow {
                failures.push(format!(
                    "{name}: parts from llama.cpp at token {agree}, before the first narrow draw \
                     ({narrow}); probabilities {drawn_p:?}"
                ));
            }
            continue;
        }
        if g.generated != want_generated {
            let at = g
                .generated
                .iter()
                .zip(want_generated)
                .position(|(a, b)| a != b);
            failures.push(format!(
                "{name}: {} tokens, llama.cpp {}; first difference at {at:?}\n  ours {:?}\n  llama.cpp {:?}",
                g.generated.len(),
                want_generated.len(),
                g.generated,
                want_generated
            ));
        } else if eog != (g.stop == StopReason::EndOfGeneration) {
            failures.push(format!(
                "{name}: stopped for {:?}, llama.cpp eog {eog}",
                g.stop
            ));
        } else if g.text != run["text"].as_str().unwrap() {
            failures.push(format!(
                "{name}: text {:?}, llama.cpp {:?}",
                g.text, run["text"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn chat_prompt(t: &Tokenizer, model: &Model, user: &str) -> Vec<i32> {
    use ggraph::model::chat_template::ChatMessage;
    let template = model.chat_template(t).unwrap();
    let text = template
        .render(&[ChatMessage::new("user", user)], true)
        .unwrap();
    t.encode(&text, true, true).unwrap()
}

#[test]
fn json_schema_output_is_valid_for_the_schema_every_seed() {
    let Some(model) = model() else { return };
    let tokenizer = model.tokenizer().unwrap();
    let vocab = GrammarVocab::new(&tokenizer).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}
        },
        "required": ["name", "age", "colors"],
        "additionalProperties": false
    });
    let prompt = chat_prompt(
        &tokenizer,
        &model,
        "Describe a person as JSON: name, age, favourite colors.",
    );
    for seed in 1..=6u32 {
        let p = SamplingParams {
            seed,
            ..SamplingParams::default()
        };
        let chain = p.chain(model.config.n_vocab, Some(&tokenizer)).unwrap();
        let grammar = vocab
            .compile(&GrammarSource::JsonSchema(schema.clone()))
            .unwrap();
        let mut sampler = TokenSampler::constrained(chain, Box::new(grammar));
        let mut ctx = context(&model);
        let req = Request {
            n_predict: 200,
            ..Request::default()
        };
        let g = generation::generate(
            &mut ctx,
            &prompt,
            &mut sampler,
            Some(&tokenizer),
            &req,
            Hooks::default(),
        )
        .unwrap();
        assert_eq!(
            g.stop,
            StopReason::EndOfGeneration,
            "seed {seed}: {:?}",
            g.text
        );
        let v: Value = serde_json::from_str(&g.text)
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON ({e}): {:?}", g.text));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 3, "seed {seed}: {v}");
        assert!(
            o["name"].as_str().is_some_and(|s| s.chars().count() <= 20),
            "seed {seed}: {v}"
        );
        assert!(
            o["age"].as_i64().is_some_and(|a| (0..=120).contains(&a)),
            "seed {seed}: {v}"
        );
        let colors = o["colors"].as_array().unwrap();
        assert!(colors.len() <= 3, "seed {seed}: {v}");
        for c in colors {
            assert!(
                ["red", "green", "blue"].contains(&c.as_str().unwrap()),
                "seed {seed}: {v}"
            );
        }
    }
}
