//! What a model costs on GPUs one does not have: the exact memory per
//! device (weights, KV cache, compute) of a placement, by a dry run of
//! the real loader, cache and allocator on simulated GPUs, then the most
//! layers and context that fit when the GPUs are too small. The figures
//! come from the library (`ggraph::model::estimate::exact`), not the CLI.
//!
//! Run: cargo run --release -p ggraph-examples --example memory_plan [-- MODEL.gguf]
//! (without a model: the llama-3-8B shape in Q4_K; only the header is
//! read, the weights are never loaded)

use std::sync::Arc;

use ggraph::DType;
use ggraph::backend::Device;
use ggraph::context::ContextParams;
use ggraph::model::arch::ModelConfig;
use ggraph::model::desc::ModelDesc;
use ggraph::model::estimate::exact::{ExactEstimate, FitRequest, exact_estimate, fit};
use ggraph::model::gguf::ModelFile;
use ggraph::model::placement::PlacementOptions;
use ggraph::util::format_bytes;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

fn print(title: &str, e: &ExactEstimate) {
    println!(
        "{title}: {} layers on GPUs, context {}, {} splits",
        e.n_gpu_layers, e.n_ctx, e.splits
    );
    println!(
        "  {:<8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "device", "weights", "kv", "compute", "total", "free"
    );
    for d in &e.devices {
        println!(
            "  {:<8} {:>10} {:>10} {:>10} {:>10} {:>10}",
            d.name,
            format_bytes(d.weights),
            format_bytes(d.kv),
            format_bytes(d.compute),
            format_bytes(d.total()),
            format_bytes(d.free)
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let desc = match std::env::args().nth(1) {
        Some(path) => ModelDesc::from_header(ModelFile::open(&path)?.header(), None)?,
        None => ModelDesc::random(ModelConfig::llama3_8b(32), DType::Q4_K, 0)?.without_data(),
    };
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let gpus = |free: &[u64]| -> Vec<Arc<dyn Device>> {
        free.iter()
            .enumerate()
            .map(|(i, &b)| SimDevice::new(i, SimConfig::gpu(b)) as Arc<dyn Device>)
            .collect()
    };
    let params = ContextParams {
        n_ctx: 8192,
        ..ContextParams::default()
    };

    // every layer over two 24 GiB GPUs, by layers (the default)
    let big = gpus(&[24 << 30, 24 << 30]);
    let e = exact_estimate(
        &desc,
        &big,
        cpu.clone(),
        &PlacementOptions::default(),
        &params,
    )?;
    print("two 24 GiB GPUs", &e);

    // the same on two 1.5 GiB GPUs: the most layers (then the largest
    // context down to 2048) that fit with 256 MiB to spare on each
    let small = gpus(&[3 << 29, 3 << 29]);
    let req = FitRequest {
        margin: 256 << 20,
        layers_fixed: false,
        fit_ctx: true,
        min_ctx: 2048,
    };
    let f = fit(
        &desc,
        &small,
        cpu,
        &PlacementOptions::default(),
        &params,
        req,
    )?;
    print("\ntwo 1.5 GiB GPUs, fitted", &f.estimate);
    println!("  why: {}", f.reason);
    for d in &f.estimate.devices[1..] {
        assert!(d.total() + (256 << 20) <= d.free, "{} does not fit", d.name);
    }
    Ok(())
}
