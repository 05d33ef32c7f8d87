//! Repeats the allocator's reserve on the llama-3-8B graph for profiling
//! (perf record -g target/release/alloc_profile).

use std::sync::Arc;

use ggraph_benches::{bind_cache_virtual, llama8b_graph};
use ggraph_core::DType;
use ggraph_core::alloc::{GraphAllocator, Strategy};
use ggraph_core::backend::{BufferType, Device};
use ggraph_cpu::CpuDevice;
use ggraph_model::arch::Attention;

fn main() -> ggraph_core::Result<()> {
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let bt: Arc<dyn BufferType> = cpu.buffer_type();
    let (_, _, lg) = llama8b_graph(DType::Q4_0, Attention::Standard, DType::F32)?;
    let mut graph = lg.graph.clone();
    bind_cache_virtual(&mut graph, &lg, bt.as_ref())?;
    let strategy = if std::env::args().any(|a| a == "--best-fit") {
        Strategy::BestFit
    } else {
        Strategy::GreedyBySize
    };
    let mut alloc = GraphAllocator::single(bt).with_strategy(strategy);
    if std::env::args().any(|a| a == "--alloc-graph") {
        alloc.reserve(&graph, &|_| 0)?;
        for _ in 0..std::env::var("M")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200)
        {
            let mut copies: Vec<_> = (0..100).map(|_| graph.clone()).collect();
            for g in copies.iter_mut() {
                alloc.alloc_graph(g, &|_| 0)?;
            }
        }
    } else {
        for _ in 0..std::env::var("N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20000)
        {
            alloc.reserve(&graph, &|_| 0)?;
        }
    }
    Ok(())
}
