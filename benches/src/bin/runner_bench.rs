//! The llama runner on the CPU: prompt (512 tokens) and generation (128
//! tokens) tokens/s for random-weight llama models, next to llama.cpp on
//! the same shapes on this machine (2 threads).
//!
//! Run: cargo run --release -p ggraph-benches --bin runner_bench [-- --big]
//! (`--big` adds the 4-layer llama-3-8B-shaped model: ~4 GB of weights).

use std::sync::Arc;

use ggraph::backend::Device;
use ggraph::context::{Context, ContextParams};
use ggraph::model::llama::Attention;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::{DType, runner};
use ggraph_cpu::CpuDevice;

/// llama.cpp on this machine, 2 threads, prompt 512 / generation 128
/// tokens/s (from the CPU performance issue).
const LLAMA_CPP_SMALL: [(DType, f64, f64); 4] = [
    (DType::F32, 4518.0, 279.0),
    (DType::F16, 5476.0, 514.0),
    (DType::Q8_0, 4559.0, 741.0),
    (DType::Q4_0, 7151.0, 1188.0),
];
const LLAMA_CPP_8B_4L: [(DType, f64, f64); 2] =
    [(DType::F16, 274.0, 15.8), (DType::Q4_0, 397.0, 45.3)];

fn run(
    shape: &str,
    weights: DType,
    n_prompt: usize,
    n_gen: usize,
) -> ggraph::Result<runner::Generation> {
    let desc = runner::random_model(shape, weights, 1)?;
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let model = Model::load(
        &desc,
        &[],
        cpu,
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )?;
    let params = ContextParams {
        n_ctx: n_prompt + n_gen + 64,
        n_batch: n_prompt,
        n_ubatch: n_prompt,
        attention: Attention::Flash,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::new(model), params)?;
    let prompt = runner::random_prompt(n_prompt, desc.config.n_vocab, 7);
    runner::generate(&mut ctx, &prompt, n_gen)
        .map_err(|e| ggraph::Error::InvalidArgument(e.to_string()))
}

fn main() -> ggraph::Result<()> {
    let big = std::env::args().any(|a| a == "--big");
    println!(
        "llama runner on the CPU ({} threads), prompt 512 / generation 128 tokens/s",
        rayon_threads()
    );
    println!(
        "{:<22} {:>12} {:>12} {:>12} {:>12}",
        "model", "ggraph pp", "llama.cpp pp", "ggraph tg", "llama.cpp tg"
    );
    let mut rows: Vec<(&str, DType, f64, f64)> = LLAMA_CPP_SMALL
        .iter()
        .map(|&(t, p, g)| ("small", t, p, g))
        .collect();
    if big {
        rows.extend(LLAMA_CPP_8B_4L.iter().map(|&(t, p, g)| ("8b-4l", t, p, g)));
    }
    for (shape, t, pp, tg) in rows {
        let g = run(shape, t, 512, 128)?;
        println!(
            "{:<22} {:>12.1} {:>12.1} {:>12.1} {:>12.1}",
            format!("{shape} {t}"),
            g.prompt_tokens_per_s(),
            pp,
            g.gen_tokens_per_s(),
            tg
        );
    }
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
