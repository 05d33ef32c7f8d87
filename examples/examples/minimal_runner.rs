//! A model runner in a few lines: load a GGUF (or make a random model),
//! tokenise a prompt, and generate with llama.cpp's default samplers
//! (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8, a fixed seed),
//! printing the text as it comes, until an end-of-generation token or 32
//! tokens.
//!
//! Run: cargo run --release -p ggraph-examples --example minimal_runner [-- MODEL.gguf "PROMPT"]
//! (without a model: a random-weight one, whose text is noise)

use std::io::Write;
use std::sync::Arc;

use ggraph::context::{Context, ContextParams};
use ggraph::model::generation::{self, Hooks, Request};
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::model::sampling::{SamplingParams, TokenSampler};
use ggraph::options::found_gpus;
use ggraph::{DType, runner};
use ggraph_cpu::CpuDevice;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // (arguments starting with `-` are the test harness's, when cargo test runs this)
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let desc = match args.first() {
        Some(path) => runner::open_model(path)?,
        None => runner::random_model("tiny", DType::Q8_0, 1)?,
    };
    let prompt = args.get(1).map_or("Once upon a time", String::as_str);

    // every layer on the GPUs found (none: all on the CPU)
    let gpus = found_gpus();
    let model = Model::load(
        &desc,
        &gpus,
        CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )?;
    let tokenizer = model.tokenizer()?;
    let n_vocab = model.config.n_vocab;
    let mut ctx = Context::new(
        Arc::new(model),
        ContextParams {
            n_ctx: 512,
            ..ContextParams::default()
        },
    )?;

    // llama.cpp's sampler chain with its defaults; --seed 42
    let params = SamplingParams {
        seed: 42,
        ..SamplingParams::default()
    };
    let mut sampler = TokenSampler::new(params.chain(n_vocab, Some(&tokenizer))?);
    let ids = tokenizer.encode(prompt, true, true)?;
    print!("{prompt}");
    let hooks = Hooks {
        // whole characters, as they are complete
        on_token: Box::new(|token| {
            print!("{}", token.text);
            std::io::stdout().flush().is_ok()
        }),
        ..Hooks::default()
    };
    let request = Request {
        n_predict: 32,
        ..Request::default()
    };
    generation::generate(
        &mut ctx,
        &ids,
        &mut sampler,
        Some(&tokenizer),
        &request,
        hooks,
    )?;
    println!();
    Ok(())
}
