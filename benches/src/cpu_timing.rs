//! What the CPU kernel bench programs share: test values, weights, and
//! the timing of one graph on a backend.

use std::time::{Duration, Instant};

use ggraph_core::backend::Stream;
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{DType, Result, quant};

/// `n` pseudo-random values in [-1, 1), the same for the same seed.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
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

/// `rows` weight rows of `k` values of `dtype`: 16 distinct quantised
/// rows repeated (quantising tens of millions of values with the
/// reference K-quant code would take longer than the bench; the kernels'
/// speed does not depend on the values).
pub fn weight_bytes(dtype: DType, rows: usize, k: usize) -> Result<Vec<u8>> {
    const DISTINCT: usize = 16;
    let row_bytes = dtype.row_size(k).ok_or_else(|| {
        ggraph_core::Error::InvalidArgument(format!("k {k}: not whole blocks of {dtype}"))
    })?;
    let distinct = quant::quantize(dtype, &values(DISTINCT * k, 7))?;
    let mut out = Vec::with_capacity(rows * row_bytes);
    for i in 0..rows {
        let r = i % DISTINCT;
        out.extend_from_slice(&distinct[r * row_bytes..(r + 1) * row_bytes]);
    }
    Ok(out)
}

/// One graph to time, allocated and filled, and the output it computes.
pub struct Case {
    pub graph: Graph,
    pub out: TensorId,
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

/// Timings of one case, run on each of `copies` in turn: the median
/// wall-clock seconds of at least 3 runs in about `budget`, and the CPU
/// seconds per run divided by the thread count (what the run would take
/// with the cores to itself; it tells kernel changes apart when other
/// work shares the machine).
pub fn time_case(
    stream: &mut dyn Stream,
    copies: &[Case],
    budget: Duration,
    threads: usize,
) -> Result<(f64, Option<f64>)> {
    // warm-up: pages, scratch
    for case in copies {
        stream.compute(&case.graph, &[case.out])?;
    }
    let mut times = Vec::new();
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    while times.len() < 3.max(copies.len()) || (start.elapsed() < budget && times.len() < 500) {
        let case = &copies[times.len() % copies.len()];
        let t = Instant::now();
        stream.compute(&case.graph, &[case.out])?;
        stream.synchronize()?;
        times.push(t.elapsed().as_secs_f64());
    }
    let cpu = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) if b > a => Some((b - a) / times.len() as f64 / threads as f64),
        _ => None,
    };
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], cpu))
}

/// The comma-separated items after `--name` that `parse` accepts.
pub fn parse_list<T>(arg: Option<&str>, parse: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    arg.map(|s| s.split(',').filter_map(|p| parse(p.trim())).collect())
}

/// The weight type named `s` (any case) among `types`.
pub fn find_type(types: &[DType], s: &str) -> Option<DType> {
    types
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(s))
}

/// The 1, 5 and 15 minute load averages, to print before and after.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Prints the memory read bandwidth now (see [`memory_read_gbps`]),
/// `when` being "before" or "after" the figures.
pub fn print_memory_bandwidth(when: &str) {
    println!(
        "memory read bandwidth {when}: {:.0} GB/s",
        memory_read_gbps()
    );
}

/// The memory read bandwidth now, in GB/s: every core sums its share of a
/// 256 MiB buffer, best of three passes. Printed beside the figures
/// because a virtual machine's bandwidth can change from one minute to
/// the next (docs/performance.md, "Memory phases"): figures for
/// memory-bound cases compare only between runs whose probes agree.
pub fn memory_read_gbps() -> f64 {
    const BYTES: usize = 256 << 20;
    let words: Vec<u64> = (0..BYTES / 8).map(|i| i as u64).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = words.len().div_ceil(threads);
    let mut best = 0f64;
    for _ in 0..3 {
        let start = Instant::now();
        let sum: u64 = std::thread::scope(|s| {
            let parts: Vec<_> = words
                .chunks(share)
                .map(|part| s.spawn(move || sum_words(part)))
                .collect();
            parts
                .into_iter()
                .map(|p| p.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(sum);
        best = best.max(BYTES as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// The wrapping sum of `words` in eight independent lanes, so that the
/// loads, not the adds, set the pace.
fn sum_words(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    for block in words.chunks_exact(8) {
        for (l, &w) in lanes.iter_mut().zip(block) {
            *l = l.wrapping_add(w);
        }
    }
    let rest = words.chunks_exact(8).remainder();
    lanes
        .iter()
        .chain(rest)
        .fold(0u64, |a, &w| a.wrapping_add(w))
}
