//! A model runner in a few lines: load a GGUF (or make a random model),
//! tokenise a prompt, decode it into the KV cache, then pick the most
//! likely token, print its text as it comes and decode it, until an
//! end-of-generation token or 32 tokens.
//!
//! Run: cargo run --release -p ggraph --example minimal_runner [-- MODEL.gguf "PROMPT"]
//! (without a model: a random-weight one, whose text is noise)

use std::io::Write;
use std::sync::Arc;

use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::model::tokenizer::StreamDecoder;
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
    let mut ctx = Context::new(
        Arc::new(model),
        ContextParams {
            n_ctx: 512,
            ..ContextParams::default()
        },
    )?;

    let ids = tokenizer.encode(prompt, true, true)?;
    print!("{prompt}");
    ctx.decode(&Batch::tokens(&ids))?;
    let mut text = StreamDecoder::new();
    for _ in 0..32 {
        let next = runner::argmax(ctx.logits());
        if tokenizer.is_eog(next) {
            break;
        }
        // a character is printed once all its bytes are there
        print!("{}", text.push(tokenizer.piece(next, false)?));
        std::io::stdout().flush()?;
        ctx.decode(&Batch::tokens(&[next]))?;
    }
    println!("{}", text.finish());
    Ok(())
}
