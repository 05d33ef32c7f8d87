//! Generation attention on the CPU stream: a graph of `--layers` chained
//! flash_attn_ext ops with one query each, over F16 K/V caches of `--kv`
//! cells laid out as the llama runner's (heads side by side in a cache
//! row), timed per op. `--cold` streams 64 MiB between runs, as the weights
//! of a model do between two tokens.
//!
//! Run: cargo run --release -p ggraph-benches --bin attn_decode
//! [-- --threads N --kv N --heads N --kv-heads N --d N --layers N --cold]

use std::time::Instant;

use ggraph_core::backend::Device;
use ggraph_core::ir::GraphBuilder;
use ggraph_core::{DType, Result, exec};
use ggraph_cpu::CpuDevice;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str, d: usize| ggraph_benches::arg_usize(&args, name, d);
    let threads = opt("--threads", 2);
    let n_kv = opt("--kv", 130);
    let n_head = opt("--heads", 8);
    let n_head_kv = opt("--kv-heads", n_head);
    let d = opt("--d", 64);
    let layers = opt("--layers", 8);
    let cold = args.iter().any(|a| a == "--cold");

    let mut b = GraphBuilder::new();
    let x = b.input("q", DType::F32, &[d, n_head, 1])?;
    let mask = b.input("mask", DType::F16, &[n_kv, 1])?;
    let mut caches = Vec::new();
    let mut y = x;
    for l in 0..layers {
        let k = b.weight(&format!("k{l}"), DType::F16, &[d, n_head_kv, n_kv])?;
        let v = b.weight(&format!("v{l}"), DType::F16, &[d, n_head_kv, n_kv])?;
        caches.extend([k, v]);
        let kp = b.permute(k, [0, 2, 1, 3])?;
        let vp = b.permute(v, [0, 2, 1, 3])?;
        let qp = b.permute(y, [0, 2, 1, 3])?;
        y = b.flash_attn_ext(qp, kp, vp, Some(mask), 1.0 / (d as f32).sqrt(), 0.0, 0.0)?;
    }
    b.set_output(y)?;
    let mut g = b.build();
    let cpu = CpuDevice::with_threads(threads)?;
    let _mem = exec::alloc_one_buffer(&mut g, &cpu.buffer_type())?;
    let cache: Vec<f32> = (0..d * n_head_kv * n_kv)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    for &t in &caches {
        g.write_f32(t, &cache)?;
    }
    g.write_f32(x, &cache[..d * n_head])?;
    g.write_f32(mask, &vec![0.0; n_kv])?;
    let mut stream = cpu.new_stream()?;
    let mut sweep = vec![0u8; if cold { 64 << 20 } else { 0 }];
    let mut run = |stream: &mut Box<dyn ggraph_core::backend::Stream>| -> Result<f64> {
        for (i, x) in sweep.iter_mut().enumerate().step_by(64) {
            *x = x.wrapping_add(i as u8);
        }
        let t = Instant::now();
        stream.compute(&g, g.nodes())?;
        Ok(t.elapsed().as_secs_f64())
    };
    for _ in 0..20 {
        run(&mut stream)?;
    }
    let reps = if cold { 100 } else { 1000 };
    let mut total = 0.0;
    for _ in 0..reps {
        total += run(&mut stream)?;
    }
    let per_op = total * 1e6 / (reps * layers) as f64;
    println!(
        "flash_attn_ext decode: {n_head} heads ({n_head_kv} KV) x d {d}, {n_kv} F16 cells, \
         {threads} thread(s){}: {per_op:.2} µs per op",
        if cold { ", cold cache" } else { "" }
    );
    Ok(())
}
