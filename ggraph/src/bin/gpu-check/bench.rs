//! The mul_mat bench (every weight type through a one-node graph, with
//! the BLAS library's own product beside F32 and F16) and the device's
//! copy bandwidth, the limit of generation.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use ggraph::backend::{BufferUsage, Device};
use ggraph::ir::{Graph, GraphBuilder, TensorId};
use ggraph::util::Rng;
use ggraph::{DType, Result, exec, quant};
use ggraph_gpu::GpuDevice;

use crate::raw;

/// Shapes of the bench: (m, k) = weight rows and row length, and the
/// activation columns.
fn shapes(small: bool) -> (Vec<(usize, usize)>, Vec<usize>) {
    if small {
        (vec![(128, 256)], vec![1, 8, 32])
    } else {
        (vec![(14336, 4096), (4096, 4096)], vec![1, 8, 32, 512])
    }
}

/// Weights of `dtype`: a quantised tile of 16 rows repeated (the values do
/// not change the speed; quantising 58M values on the host would).
pub fn weight_bytes(dtype: DType, m: usize, k: usize, rng: &mut Rng) -> Result<Vec<u8>> {
    let tile_rows = 16.min(m);
    let tile = quant::quantize(dtype, &rng.vec(tile_rows * k, -1.0, 1.0))?;
    let row = tile.len() / tile_rows;
    let mut out = Vec::with_capacity(row * m);
    for r in 0..m {
        let t = r % tile_rows;
        out.extend_from_slice(&tile[t * row..(t + 1) * row]);
    }
    Ok(out)
}

/// The mul_mat table of one device: GFLOP/s per weight type and column
/// count, and the weights' read bandwidth at one column (a mat-vec reads
/// every weight once). Under F32 and F16, `engine`'s BLAS library on the
/// same shapes with nothing around it, where it has one.
pub fn mul_mat(
    d: &Arc<dyn Device>,
    engine: Option<&GpuDevice>,
    types: &[DType],
    reps: usize,
    small: bool,
) -> Result<()> {
    let (shapes, ns) = shapes(small);
    let types: Vec<DType> = if types.is_empty() {
        [DType::F32, DType::F16]
            .into_iter()
            .chain(DType::QUANTIZED)
            .collect()
    } else {
        types.to_vec()
    };
    println!(
        "\nmul_mat on {} (GFLOP/s, weights k x m, activations F32 k x n; GB/s: weights read at n=1):",
        d.name()
    );
    print!("{:<11} {:>12}", "type", "k x m");
    for n in &ns {
        print!(" {:>10}", format!("n={n}"));
    }
    println!(" {:>9}", "GB/s n=1");
    let mut rng = Rng::new(7);
    for &(m, k) in &shapes {
        for &t in &types {
            print!("{:<11} {:>12}", t.name(), format!("{k}x{m}"));
            let w = weight_bytes(t, m, k, &mut rng)?;
            let mut at_one = None;
            for &n in &ns {
                let secs = graph_seconds(d, t, &w, m, k, n, reps)?;
                if n == 1 {
                    at_one = Some(w.len() as f64 / secs / 1e9);
                }
                print!(" {:>10}", figure(gflops(m, n, k, secs)));
                let _ = std::io::stdout().flush();
            }
            println!(" {:>9}", at_one.map_or("-".into(), figure));
            if let Some(engine) = engine.filter(|e| e.runtime().has_blas())
                && matches!(t, DType::F32 | DType::F16)
            {
                print!("{:<11} {:>12}", format!("cuBLAS {}", t.name()), "");
                for &n in &ns {
                    let secs = raw::gemm_seconds(engine, t, &w, m, k, n, reps)?;
                    print!(" {:>10}", figure(gflops(m, n, k, secs)));
                    let _ = std::io::stdout().flush();
                }
                println!();
            }
        }
    }
    if engine.is_some_and(|e| e.runtime().has_blas()) {
        println!(
            "(cuBLAS rows: the library's GEMM alone on the same shapes, A and B of the type, f32 sums and results)"
        );
    }
    Ok(())
}

/// `v` with three significant digits (at most four decimals), so that
/// the emulator's small figures do not print as zero.
pub fn figure(v: f64) -> String {
    let decimals = if v > 0.0 {
        (2 - v.log10().floor() as i32).clamp(0, 4) as usize
    } else {
        0
    };
    format!("{v:.decimals$}")
}

fn gflops(m: usize, n: usize, k: usize, secs: f64) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64 / secs / 1e9
}

/// `ids` placed one after another in one buffer of `d`.
fn place(g: &mut Graph, d: &Arc<dyn Device>, ids: &[TensorId]) -> Result<()> {
    exec::alloc_buffer_for(g, ids, &d.buffer_type(), BufferUsage::Compute).map(|_| ())
}

/// Seconds per run of `g` on `d`: one untimed run, then `reps` queued
/// runs between two synchronisations.
fn seconds_per_run(d: &Arc<dyn Device>, g: &Graph, reps: usize) -> Result<f64> {
    let mut s = d.new_stream()?;
    s.compute(g, g.nodes())?;
    s.synchronize()?;
    let start = Instant::now();
    for _ in 0..reps {
        s.compute(g, g.nodes())?;
    }
    s.synchronize()?;
    Ok(start.elapsed().as_secs_f64() / reps as f64)
}

/// Seconds of one mul_mat of `m` rows of `k` weights by `n` columns.
fn graph_seconds(
    d: &Arc<dyn Device>,
    t: DType,
    w: &[u8],
    m: usize,
    k: usize,
    n: usize,
    reps: usize,
) -> Result<f64> {
    let mut b = GraphBuilder::new();
    let wt = b.weight("w", t, &[k, m])?;
    let x = b.input("x", DType::F32, &[k, n])?;
    let y = b.mul_mat(wt, x)?;
    b.set_output(y)?;
    let mut g = b.build();
    place(&mut g, d, &[wt, x, y])?;
    g.write_bytes(wt, w)?;
    g.write_f32(x, &Rng::new(n as u64).vec(k * n, -1.0, 1.0))?;
    seconds_per_run(d, &g, reps)
}

/// The device's copy bandwidth in GB/s (bytes read plus bytes written
/// per second): ggraph's own copy kernel (a `cpy` node, F32 to F32),
/// and where `engine` is given the driver's device-to-device copy.
pub struct Bandwidth {
    /// The `cpy` kernel.
    pub kernel: f64,
    /// The driver's copy, for engine devices.
    pub driver: Option<f64>,
}

impl Bandwidth {
    /// The best of the two: what generation can hope for.
    pub fn limit(&self) -> f64 {
        self.driver.map_or(self.kernel, |d| d.max(self.kernel))
    }
}

/// Measures [`Bandwidth`] over `bytes` copied each run.
pub fn bandwidth(
    d: &Arc<dyn Device>,
    engine: Option<&GpuDevice>,
    bytes: usize,
    reps: usize,
) -> Result<Bandwidth> {
    let n = bytes / 4;
    let mut b = GraphBuilder::new();
    let src = b.input("src", DType::F32, &[n])?;
    let dst = b.input("dst", DType::F32, &[n])?;
    let copy = b.cpy(src, dst)?;
    b.set_output(copy)?;
    let mut g = b.build();
    place(&mut g, d, &[src, dst])?;
    g.write_f32(src, &Rng::new(3).vec(n, -1.0, 1.0))?;
    let moved = 2.0 * (n * 4) as f64;
    let kernel = moved / seconds_per_run(d, &g, reps)? / 1e9;
    let driver = match engine {
        Some(e) => Some(moved / raw::copy_seconds(e, n * 4, reps)? / 1e9),
        None => None,
    };
    Ok(Bandwidth { kernel, driver })
}
