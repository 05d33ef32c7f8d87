//! Graph allocator bench: the llama-3-8B-shaped graph (32 layers, 512
//! tokens, 4096 KV cells, standard attention, f32 activations), next to
//! ggml's graph allocator on the same graph on this machine.
//!
//! Run: cargo run --release -p ggraph-benches --bin alloc_bench

use std::sync::Arc;

use ggraph_benches::{bind_cache_virtual, llama8b_graph, median_us, peers, row};
use ggraph_core::DType;
use ggraph_core::alloc::{GraphAllocator, Strategy, liveness};
use ggraph_core::backend::{BufferType, Device};
use ggraph_core::util::format_bytes;
use ggraph_cpu::CpuDevice;
use ggraph_model::arch::Attention;

fn main() -> ggraph_core::Result<()> {
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let bt: Arc<dyn BufferType> = cpu.buffer_type();
    let assign = |_| 0;
    let ggml = peers::alloc();
    println!(
        "graph allocator, llama-3-8B shape: 32 layers, 512 tokens, 4096 KV cells (f16), standard attention, f32 activations"
    );
    println!("machine: {}", cpu.description());
    println!(
        "ggml: its own graph allocator on this graph (f32 mask), figures from the allocator issue (docs/performance.md)\n"
    );
    println!("{:<34} {:>16} {:>16}", "", "ggraph", "ggml");
    for (strategy, mask) in [
        (Strategy::GreedyBySize, DType::F32),
        (Strategy::BestFit, DType::F32),
        (Strategy::GreedyBySize, DType::F16),
    ] {
        let (_, _, lg) = llama8b_graph(DType::Q4_0, Attention::Standard, mask)?;
        let mut graph = lg.graph.clone();
        bind_cache_virtual(&mut graph, &lg, bt.as_ref())?;
        let lower_bound = liveness(&graph, std::slice::from_ref(&bt), &assign)?
            .peak_live_bytes(0, bt.alignment());
        let mut alloc = GraphAllocator::single(bt.clone()).with_strategy(strategy);
        let bytes = alloc.measure(&graph, &assign)?[0];
        alloc.reserve(&graph, &assign)?;
        let warm_reserve = median_us(20, || alloc.reserve(&graph, &assign).expect("reserve"));
        // alloc_graph gets a fresh copy of the graph each time, as a new
        // decode step would build one (the copy is made untimed, just before)
        let mut times: Vec<f64> = (0..20)
            .map(|_| {
                let mut g = graph.clone();
                let t = std::time::Instant::now();
                alloc.alloc_graph(&mut g, &assign).expect("alloc_graph");
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let alloc_graph = times[times.len() / 2];
        let fresh = median_us(20, || {
            let mut a = GraphAllocator::single(bt.clone()).with_strategy(strategy);
            a.reserve(&graph, &assign).expect("reserve");
        });
        let stats = alloc.stats();
        println!("-- placement {strategy:?}, {mask} mask");
        row(
            "nodes",
            graph.nodes().len().to_string(),
            ggml.nodes.to_string(),
        );
        row(
            "compute buffer",
            format_bytes(bytes),
            format_bytes(ggml.compute_bytes),
        );
        row(
            "  live bytes at the busiest node",
            format_bytes(lower_bound),
            "-".into(),
        );
        row(
            "reserve, warm allocator (median)",
            format!("{warm_reserve:.1} µs"),
            format!("{:.0} µs", ggml.reserve_warm_us),
        );
        row(
            "alloc_graph (median)",
            format!("{alloc_graph:.1} µs"),
            format!("{:.0} µs", ggml.alloc_graph_us),
        );
        row(
            "fresh allocator + reserve (median)",
            format!("{fresh:.1} µs"),
            format!("{:.0} µs", ggml.reserve_fresh_us),
        );
        println!(
            "   reallocations {}, plan reuses {}, replans {}, device allocations {}",
            stats.reallocations, stats.plan_reuses, stats.replans, stats.device_allocations
        );
    }
    Ok(())
}
