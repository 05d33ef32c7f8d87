//! CPU mul_mat_id bench: GFLOP/s of the CPU backend's expert matmul next
//! to ggml-cpu's on the same machine, for the Qwen3-30B-A3B shape that
//! ggml's `test-backend-ops perf -o MUL_MAT_ID` measures: 128 experts of
//! m x k = 768 x 2048, 8 used per token, one activation row per used
//! expert (`b` = [k, 8, tokens]), each token's experts drawn at random.
//!
//! Run: cargo run --release -p ggraph-benches --bin cpu_mul_mat_id
//!      [-- --threads 2 --n 1,8,512 --types F16,Q4_0]
//!
//! As in ggml's test, the same graph runs again and again, so with few
//! tokens the experts it reads (8 x 768 x 2048 weights for one token)
//! come from the last-level cache.
//!
//! Each weight type the CPU lays out its own way (`CPU_REPACK`) gets a
//! second row, the same experts in that layout.

use std::sync::Arc;
use std::time::Duration;

use ggraph_benches::arg_value;
use ggraph_benches::cpu_timing::{
    Case, find_type, load_average, parse_list, print_memory_bandwidth, time_case, values,
    weight_bytes,
};
use ggraph_benches::peers::{self, MUL_MAT_ID_TOKENS};
use ggraph_core::alloc::bind_graph_weights;
use ggraph_core::backend::{BufferType, Device};
use ggraph_core::ir::GraphBuilder;
use ggraph_core::{DType, Result, exec};
use ggraph_cpu::CpuDevice;

const EXPERTS: usize = 128;
const USED: usize = 8;
const M: usize = 768;
const K: usize = 2048;

/// Every weight type but BF16 (ggml's mul_mat_id cases have none).
fn all_types() -> Vec<DType> {
    [DType::F32, DType::F16]
        .into_iter()
        .chain(DType::QUANTIZED)
        .collect()
}

/// For each of `tokens` tokens, `USED` distinct experts drawn at random.
fn expert_ids(tokens: usize) -> Vec<i32> {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut ids = Vec::with_capacity(tokens * USED);
    for _ in 0..tokens {
        let mut order: Vec<i32> = (0..EXPERTS as i32).collect();
        for i in 0..USED {
            let j = i + (next() % (EXPERTS - i) as u64) as usize;
            order.swap(i, j);
        }
        ids.extend_from_slice(&order[..USED]);
    }
    ids
}

fn build_case(
    dev: &Arc<dyn Device>,
    weight_buft: &Arc<dyn BufferType>,
    dtype: DType,
    tokens: usize,
    experts: &[u8],
) -> Result<Case> {
    let mut b = GraphBuilder::new();
    let w = b.weight("experts", dtype, &[K, M, EXPERTS])?;
    let x = b.input("x", DType::F32, &[K, USED, tokens])?;
    let ids = b.input("ids", DType::I32, &[USED, tokens])?;
    let y = b.mul_mat_id(w, x, ids)?;
    b.set_output(y)?;
    let mut graph = b.build();
    bind_graph_weights(&mut graph, weight_buft)?;
    exec::alloc_one_buffer(&mut graph, &dev.buffer_type())?;
    graph.write_bytes(w, experts)?;
    graph.write_f32(x, &values(K * USED * tokens, 11))?;
    let id_bytes: Vec<u8> = expert_ids(tokens)
        .iter()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    graph.write_bytes(ids, &id_bytes)?;
    Ok(Case { graph, out: y })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| arg_value(&args, name);
    let threads: usize = opt("--threads").and_then(|s| s.parse().ok()).unwrap_or(2);
    let tokens_list =
        parse_list(opt("--n"), |s| s.parse().ok()).unwrap_or(MUL_MAT_ID_TOKENS.to_vec());
    let types = parse_list(opt("--types"), |s| find_type(&all_types(), s)).unwrap_or(all_types());

    let cpu = CpuDevice::with_threads(threads)?;
    let dev: Arc<dyn Device> = cpu.clone();
    println!(
        "mul_mat_id on the CPU stream: {EXPERTS} experts of m x k = {M} x {K}, \
         {USED} used per token, f32 activations of n tokens"
    );
    println!("machine: {}", dev.description());
    println!("threads: {threads} (ggml's figures: 2 threads)");
    println!("load average before: {}", load_average());
    print_memory_bandwidth("before");
    println!();
    let here = peers::measured_here();
    println!(
        "ggml: ggml-cpu measured on this kind of machine ({})",
        here.label
    );
    print!("{:<8}", "GFLOP/s");
    for n in &tokens_list {
        print!(" {:>9} {:>6}", format!("n={n}"), "ggml");
    }
    println!();
    let mut stream = dev.new_stream()?;
    let mut behind = Vec::new();
    let mut compared = 0;
    for (dtype, weight_buft) in types.iter().flat_map(|&t| {
        // GGUF's layout, then every layout the device offers for it
        let layouts = dev.layout_buffer_types().into_iter();
        std::iter::once(dev.buffer_type())
            .chain(layouts.filter(move |l| l.lays_out(t, &[K, M, EXPERTS])))
            .map(move |b| (t, b))
    }) {
        let experts = weight_bytes(dtype, M * EXPERTS, K)?;
        if weight_buft.name() == dev.buffer_type().name() {
            print!("{:<8}", dtype.name());
        } else {
            print!("{:<8}", format!(" {}", weight_buft.name()));
        }
        for &n in &tokens_list {
            let case = build_case(&dev, &weight_buft, dtype, n, &experts)?;
            let (s, _) = time_case(stream.as_mut(), &[case], Duration::from_secs(1), threads)?;
            let gflops = 2.0 * (M * K * USED * n) as f64 / s / 1e9;
            let peer = here.mul_mat_id(dtype, n);
            let peer_text = peer.map_or_else(|| "-".into(), |p| format!("{p:.0}"));
            print!(" {gflops:>9.1} {peer_text:>6}");
            if let Some(p) = peer {
                compared += 1;
                if gflops < p {
                    behind.push(format!("{dtype} n={n} ({:.0}%)", gflops / p * 100.0));
                }
            }
            use std::io::Write;
            let _ = std::io::stdout().flush();
        }
        println!();
    }
    println!("load average after: {}", load_average());
    print_memory_bandwidth("after");
    if compared > 0 {
        if behind.is_empty() {
            println!("every cell at or above ggml's");
        } else {
            println!("below ggml: {}", behind.join(", "));
        }
    }
    Ok(())
}
