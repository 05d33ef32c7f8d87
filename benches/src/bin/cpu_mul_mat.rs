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
//! `--cpu-time` adds, in brackets, the GFLOP/s that the CPU time used
//! per run implies (CPU seconds / threads): a guide when other work
//! shares the cores, not a figure to compare with ggml's.
//! Measure on a quiet machine: the figures are only comparable with
//! ggml's when nothing else runs (the load average is printed first).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggraph_benches::peers::{self, MUL_MAT_COLUMNS};
use ggraph_core::backend::{Backend, Device};
use ggraph_core::ir::{GraphBuilder, TensorId};
use ggraph_core::{DType, Result, exec, quant};
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

const ALL_TYPES: [DType; 7] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_K,
    DType::Q6_K,
];

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Weights of `dtype`: 16 distinct quantised rows repeated (quantising
/// 58 M values with the reference K-quant code would take longer than
/// the bench; the kernels' speed does not depend on the values).
fn weight_bytes(dtype: DType, shape: Shape) -> Result<Vec<u8>> {
    const DISTINCT: usize = 16;
    let (m, k) = (shape.m, shape.k);
    let row_bytes = dtype.row_size(k).ok_or_else(|| {
        ggraph_core::Error::InvalidArgument(format!("k {k}: not whole blocks of {dtype}"))
    })?;
    let rows = quant::quantize(dtype, &values(DISTINCT * k, 7))?;
    let mut out = Vec::with_capacity(m * row_bytes);
    for i in 0..m {
        let r = i % DISTINCT;
        out.extend_from_slice(&rows[r * row_bytes..(r + 1) * row_bytes]);
    }
    Ok(out)
}

/// One mul_mat of `dtype` weights and `n` columns, allocated and filled.
struct Case {
    graph: ggraph_core::ir::Graph,
    out: TensorId,
}

fn build_case(
    dev: &Arc<dyn Device>,
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
    exec::alloc_one_buffer(&mut graph, &dev.buffer_type())?;
    graph.write_bytes(w, weights)?;
    graph.write_f32(x, &values(shape.k * n, 11))?;
    Ok(Case { graph, out: y })
}

/// Seconds of CPU time (user + system) this process has used, from
/// /proc/self/stat; None where that file does not exist.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // fields after the command name (which is in parentheses)
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Timings of one mul_mat, run on each of `copies` in turn: the median
/// wall-clock seconds of at least 3 runs in about `budget`, and the CPU
/// seconds per run divided by the thread count (what the run would take
/// with the cores to itself; it tells kernel changes apart when other
/// work shares the machine).
fn time_case(
    backend: &mut dyn Backend,
    copies: &[Case],
    budget: Duration,
    threads: usize,
) -> Result<(f64, Option<f64>)> {
    // warm-up: pages, scratch
    for case in copies {
        backend.compute(&case.graph, &[case.out])?;
    }
    let mut times = Vec::new();
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    while times.len() < 3.max(copies.len()) || (start.elapsed() < budget && times.len() < 500) {
        let case = &copies[times.len() % copies.len()];
        let t = Instant::now();
        backend.compute(&case.graph, &[case.out])?;
        backend.synchronize()?;
        times.push(t.elapsed().as_secs_f64());
    }
    let cpu = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) if b > a => Some((b - a) / times.len() as f64 / threads as f64),
        _ => None,
    };
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], cpu))
}

fn parse_list<T>(arg: Option<&String>, parse: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    arg.map(|s| s.split(',').filter_map(|p| parse(p.trim())).collect())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let threads: usize = opt("--threads").and_then(|s| s.parse().ok()).unwrap_or(2);
    let columns = parse_list(opt("--n"), |s| s.parse().ok()).unwrap_or(MUL_MAT_COLUMNS.to_vec());
    let types = parse_list(opt("--types"), |s| {
        ALL_TYPES
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    })
    .unwrap_or(ALL_TYPES.to_vec());

    let cpu = CpuDevice::with_threads(threads)?;
    let dev: Arc<dyn Device> = cpu.clone();
    println!(
        "mul_mat on the CPU backend: weights m x k = {} x {}, f32 activations of n columns",
        opt("--m").map_or(M.to_string(), |s| s.clone()),
        opt("--k").map_or(K.to_string(), |s| s.clone())
    );
    println!("machine: {}", dev.description());
    println!("threads: {threads} (ggml's figures: 2 threads, from the CPU speed issue)");
    println!("load average before: {}", load_average());
    println!();
    let here = peers::measured_here();
    println!(
        "ggml: the issue's figures / ggml-cpu measured on this kind of machine ({})",
        here.label
    );
    print!("{:<8}", "GFLOP/s");
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
    let mut backend = dev.new_backend()?;
    let mut verdicts = Vec::new();
    for &dtype in &types {
        let weights = weight_bytes(dtype, shape)?;
        print!("{:<8}", dtype.name());
        for &n in &columns {
            let cases = (0..copies)
                .map(|_| build_case(&dev, dtype, shape, n, &weights))
                .collect::<Result<Vec<_>>>()?;
            let (s, cpu) = time_case(backend.as_mut(), &cases, Duration::from_secs(2), threads)?;
            let flop = 2.0 * (shape.m * shape.k * n) as f64;
            let gflops = flop / s / 1e9;
            let peer = peers::ISSUE.mul_mat(dtype, n).filter(|_| issue_shape);
            let today = here.mul_mat(dtype, n).filter(|_| issue_shape);
            let ours = match cpu {
                Some(c) if show_cpu => format!("{gflops:.1} [{:.0}]", flop / c / 1e9),
                _ => format!("{gflops:.1}"),
            };
            let show = |v: Option<f64>| v.map_or_else(|| "-".into(), |p| format!("{p:.0}"));
            let peer_text = format!("{}/{}", show(peer), show(today));
            print!(" {ours:>16} {peer_text:>11}");
            verdicts.push((
                dtype,
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
    for (name, pick) in [
        ("the issue's figures", 0),
        ("ggml measured on this kind of machine", 1),
    ] {
        let ratios: Vec<(DType, usize, f64)> = verdicts
            .iter()
            .filter_map(|&(t, n, a, b)| [a, b][pick].map(|r| (t, n, r)))
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
