//! Repeats the scheduler's split pass on the llama-3-8B graph (layers
//! 16-31 on a simulated GPU, or all on the CPU with --cpu-only) for
//! profiling.

use std::sync::Arc;

use ggraph_benches::llama8b_graph;
use ggraph_core::DType;
use ggraph_core::alloc::{VirtualBufferType, bind_graph_weights_by};
use ggraph_core::backend::{BufferType, BufferUsage, Device};
use ggraph_core::ir::TensorData;
use ggraph_core::sched::{BackendSpec, SchedConfig, Scheduler};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{Attention, ModelConfig};

fn main() -> ggraph_core::Result<()> {
    let (_, _, lg) = llama8b_graph(DType::Q4_0, Attention::Standard, DType::F32)?;
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let sim: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(80 << 30));
    let cpu_v: Arc<dyn BufferType> = VirtualBufferType::like(cpu.buffer_type().as_ref());
    let sim_v: Arc<dyn BufferType> = VirtualBufferType::like(sim.buffer_type().as_ref());
    let cpu_only = std::env::args().any(|a| a == "--cpu-only");
    let gpu_from = if cpu_only { usize::MAX } else { 16 };
    let mut graph = lg.graph.clone();
    bind_graph_weights_by(&mut graph, |_, name| {
        if ModelConfig::layer_of(name).unwrap_or(32) >= gpu_from {
            sim_v.clone()
        } else {
            cpu_v.clone()
        }
    })?;
    for (layer, (k, v)) in lg.caches.iter().enumerate() {
        for c in [*k, *v] {
            let bt = if layer >= gpu_from { &sim_v } else { &cpu_v };
            let buffer = bt.alloc(graph.tensor(c).nbytes() as u64, BufferUsage::Compute)?;
            graph.set_data(c, TensorData { buffer, offset: 0 })?;
        }
    }
    let offload = std::env::args().any(|a| a == "--offload");
    let specs = if cpu_only {
        vec![BackendSpec::new(cpu)]
    } else {
        vec![
            BackendSpec::new(sim).op_offload(offload),
            BackendSpec::new(cpu),
        ]
    };
    let mut sched = Scheduler::new(
        specs,
        SchedConfig {
            dry_run: true,
            ..SchedConfig::default()
        },
    )?;
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    for _ in 0..n {
        sched.split_graph(graph.clone())?;
    }
    Ok(())
}
