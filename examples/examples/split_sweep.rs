//! One model over many placements, for placement studies: whole layers
//! on one or two GPUs, uneven tensor splits, rows across GPUs, part of
//! the layers with op offload on and off, and the devices of
//! `ggml-rpc-server`s when given. For each: the splits of a generation
//! graph, the bytes copied between devices per token and the time per
//! token, next to the greedy tokens (the same everywhere).
//!
//! The GPUs are simulated (`sim:N`: the CPU's kernels behind a device
//! boundary with its own memory), so copies and splits are real while
//! the times are the CPU's.
//!
//! Run: cargo run --release -p ggraph-examples --example split_sweep [-- --rpc HOST:PORT[,...]]

use std::sync::Arc;
use std::time::Instant;

use ggraph::backend::Device;
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::{GpuLayers, PlacementOptions, SplitMode, TensorSplit};
use ggraph::options::rpc_devices;
use ggraph::{DType, runner};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

/// What one placement did.
struct Row {
    splits: usize,
    bytes_per_token: f64,
    ms_per_token: f64,
    tokens: Vec<i32>,
}

fn run(
    desc: &ModelDesc,
    devices: &[Arc<dyn Device>],
    opts: &PlacementOptions,
) -> Result<Row, Box<dyn std::error::Error>> {
    let model = Model::load(desc, devices, CpuDevice::new(), opts, LoadMode::Real, None)?;
    let mut ctx = Context::new(
        Arc::new(model),
        ContextParams {
            n_ctx: 256,
            n_batch: 64,
            n_ubatch: 64,
            ..ContextParams::default()
        },
    )?;
    ctx.decode(&Batch::tokens(&runner::random_prompt(
        32,
        desc.config.n_vocab,
        5,
    )))?;
    let mut tokens = Vec::new();
    let (mut before, mut start) = (0, Instant::now());
    for i in 0..18 {
        // two tokens untimed: the generation graph built and its memory touched
        if i == 2 {
            (before, start) = (ctx.scheduler().stats().bytes_copied, Instant::now());
            tokens.clear();
        }
        let next = runner::argmax(ctx.logits());
        tokens.push(next);
        ctx.decode(&Batch::tokens(&[next]))?;
    }
    let n = tokens.len() as f64;
    Ok(Row {
        splits: ctx.scheduler().stats().splits,
        bytes_per_token: (ctx.scheduler().stats().bytes_copied - before) as f64 / n,
        ms_per_token: start.elapsed().as_secs_f64() * 1e3 / n,
        tokens,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let desc = runner::random_model("small", DType::Q8_0, 3)?;
    let gpu = |i: usize| SimDevice::new(i, SimConfig::gpu(4 << 30)) as Arc<dyn Device>;
    let two = vec![gpu(0), gpu(1)];
    let half = desc.config.n_layer / 2;
    let opts = |layers: GpuLayers, mode: SplitMode, split: Option<Vec<f64>>, offload: bool| {
        PlacementOptions {
            n_gpu_layers: layers,
            split_mode: mode,
            tensor_split: split.map(TensorSplit::Fractions),
            op_offload: offload,
            ..PlacementOptions::default()
        }
    };
    // (name, GPU-class devices, options)
    type Placement = (String, Vec<Arc<dyn Device>>, PlacementOptions);
    let mut placements: Vec<Placement> = vec![
        ("CPU alone".into(), vec![], PlacementOptions::default()),
        (
            "1 GPU, all layers".into(),
            two[..1].to_vec(),
            opts(GpuLayers::All, SplitMode::Layer, None, true),
        ),
        (
            "2 GPUs, layers 1:1".into(),
            two.clone(),
            opts(GpuLayers::All, SplitMode::Layer, Some(vec![1.0, 1.0]), true),
        ),
        (
            "2 GPUs, layers 3:1".into(),
            two.clone(),
            opts(GpuLayers::All, SplitMode::Layer, Some(vec![3.0, 1.0]), true),
        ),
        (
            "2 GPUs, rows".into(),
            two.clone(),
            opts(GpuLayers::All, SplitMode::Row, None, true),
        ),
        (
            format!("1 GPU, {half} layers"),
            two[..1].to_vec(),
            opts(GpuLayers::Count(half), SplitMode::Layer, None, true),
        ),
        (
            format!("1 GPU, {half} layers, no op offload"),
            two[..1].to_vec(),
            opts(GpuLayers::Count(half), SplitMode::Layer, None, false),
        ),
    ];
    let args: Vec<String> = std::env::args().collect();
    if let Some(list) = args
        .iter()
        .position(|a| a == "--rpc")
        .and_then(|i| args.get(i + 1))
    {
        let remote = rpc_devices(list)?;
        placements.push((
            "RPC servers, layers".into(),
            remote.clone(),
            PlacementOptions::default(),
        ));
        placements.push((
            "1 GPU + RPC, layers".into(),
            [two[..1].to_vec(), remote].concat(),
            PlacementOptions::default(),
        ));
    }

    println!(
        "llama small Q8_0, a 32-token prompt, then 2 tokens untimed and 16 timed, one at a time"
    );
    println!(
        "{:<34} {:>6} {:>14} {:>10}  tokens",
        "placement", "splits", "bytes/token", "ms/token"
    );
    let mut first: Option<Vec<i32>> = None;
    for (name, devices, o) in &placements {
        let r = run(&desc, devices, o)?;
        let same = first.get_or_insert(r.tokens.clone()) == &r.tokens;
        println!(
            "{name:<34} {:>6} {:>14.0} {:>10.2}  {}",
            r.splits,
            r.bytes_per_token,
            r.ms_per_token,
            if same { "as the CPU's" } else { "DIFFERENT" }
        );
    }
    Ok(())
}
