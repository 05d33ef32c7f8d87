//! Per-op cost of small mat-vecs on the CPU stream: a graph of 64
//! chained 512 x 512 Q4_0 products (one column), timed per graph run.
//! With `--m M` the products alternate between M x K and K x M weights
//! (as a feed-forward block's up and down projections). With `--op
//! rms_norm` the chain is of rms_norms of one K-long row instead (a
//! generation step's norms).
//!
//! Run: cargo run --release -p ggraph-benches --bin op_overhead
//!      [-- --threads N --k K --m M --type T --reps R --op rms_norm]

use std::time::Instant;

use ggraph_core::backend::Device;
use ggraph_core::ir::GraphBuilder;
use ggraph_core::{DType, Result, exec};
use ggraph_cpu::CpuDevice;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str, d: usize| ggraph_benches::arg_usize(&args, name, d);
    let threads = opt("--threads", 2);
    let k = opt("--k", 512);
    let m = opt("--m", k);
    let dtype = ggraph_benches::arg_value(&args, "--type")
        .and_then(DType::from_name)
        .unwrap_or(DType::Q4_0);
    let norms = ggraph_benches::arg_value(&args, "--op") == Some("rms_norm");
    const OPS: usize = 64;
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[k, 1])?;
    let mut y = x;
    let mut ws = Vec::new();
    for i in 0..OPS {
        if norms {
            y = b.rms_norm(y, 1e-5)?;
            continue;
        }
        let (rows, len) = if i % 2 == 0 { (m, k) } else { (k, m) };
        let w = b.weight(&format!("w{i}"), dtype, &[len, rows])?;
        ws.push(w);
        y = b.mul_mat(w, y)?;
    }
    b.set_output(y)?;
    let mut g = b.build();
    let cpu = CpuDevice::with_threads(threads)?;
    let _mem = exec::alloc_one_buffer(&mut g, &cpu.buffer_type())?;
    let vals: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    for &w in &ws {
        g.write_f32(w, &vals)?;
    }
    g.write_f32(x, &vals[..k])?;
    let mut stream = cpu.new_stream()?;
    for _ in 0..20 {
        stream.compute(&g, g.nodes())?;
    }
    let reps = opt("--reps", 200);
    let t = Instant::now();
    for _ in 0..reps {
        stream.compute(&g, g.nodes())?;
    }
    let per_op = t.elapsed().as_secs_f64() * 1e6 / (reps * OPS) as f64;
    if norms {
        println!("rms_norm of {k} values, {threads} thread(s): {per_op:.2} µs per op");
        return Ok(());
    }
    // the mean weight bytes of the two shapes
    let bytes = (dtype.row_size(k).unwrap_or(0) * m + dtype.row_size(m).unwrap_or(0) * k) / 2;
    let shape = if m == k {
        format!("{k}x{k}")
    } else {
        format!("{m}x{k} and {k}x{m}")
    };
    println!(
        "{dtype} {shape} n=1, {threads} thread(s): {per_op:.2} µs per op, {:.1} GB/s",
        bytes as f64 / per_op / 1e3
    );
    Ok(())
}
