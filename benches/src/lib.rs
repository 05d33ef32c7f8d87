//! Shared pieces of the bench programs: timing and the model graphs the
//! peers were measured on.

use std::time::Instant;

pub mod cpu_timing;
pub mod ggml_mul_mat;
pub mod llama_bench;
pub mod peers;

use ggraph_core::alloc::VirtualBufferType;
use ggraph_core::backend::BufferType;
use ggraph_core::ir::{Graph, TensorData};
use ggraph_core::{DType, Result};
use ggraph_model::arch::{
    Attention, BuildShape, FreshWeights, ModelConfig, ModelGraph, build_graph,
};
use ggraph_model::kv::{FreshCache, KvLayout};

/// Median of `runs` timings of `f`, in microseconds.
pub fn median_us(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// The llama-3-8B-shaped graph of the allocator and scheduler issues: 32
/// layers, 512 tokens in the ubatch, 4096 KV cells (f16), standard
/// attention, f32 activations, weights of `weights` type.
pub fn llama8b_graph(
    weights: DType,
    attention: Attention,
    mask_type: DType,
) -> Result<(ModelConfig, BuildShape, ModelGraph)> {
    let config = ModelConfig::llama3_8b(32);
    let kv = KvLayout {
        kv_size: 4096,
        k_type: DType::F16,
        v_type: DType::F16,
    };
    let mut shape = BuildShape::cached(512, 512, 4096, attention, kv);
    shape.mask_type = mask_type;
    let lg = build_graph(
        &config,
        &shape,
        &mut FreshWeights { dtype: weights },
        &mut FreshCache,
    )?;
    Ok((config, shape, lg))
}

/// Binds the KV cache tensors of a llama graph to virtual memory named
/// `buft_name` (a dry run: the cache is "already placed", as a model
/// runner's cache would be).
pub fn bind_cache_virtual(graph: &mut Graph, lg: &ModelGraph, like: &dyn BufferType) -> Result<()> {
    let vb = VirtualBufferType::like(like);
    for (k, v) in &lg.caches {
        for c in [*k, *v] {
            let size = graph.tensor(c).nbytes() as u64;
            let buffer = vb.alloc(size, ggraph_core::backend::BufferUsage::Compute)?;
            graph.set_data(c, TensorData { buffer, offset: 0 })?;
        }
    }
    Ok(())
}

/// A table row: label, ours, peer's.
pub fn row(label: &str, ours: String, peer: String) {
    println!("{label:<34} {ours:>16} {peer:>16}");
}

/// The value after `--name` on the command line, if any.
pub fn arg_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The number after `--name`, or `default` when it is missing or not a
/// number.
pub fn arg_usize(args: &[String], name: &str, default: usize) -> usize {
    arg_value(args, name)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
