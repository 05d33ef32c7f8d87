//! Scheduler bench: the llama-3-8B-shaped graph (32 layers, 512 tokens,
//! 4096 KV cells, standard attention) with the weights and KV cache of the
//! last 16 layers on a GPU-class device and the rest on the CPU, next to
//! ggml's scheduler on the same graph on this machine. A dry run: weights,
//! cache and compute memory are virtual, so it plans what a real run would.
//!
//! Run: cargo run --release -p ggraph-benches --bin sched_bench

use std::sync::Arc;
use std::time::Instant;

use ggraph_benches::{llama8b_graph, peers, row};
use ggraph_core::DType;
use ggraph_core::alloc::{VirtualBufferType, bind_graph_weights_by};
use ggraph_core::backend::{BufferType, BufferUsage, Device, DevicePerf};
use ggraph_core::ir::{Graph, TensorData};
use ggraph_core::sched::{BackendSpec, HostPerf, OffloadPolicy, SchedConfig, Scheduler};
use ggraph_core::util::format_bytes;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{Attention, ModelConfig};

struct Case {
    label: &'static str,
    gpu_layers_from: usize,
    op_offload: bool,
    policy: OffloadPolicy,
    gpu_perf: Option<DevicePerf>,
    cpu_only: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ggraph_core::Result<()> {
    let (_, _, lg) = llama8b_graph(DType::Q4_0, Attention::Standard, DType::F32)?;
    let n_layer = 32;
    let lavapipe = DevicePerf {
        link_bytes_per_s: 10e9,
        flops_per_s: 7e9,
        mem_bytes_per_s: 20e9,
    };
    let cases = [
        Case {
            label: "layers 16-31 on GPU, op offload off",
            gpu_layers_from: 16,
            op_offload: false,
            policy: OffloadPolicy::Device,
            gpu_perf: None,
            cpu_only: false,
        },
        Case {
            label: "layers 16-31 on GPU, op offload on (batch rule)",
            gpu_layers_from: 16,
            op_offload: true,
            policy: OffloadPolicy::Device,
            gpu_perf: None,
            cpu_only: false,
        },
        Case {
            label: "layers 16-31 on a lavapipe-speed GPU, cost model",
            gpu_layers_from: 16,
            op_offload: true,
            policy: OffloadPolicy::CostModel(HostPerf::default()),
            gpu_perf: Some(lavapipe),
            cpu_only: false,
        },
        Case {
            label: "no layer on GPU, op offload on (batch rule)",
            gpu_layers_from: n_layer + 1,
            op_offload: true,
            policy: OffloadPolicy::Device,
            gpu_perf: None,
            cpu_only: false,
        },
        Case {
            label: "CPU only",
            gpu_layers_from: n_layer + 1,
            op_offload: false,
            policy: OffloadPolicy::Device,
            gpu_perf: None,
            cpu_only: true,
        },
    ];
    println!(
        "scheduler, llama-3-8B shape: 32 layers, 512 tokens, 4096 KV cells, standard attention, Q4_0 weights"
    );
    println!(
        "ggml: its scheduler with lavapipe holding layers 16-31 (attention falls back to the CPU there: 256 MiB scores > 128 MiB binding)"
    );
    println!("ggraph: a simulated GPU (dry run, virtual memory); it runs attention itself\n");
    for case in cases {
        let cpu: Arc<dyn Device> = CpuDevice::new();
        let mut sim_config = SimConfig::gpu(80 << 30);
        if let Some(p) = case.gpu_perf {
            sim_config = sim_config.perf(p);
        }
        let sim: Arc<dyn Device> = SimDevice::new(0, sim_config);
        let cpu_v: Arc<dyn BufferType> = VirtualBufferType::like(cpu.buffer_type().as_ref());
        let sim_v: Arc<dyn BufferType> = VirtualBufferType::like(sim.buffer_type().as_ref());
        let on_gpu = |layer: Option<usize>| {
            !case.cpu_only && layer.unwrap_or(n_layer) >= case.gpu_layers_from
        };
        let mut graph: Graph = lg.graph.clone();
        bind_graph_weights_by(&mut graph, |_, name| {
            let layer = ModelConfig::layer_of(name).or(if name.starts_with("token_embd") {
                Some(0)
            } else {
                None
            });
            if on_gpu(layer) {
                sim_v.clone()
            } else {
                cpu_v.clone()
            }
        })?;
        for (layer, (k, v)) in lg.caches.iter().enumerate() {
            for c in [*k, *v] {
                let bt = if on_gpu(Some(layer)) { &sim_v } else { &cpu_v };
                let buffer = bt.alloc(graph.tensor(c).nbytes() as u64, BufferUsage::Compute)?;
                graph.set_data(c, TensorData { buffer, offset: 0 })?;
            }
        }
        let specs = if case.cpu_only {
            vec![BackendSpec::new(cpu.clone())]
        } else {
            vec![
                BackendSpec::new(sim.clone()).op_offload(case.op_offload),
                BackendSpec::new(cpu.clone()),
            ]
        };
        let config = SchedConfig {
            dry_run: true,
            offload_policy: case.policy.clone(),
            ..SchedConfig::default()
        };
        let mut sched = Scheduler::new(specs, config)?;
        sched.reserve(graph.clone())?;
        let mut split_t = Vec::new();
        let mut alloc_t = Vec::new();
        let mut alloc_after_split_t = Vec::new();
        let mut reserve_t = Vec::new();
        // the scheduler takes its graph by value: clones are made untimed
        for _ in 0..20 {
            let g = graph.clone();
            let t = Instant::now();
            sched.split_graph(g)?;
            split_t.push(t.elapsed().as_secs_f64() * 1e6);
            let g = graph.clone();
            let t = Instant::now();
            sched.alloc_graph(g)?;
            let whole = t.elapsed().as_secs_f64() * 1e6;
            alloc_t.push(whole);
            alloc_after_split_t.push(whole - split_t.last().copied().unwrap_or(0.0));
            let g = graph.clone();
            let t = Instant::now();
            sched.reserve(g)?;
            reserve_t.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let stats = sched.stats();
        let bytes = sched.compute_buffer_bytes();
        println!("-- {}", case.label);
        println!("{:<34} {:>16} {:>16}", "", "ggraph", "ggml");
        // ggml's figures for this case (docs/performance.md); with no
        // layers offloaded the issue gave only the split count
        let no_layers = case.gpu_layers_from > n_layer && !case.cpu_only;
        let peer = if case.cpu_only {
            Some(peers::sched("CPU only"))
        } else if no_layers {
            None
        } else if case.op_offload && matches!(case.policy, OffloadPolicy::Device) {
            Some(peers::sched("op offload on"))
        } else {
            Some(peers::sched("op offload off"))
        };
        let dash = || "-".to_string();
        let ggml_splits = if no_layers {
            peers::sched("no layers, op offload on").splits.to_string()
        } else {
            peer.map_or_else(dash, |p| p.splits.to_string())
        };
        row("splits", stats.splits.to_string(), ggml_splits);
        row(
            "split inputs (copies per run)",
            stats.copies.to_string(),
            peer.and_then(|p| p.split_inputs)
                .map_or_else(dash, |v| v.to_string()),
        );
        let bytes_per_run: u64 = sched.splits().iter().map(|s| s.bytes_copied()).sum();
        row("bytes copied per run", format_bytes(bytes_per_run), dash());
        for (b, by) in bytes.iter().enumerate() {
            let name = sched
                .device(ggraph_core::sched::BackendId(b as u16))
                .name()
                .to_string();
            let peer_mib = match (name.as_str(), &peer) {
                ("CPU", Some(p)) => p.cpu_compute_mib,
                (_, Some(p)) => p.gpu_compute_mib,
                _ => None,
            };
            row(
                &format!("compute buffer {name}"),
                format_bytes(*by),
                peer_mib.map_or_else(dash, |m| format!("{m:.2} MiB")),
            );
        }
        let t = sched.pass_timings();
        println!(
            "   passes (last run): weights location {:.1} µs, expansion {:.1} µs, upgrade {:.1} µs, copy insertion {:.1} µs",
            t.weights_location.as_secs_f64() * 1e6,
            t.expansion.as_secs_f64() * 1e6,
            t.upgrade.as_secs_f64() * 1e6,
            t.copy_insertion.as_secs_f64() * 1e6
        );
        row(
            "split pass (median)",
            format!("{:.1} µs", median(split_t)),
            dash(),
        );
        // ggml_backend_sched_alloc_graph splits the graph too: the whole
        // call is what compares
        row(
            "alloc_graph = split + alloc (median)",
            format!("{:.1} µs", median(alloc_t)),
            peer.and_then(|p| p.alloc_graph_us)
                .map_or_else(dash, |v| format!("{v:.0} µs")),
        );
        row(
            "  of which after the split (median)",
            format!("{:.1} µs", median(alloc_after_split_t)),
            dash(),
        );
        row(
            "reserve = split + plan (median)",
            format!("{:.1} µs", median(reserve_t)),
            peer.and_then(|p| p.reserve_us)
                .map_or_else(dash, |v| format!("{v:.0} µs")),
        );
        println!();
    }
    Ok(())
}
