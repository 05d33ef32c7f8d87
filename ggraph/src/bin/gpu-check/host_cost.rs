//! The host's side of the llama runner on a GPU: the decode loop on a
//! device whose kernels compute nothing (`EmuRuntime::null`), so that what
//! is timed is the scheduler, the allocator, the op dispatch and the
//! launches alone. It needs no GPU: every session can keep the figure low
//! (issue 57's target: under 0.3 ms a token for the small model).

use std::sync::Arc;

use ggraph::backend::Device;
use ggraph::model::arch::Attention;
use ggraph::model::context::{Context, ContextParams};
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::{DType, Error, Result, runner};
use ggraph_gpu::GpuDevice;
use ggraph_gpu::emulator::EmuRuntime;

use crate::bench::figure;

/// The table: one row per shape and weight type, every layer on the null
/// device. `false` when a row failed (its error is printed in its place).
pub fn table(shapes: &[String], types: &[DType], generation: usize) -> bool {
    println!(
        "\nhost cost of generation, every layer on a device whose kernels compute nothing ({generation} tokens; microseconds a token for the decode loop with sampling, scheduling, dispatch and launches; the runtime calls a token makes):"
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "model", "us/token", "us/launch", "launches", "copies", "syncs", "events"
    );
    let mut ok = true;
    for shape in shapes {
        for &w in types {
            let label = format!("{shape} {w}");
            match row(shape, w, generation) {
                Ok(line) => println!("{label:<14} {line}"),
                Err(e) => {
                    ok = false;
                    println!("{label:<14} FAILED: {e}");
                }
            }
        }
    }
    ok
}

fn row(shape: &str, w: DType, generation: usize) -> Result<String> {
    let rt = EmuRuntime::null(0, 1 << 40);
    let gpu: Arc<dyn Device> = GpuDevice::new(rt.clone(), "emu");
    let desc = runner::random_model(shape, w, 1)?;
    let model = Arc::new(Model::load(
        &desc,
        std::slice::from_ref(&gpu),
        ggraph_cpu::CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )?);
    let n_vocab = model.config.n_vocab;
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx: generation + 2,
            n_batch: 1,
            n_ubatch: 1,
            attention: Attention::Flash,
            ..ContextParams::default()
        },
    )?;
    let failed = |e| Error::InvalidArgument(format!("{e}"));
    let first = runner::random_prompt(1, n_vocab, 9);
    // the first decodes build and reserve what the later ones reuse
    runner::generate(&mut ctx, &first, 2).map_err(failed)?;
    ctx.clear_cache();
    let before = rt.calls();
    let run = runner::generate(&mut ctx, &first, generation + 1).map_err(failed)?;
    let calls = rt.calls() - before;
    // every decode: the prompt's token and each generated one but the last
    let decodes = run.generated.len().max(1) as f64;
    let per_token = |n: u64| figure(n as f64 / decodes);
    let us = 1e6 / run.gen_tokens_per_s().max(1e-9);
    let launches = calls.launches as f64 / decodes;
    Ok(format!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        figure(us),
        figure(us / launches.max(1.0)),
        per_token(calls.launches),
        per_token(calls.copies),
        per_token(calls.syncs),
        per_token(calls.events)
    ))
}
