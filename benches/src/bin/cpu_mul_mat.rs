//! CPU mul_mat bench: GFLOP/s of the CPU backend's mul_mat next to
//! ggml-cpu's on the same machine, for the shapes of the CPU speed issue
//! (weights m x k = 4096 x 14336, f32 activations of n columns). The
//! model-level figures are runner_bench's.
//!
//! Run: cargo run --release -p ggraph-benches --bin cpu_mul_mat
//!      [-- --threads 2 --n 1,8,512 --types F32,F16,Q8_0 --cpu-time]
//!      [--m 32000 --k 512 --copies 8]
//!
//! `--copies N` gives the mul_mat N copies of its weights and runs them
//! in turn, so that weights smaller than the last-level cache are read
//! from memory as a model's are (a model's weights do not fit the cache;
//! one copy of a small shape is re-read from it and measures the
//! kernel's arithmetic instead of the memory stream).
//!
//! Each weight type the CPU lays out its own way (`CPU_REPACK`, on any
//! processor with AVX2 unless `GGRAPH_CPU_REPACK=0`) gets a second row,
//! the same weights in that layout.
//!
//! `--ggml PATH` runs ggml's own mul_mat (`test-backend-ops` as
//! `scripts/ggml-mul-mat` builds it: `--ggml "$(scripts/ggml-mul-mat
//! --path)"`) for each weight type right after ours, and shows its
//! figure in place of the stored ones: the two measured in turn, minutes
//! apart, on the same machine.
//!
//! `--cpu-time` adds, in brackets, the GFLOP/s that the CPU time used
//! per run implies (CPU seconds / threads): a guide when other work
//! shares the cores, not a figure to compare with ggml's.
//! Measure on a quiet machine: the figures are only comparable with
//! ggml's when nothing else runs (the load average is printed first).

use std::sync::Arc;
use std::time::Duration;

use ggraph_benches::arg_value;
use ggraph_benches::cpu_timing::{
    Case, find_type, load_average, parse_list, print_memory_bandwidth, time_case, values,
    weight_bytes,
};
use ggraph_benches::ggml_mul_mat::ggml_mul_mat;
use ggraph_benches::peers::{self, MUL_MAT_COLUMNS};
use ggraph_core::alloc::bind_graph_weights;
use ggraph_core::backend::{BufferType, Device};
use ggraph_core::ir::GraphBuilder;
use ggraph_core::{DType, Result, exec};
use ggraph_cpu::CpuDevice;

/// Output rows (m) and row length (k) of the weights (the issue's shape;
/// `--m` and `--k` pick another, printed without peer figures).
const M: usize = 4096;
const K: usize = 14336;

/// The weights' shape of this run.
#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    k: usize,
}

/// Every weight type: the floats, then the quantised types in ggml's
/// order.
fn all_types() -> Vec<DType> {
    DType::FLOATS.into_iter().chain(DType::QUANTIZED).collect()
}

/// One mul_mat of `dtype` weights and `n` columns, allocated and filled.
fn build_case(
    dev: &Arc<dyn Device>,
    weight_buft: &Arc<dyn BufferType>,
    dtype: DType,
    shape: Shape,
    n: usize,
    weights: &[u8],
) -> Result<Case> {
    let mut b = GraphBuilder::new();
    let w = b.weight("w", dtype, &[shape.k, shape.m])?;
    let x = b.input("x", DType::F32, &[shape.k, n])?;
    let y = b.mul_mat(w, x)?;
    b.set_output(y)?;
    let mut graph = b.build();
    bind_graph_weights(&mut graph, weight_buft)?;
    exec::alloc_one_buffer(&mut graph, &dev.buffer_type())?;
    graph.write_bytes(w, weights)?;
    graph.write_f32(x, &values(shape.k * n, 11))?;
    Ok(Case { graph, out: y })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| arg_value(&args, name);
    let threads: usize = opt("--threads").and_then(|s| s.parse().ok()).unwrap_or(2);
    let columns = parse_list(opt("--n"), |s| s.parse().ok()).unwrap_or(MUL_MAT_COLUMNS.to_vec());
    let types = parse_list(opt("--types"), |s| find_type(&all_types(), s)).unwrap_or(all_types());

    let cpu = CpuDevice::with_threads(threads)?;
    let dev: Arc<dyn Device> = cpu.clone();
    println!(
        "mul_mat on the CPU stream: weights m x k = {} x {}, f32 activations of n columns",
        opt("--m").map_or(M.to_string(), str::to_string),
        opt("--k").map_or(K.to_string(), str::to_string)
    );
    println!("machine: {}", dev.description());
    if opt("--ggml").is_some() {
        println!("threads: {threads} (ggml's the same)");
    } else {
        println!("threads: {threads} (ggml's figures: 2 threads, from the CPU speed issue)");
    }
    println!("load average before: {}", load_average());
    print_memory_bandwidth("before");
    println!();
    let here = peers::measured_here();
    let live = opt("--ggml");
    match live {
        Some(bin) => println!("ggml: test-backend-ops ({bin}), run in turn with ours"),
        None => println!(
            "ggml: the issue's figures / ggml-cpu measured on this kind of machine ({})",
            here.label
        ),
    }
    // wide enough for a layout's row (" CPU_REPACK")
    const LABEL: usize = 12;
    print!("{:<LABEL$}", "GFLOP/s");
    for n in &columns {
        print!(" {:>16} {:>11}", format!("n={n}"), "ggml");
    }
    println!();
    let show_cpu = args.iter().any(|a| a == "--cpu-time");
    let shape = Shape {
        m: opt("--m").and_then(|s| s.parse().ok()).unwrap_or(M),
        k: opt("--k").and_then(|s| s.parse().ok()).unwrap_or(K),
    };
    let copies: usize = opt("--copies")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    if copies > 1 {
        println!("{copies} copies of the weights, run in turn");
    }
    let issue_shape = shape.m == M && shape.k == K && copies == 1;
    let mut stream = dev.new_stream()?;
    let mut verdicts = Vec::new();
    // ggml's figures in this run, one test-backend-ops run a weight type
    let mut ggml_now: Option<(DType, Vec<(usize, f64)>)> = None;
    for (dtype, weight_buft) in types.iter().flat_map(|&t| {
        // GGUF's layout, then every layout the device offers for it
        let layouts = dev.layout_buffer_types().into_iter();
        std::iter::once(dev.buffer_type())
            .chain(layouts.filter(move |l| l.lays_out(t, &[shape.k, shape.m])))
            .map(move |b| (t, b))
    }) {
        let weights = weight_bytes(dtype, shape.m, shape.k)?;
        let layout = weight_buft.name() != dev.buffer_type().name();
        let row = if layout {
            format!("{dtype} {}", weight_buft.name())
        } else {
            dtype.name().to_string()
        };
        if layout {
            print!("{:<LABEL$}", format!(" {}", weight_buft.name()));
        } else {
            print!("{row:<LABEL$}");
        }
        if let Some(bin) = live
            && ggml_now.as_ref().is_none_or(|(t, _)| *t != dtype)
        {
            let figures = ggml_mul_mat(bin, dtype, shape.m, shape.k, &columns, threads);
            ggml_now = Some((dtype, figures));
        }
        for &n in &columns {
            let cases = (0..copies)
                .map(|_| build_case(&dev, &weight_buft, dtype, shape, n, &weights))
                .collect::<Result<Vec<_>>>()?;
            let (s, cpu) = time_case(stream.as_mut(), &cases, Duration::from_secs(2), threads)?;
            let flop = 2.0 * (shape.m * shape.k * n) as f64;
            let gflops = flop / s / 1e9;
            let (peer, today) = match &ggml_now {
                Some((_, figures)) => {
                    (None, figures.iter().find(|(c, _)| *c == n).map(|&(_, g)| g))
                }
                None => (
                    peers::issue().mul_mat(dtype, n).filter(|_| issue_shape),
                    here.mul_mat(dtype, n).filter(|_| issue_shape),
                ),
            };
            let ours = match cpu {
                Some(c) if show_cpu => format!("{gflops:.1} [{:.0}]", flop / c / 1e9),
                _ => format!("{gflops:.1}"),
            };
            let show = |v: Option<f64>| v.map_or_else(|| "-".into(), |p| format!("{p:.0}"));
            let peer_text = if live.is_some() {
                show(today)
            } else {
                format!("{}/{}", show(peer), show(today))
            };
            print!(" {ours:>16} {peer_text:>11}");
            verdicts.push((
                row.clone(),
                n,
                peer.map(|p| gflops / p),
                today.map(|p| gflops / p),
            ));
            use std::io::Write;
            let _ = std::io::stdout().flush();
        }
        println!();
    }
    println!("load average after: {}", load_average());
    print_memory_bandwidth("after");
    let today_name = if live.is_some() {
        "ggml in this run"
    } else {
        "ggml measured on this kind of machine"
    };
    for (name, pick) in [("the issue's figures", 0), (today_name, 1)] {
        let ratios: Vec<(&str, usize, f64)> = verdicts
            .iter()
            .filter_map(|(row, n, a, b)| [*a, *b][pick].map(|r| (row.as_str(), *n, r)))
            .collect();
        if ratios.is_empty() {
            continue;
        }
        let behind: Vec<String> = ratios
            .iter()
            .filter(|(_, _, r)| *r < 1.0)
            .map(|(t, n, r)| format!("{t} n={n} ({:.0}%)", r * 100.0))
            .collect();
        if behind.is_empty() {
            println!("against {name}: every cell at or above ggml's");
        } else {
            println!("against {name}, below ggml: {}", behind.join(", "));
        }
    }
    println!("\nmodel-level figures: cargo run --release -p ggraph-benches --bin runner_bench");
    Ok(())
}
