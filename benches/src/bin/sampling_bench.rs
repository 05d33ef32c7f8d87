//! Sampling costs per token: llama.cpp's default sampler chain over a
//! vocabulary's logits, and a grammar's token mask (llguidance) following
//! a valid text, on SmolLM2's 49152-token vocabulary and Gemma 4's 262144
//! (llama.cpp's `models/ggml-vocab-gemma-4.gguf`); then SmolLM2's
//! generation speed with and without a JSON schema (the mask must not
//! halve it).
//!
//! Run: cargo run --release -p ggraph-benches --bin sampling_bench
//! [-- VOCAB.gguf ...]. Without arguments: `$GGRAPH_REAL_GGUF/F16.gguf`
//! (or `~/.cache/ggraph-models/smollm2-135m-instruct`) and
//! `$GGRAPH_LLAMA_CPP_SOURCE/models/ggml-vocab-gemma-4.gguf` (as
//! `scripts/llama-cpp-source` prints it).

use std::path::PathBuf;
use std::time::Instant;

use ggraph::context::{Context, ContextParams};
use ggraph::model::chat_template::ChatMessage;
use ggraph::model::generation::{self, Hooks, Request};
use ggraph::model::gguf::ModelFile;
use ggraph::model::sampling::{
    Candidates, Constraint, GrammarSource, GrammarVocab, SamplingParams, TokenSampler,
};
use ggraph::model::serde_json::json;
use ggraph::model::tokenizer::Tokenizer;
use ggraph::runner;

const JSON_TEXT: &str = "{\"name\": \"Ada Lovelace\", \"age\": 36, \"colors\": [\"red\", \"blue\"], \
                         \"notes\": \"first programmer, wrote on the analytical engine\"}";

fn schema() -> ggraph::model::serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "colors": {"type": "array", "items": {"type": "string"}},
            "notes": {"type": "string"}
        },
        "required": ["name", "age"]
    })
}

fn default_paths() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let real = std::env::var_os("GGRAPH_REAL_GGUF")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/ggraph-models/smollm2-135m-instruct"))
        });
    if let Some(dir) = real {
        out.push(dir.join("F16.gguf"));
    }
    if let Some(src) = std::env::var_os("GGRAPH_LLAMA_CPP_SOURCE") {
        out.push(PathBuf::from(src).join("models/ggml-vocab-gemma-4.gguf"));
    }
    out
}

/// Pseudo-random logits with a model's spread (a few large, most small).
fn logits(n: usize) -> Vec<f32> {
    let mut rng = ggraph::util::Rng::new(5);
    (0..n)
        .map(|_| {
            let u = rng.below(1_000_000) as f32 / 1e6;
            let v = rng.below(1_000_000) as f32 / 1e6;
            // a Gumbel-ish tail
            -(-(u.max(1e-6)).ln()).ln() * 2.0 + v
        })
        .collect()
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn chain_cost(n_vocab: usize) -> Res<f64> {
    let l = logits(n_vocab);
    let p = SamplingParams {
        seed: 1,
        ..SamplingParams::default()
    };
    let mut s = TokenSampler::new(p.chain(n_vocab, None)?);
    let rounds = 200;
    let t = Instant::now();
    for _ in 0..rounds {
        let id = s.sample(&l)?;
        s.accept(id, true)?;
    }
    Ok(t.elapsed().as_secs_f64() / rounds as f64)
}

/// Mean and worst time per token to compute the mask and apply it to a
/// whole vocabulary's candidates, following `text`.
fn mask_cost(
    vocab: &GrammarVocab,
    t: &Tokenizer,
    source: &GrammarSource,
    text: &str,
) -> Res<(f64, f64)> {
    let mut g = vocab.compile(source)?;
    let ids = t.encode(text, false, false)?;
    let l = logits(t.n_vocab());
    let mut c = Candidates::default();
    let (mut total, mut worst) = (0.0f64, 0.0f64);
    for &id in &ids {
        c.fill(&l);
        let s = Instant::now();
        g.apply(&mut c)?;
        let dt = s.elapsed().as_secs_f64();
        if !c.data[id as usize].logit.is_finite() {
            return Err(format!("the grammar refused token {id} of its own text").into());
        }
        g.accept(id)?;
        total += dt;
        worst = worst.max(dt);
    }
    Ok((total / ids.len().max(1) as f64, worst))
}

fn main() -> Res<()> {
    let args: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    let paths = if args.is_empty() {
        default_paths()
    } else {
        args
    };
    let gbnf = std::env::var_os("GGRAPH_LLAMA_CPP_SOURCE")
        .map(|s| PathBuf::from(s).join("grammars/json.gbnf"))
        .and_then(|p| std::fs::read_to_string(p).ok());
    println!(
        "| vocabulary | tokens | chain/token | vocab index | schema mask mean | max | json.gbnf mean | max |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for path in &paths {
        let file = match ModelFile::open_header(path, None) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("sampling_bench: {}: {e}: skipped", path.display());
                continue;
            }
        };
        let t = Tokenizer::from_header(file.header())?;
        let n = t.n_vocab();
        let chain = chain_cost(n)?;
        let s = Instant::now();
        let vocab = GrammarVocab::new(&t)?;
        let index = s.elapsed().as_secs_f64();
        let (sm, sw) = mask_cost(&vocab, &t, &GrammarSource::JsonSchema(schema()), JSON_TEXT)?;
        let (gm, gw) = match &gbnf {
            Some(g) => {
                let (m, w) = mask_cost(&vocab, &t, &GrammarSource::Gbnf(g.clone()), JSON_TEXT)?;
                (format!("{:.3} ms", m * 1e3), format!("{:.3} ms", w * 1e3))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {} | {n} | {:.3} ms | {:.2} s | {:.3} ms | {:.3} ms | {gm} | {gw} |",
            path.file_name().map_or_else(
                || path.display().to_string(),
                |f| f.to_string_lossy().into_owned()
            ),
            chain * 1e3,
            index,
            sm * 1e3,
            sw * 1e3
        );
    }
    // generation with and without the schema, SmolLM2 Q8_0
    let Some(smol) = paths
        .first()
        .map(|p| p.with_file_name("Q8_0.gguf"))
        .filter(|p| p.is_file())
    else {
        return Ok(());
    };
    let model = runner::load_on_host(&smol.to_string_lossy())?;
    let t = model.tokenizer()?;
    let question = "Describe a famous scientist as JSON with name, age, colors and notes.";
    let prompt_text = model
        .chat_template(&t)?
        .render(&[ChatMessage::new("user", question)], true)?;
    let prompt = t.encode(&prompt_text, true, true)?;
    let vocab = GrammarVocab::new(&t)?;
    println!("\n| SmolLM2 Q8_0, 128 tokens at most | tokens | generation tokens/s |");
    println!("|---|---|---|");
    for constrained in [false, true] {
        let mut rates = Vec::new();
        let mut made = 0;
        for seed in 1..=3u32 {
            let p = SamplingParams {
                seed,
                ..SamplingParams::default()
            };
            let chain = p.chain(t.n_vocab(), Some(&t))?;
            let mut sampler = if constrained {
                let g = vocab.compile(&GrammarSource::JsonSchema(schema()))?;
                TokenSampler::constrained(chain, Box::new(g))
            } else {
                TokenSampler::new(chain)
            };
            let params = ContextParams {
                n_ctx: 1024,
                ..ContextParams::default()
            };
            let mut ctx = Context::new(model.clone(), params)?;
            let req = Request {
                n_predict: 128,
                ignore_eos: !constrained,
                ..Request::default()
            };
            let g = generation::generate(
                &mut ctx,
                &prompt,
                &mut sampler,
                Some(&t),
                &req,
                Hooks::default(),
            )?;
            made += g.generated.len();
            rates.push(g.gen_tokens_per_s());
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "| {} | {} | {:.1} |",
            if constrained {
                "JSON schema"
            } else {
                "unconstrained"
            },
            made / 3,
            rates[1]
        );
    }
    Ok(())
}
