//! A small graph placed over the CPU and two simulated GPUs: once by the
//! scheduler alone, once with a node pinned by hand. Prints why every
//! node runs where it runs, writes the DOT file, and checks the result
//! against the graph run on the CPU alone.
//!
//! Run: cargo run -p ggraph-examples --example graph_on_devices [-- OUT.dot]

use std::sync::Arc;

use ggraph::alloc::bind_graph_weights_by;
use ggraph::backend::Device;
use ggraph::ir::{Graph, GraphBuilder, OpKind, TensorId};
use ggraph::sched::{SchedConfig, Scheduler};
use ggraph::{DType, Result};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

/// A two-layer MLP on 8 tokens: out = w2 · silu(w1 · x) + x.
struct Mlp {
    graph: Graph,
    w1: TensorId,
    w2: TensorId,
    x: TensorId,
    hidden: TensorId,
    out: TensorId,
}

fn mlp() -> Result<Mlp> {
    let mut b = GraphBuilder::new();
    let w1 = b.weight("w1", DType::Q8_0, &[64, 256])?;
    let w2 = b.weight("w2", DType::Q8_0, &[256, 64])?;
    let x = b.input("x", DType::F32, &[64, 8])?;
    let up = b.mul_mat(w1, x)?;
    let hidden = b.silu(up)?;
    let down = b.mul_mat(w2, hidden)?;
    let out = b.add(down, x)?;
    b.set_output(out)?;
    Ok(Mlp {
        graph: b.build(),
        w1,
        w2,
        x,
        hidden,
        out,
    })
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 2000) as f32 / 1000.0 - 1.0)
        .collect()
}

/// Binds the weights to `home`'s memory, fills them and the input, runs
/// the graph through `sched` and returns the output.
fn run(mut m: Mlp, home: &Arc<dyn Device>, sched: &mut Scheduler) -> Result<Vec<f32>> {
    let _weights = bind_graph_weights_by(&mut m.graph, |_, _| home.buffer_type())?;
    m.graph.write_f32(m.w1, &values(64 * 256, 1))?;
    m.graph.write_f32(m.w2, &values(256 * 64, 2))?;
    sched.alloc_graph(m.graph)?;
    let g = sched
        .graph()
        .ok_or(ggraph::Error::Unallocated("the graph".into()))?;
    g.write_f32(m.x, &values(64 * 8, 3))?;
    sched.compute()?;
    sched
        .graph()
        .ok_or(ggraph::Error::Unallocated("the graph".into()))?
        .read_f32(m.out)
}

fn main() -> Result<()> {
    let cpu: Arc<dyn Device> = CpuDevice::new();
    // sim:0 has no silu kernel: the scheduler must send silu elsewhere
    let gpu0: Arc<dyn Device> =
        SimDevice::new(0, SimConfig::gpu(64 << 20).unsupported(&[OpKind::Unary]));
    let gpu1: Arc<dyn Device> = SimDevice::new(1, SimConfig::gpu(64 << 20));
    let devices = [gpu0.clone(), gpu1.clone(), cpu.clone()];

    // the reference: everything on the CPU
    let mut alone = Scheduler::with_devices(&[cpu.clone()], SchedConfig::default())?;
    let want = run(mlp()?, &cpu, &mut alone)?;

    // 1. the scheduler alone: the weights live on sim:0, so their ops go
    //    there, and silu, which sim:0 refuses, goes to the next device
    let mut sched = Scheduler::with_devices(&devices, SchedConfig::default())?;
    let got = run(mlp()?, &gpu0, &mut sched)?;
    println!(
        "== scheduled: weights on sim:0, silu refused there\n{}",
        sched.explain()
    );
    check(&got, &want)?;

    // 2. by hand: silu pinned to the CPU; the scheduler places the rest
    let m = mlp()?;
    let hidden = m.hidden;
    let mut sched = Scheduler::with_devices(&devices, SchedConfig::default())?;
    sched.set_tensor_backend(hidden, sched.host())?;
    let got = run(m, &gpu0, &mut sched)?;
    println!("== silu pinned to the CPU by hand\n{}", sched.explain());
    check(&got, &want)?;

    let path = std::env::args()
        .nth(1)
        .filter(|a| a.ends_with(".dot"))
        .unwrap_or_else(|| {
            std::env::temp_dir()
                .join("graph_on_devices.dot")
                .display()
                .to_string()
        });
    std::fs::write(&path, sched.to_dot())?;
    println!("DOT with nodes coloured by device and splits as clusters: {path}");
    println!("(render: dot -Tsvg {path} > graph.svg)");
    Ok(())
}

/// The placed graph computes what the CPU alone does (the same kernels
/// behind the simulated devices, so to the last bit).
fn check(got: &[f32], want: &[f32]) -> Result<()> {
    if got == want {
        println!("output: {} values, equal to the CPU alone\n", got.len());
        Ok(())
    } else {
        Err(ggraph::Error::InvalidArgument(
            "the placed graph differs from the CPU alone".into(),
        ))
    }
}
