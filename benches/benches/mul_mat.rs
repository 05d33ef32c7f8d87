//! Criterion benches of the CPU backend's mul_mat, per weight type and
//! column count, for the shapes of the CPU speed issue (weights m x k =
//! 4096 x 14336, f32 activations). Throughput is reported in elements/s
//! where one element is one floating-point operation, so `Gelem/s` reads
//! as GFLOP/s; ggml-cpu's figure for the same cell is printed before each
//! group. `cargo run --release -p ggraph-benches --bin cpu_mul_mat` prints
//! the same comparison as one table.
//!
//! Run: cargo bench -p ggraph-benches --bench mul_mat [-- FILTER]
//! Threads: 2 (as the peers' figures), or GGRAPH_BENCH_THREADS.

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ggraph_benches::cpu_timing::{values, weight_bytes};
use ggraph_core::backend::Device;
use ggraph_core::ir::GraphBuilder;
use ggraph_core::{DType, exec};
use ggraph_cpu::CpuDevice;

const M: usize = 4096;
const K: usize = 14336;

/// ggml-cpu's GFLOP/s (n = 1, 8, 512) measured on this kind of machine,
/// 2 threads (`ggraph_benches::peers`).
fn ggml(dtype: DType, n: usize) -> Option<f64> {
    ggraph_benches::peers::measured_here().mul_mat(dtype, n)
}

fn mul_mat(c: &mut Criterion) {
    let threads = std::env::var("GGRAPH_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let dev: Arc<dyn Device> = CpuDevice::with_threads(threads).unwrap();
    for dtype in DType::FLOATS.into_iter().chain(DType::QUANTIZED) {
        let mut group = c.benchmark_group(format!("mul_mat_{}", dtype.name()));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        let weights = weight_bytes(dtype, M, K).unwrap();
        for n in [1usize, 8, 512] {
            let mut b = GraphBuilder::new();
            let w = b.weight("w", dtype, &[K, M]).unwrap();
            let x = b.input("x", DType::F32, &[K, n]).unwrap();
            let y = b.mul_mat(w, x).unwrap();
            b.set_output(y).unwrap();
            let mut graph = b.build();
            exec::alloc_one_buffer(&mut graph, &dev.buffer_type()).unwrap();
            graph.write_bytes(w, &weights).unwrap();
            graph.write_f32(x, &values(K * n, 11)).unwrap();
            let mut stream = dev.new_stream().unwrap();
            let nodes = [y];
            if let Some(p) = ggml(dtype, n) {
                println!(
                    "mul_mat_{}/n={n}: ggml-cpu {p} GFLOP/s ({threads} threads)",
                    dtype.name()
                );
            }
            group.throughput(Throughput::Elements((2 * M * K * n) as u64));
            group.bench_function(BenchmarkId::new("n", n), |bench| {
                bench.iter(|| stream.compute(&graph, &nodes).unwrap())
            });
        }
        group.finish();
    }
}

criterion_group!(benches, mul_mat);
criterion_main!(benches);
