//! `gpu-check`: the checks that need a GPU, for a machine that has one but
//! no Rust. Build it anywhere (`cargo build --release -p ggraph --bin
//! gpu-check`), copy the binary over, run it (or `scripts/gpu-check`).
//!
//! For every CUDA and HIP device found it prints the device (name, memory,
//! compute capability or architecture), runs the conformance suite (a
//! summary per op), a small llama model against the f64 reference, and
//! the mul_mat bench (GFLOP/s for weights 4096x14336 and 4096x4096, n = 1,
//! 8, 32, 512, F32, F16 and every quantised type). Exits non-zero on any
//! failure, and with 2 when there is no GPU at all.
//!
//! Usage: gpu-check [--no-bench] [--bench-only] [--reps N] [--types T,T] [--emulator]
//! (`--help` says more; `--emulator` needs the feature `emulator`: it adds
//! the host emulator of the GPU kernels, with small bench shapes, to check
//! this program itself without a GPU)

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use clap_complete::Shell;
use ggraph::backend::{BackendRegistration, BufferUsage, Device};
use ggraph::ir::{GraphBuilder, TensorData};
use ggraph::logs::Verbosity;
use ggraph::util::Rng;
use ggraph::util::format_bytes;
use ggraph::{DType, Result, logs, quant, tool, values};
use ggraph_conformance as conformance;

/// The sample llama graph of `ggraph devices`, run here on every GPU.
#[path = "../cli/devices_sample.rs"]
mod devices_sample;

use devices_sample::Sample;

/// gpu-check: the checks that need a GPU
///
/// For every CUDA and HIP device found: the device (name, memory, compute
/// capability or architecture), the conformance suite (a summary per op),
/// a small llama model against the f64 reference, a llama block split
/// between the CPU and the GPU, and the mul_mat bench. Exits 1 on any
/// failure, 2 when there is no GPU at all.
#[derive(Parser, Debug)]
#[command(name = "gpu-check", version)]
struct Options {
    /// Skip the mul_mat bench
    #[arg(long = "no-bench")]
    no_bench: bool,
    /// Only the mul_mat bench
    #[arg(long = "bench-only")]
    bench_only: bool,
    /// Repetitions of each bench cell
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = values::positive)]
    reps: usize,
    /// Weight types of the mul_mat bench, comma-separated [default: F32,
    /// F16 and every quantised type]
    #[arg(long, value_name = "T,T", value_delimiter = ',', value_parser = values::dtype)]
    types: Vec<DType>,
    /// Add the host emulator of the GPU kernels (a build with the feature
    /// `emulator`), with small bench shapes
    #[arg(long)]
    emulator: bool,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[arg(long, value_name = "SHELL", hide = true)]
    completions: Option<Shell>,
    #[command(flatten)]
    log: Verbosity,
}

fn gpu_devices(o: &Options) -> Vec<Arc<dyn Device>> {
    let mut devs: Vec<Arc<dyn Device>> = Vec::new();
    devs.extend(ggraph_cuda::Registration.devices());
    devs.extend(ggraph_hip::Registration.devices());
    if o.emulator {
        #[cfg(feature = "emulator")]
        devs.push(ggraph_gpu::emulator::EmuRuntime::device(0, 4 << 30, true));
        #[cfg(not(feature = "emulator"))]
        eprintln!("--emulator: this build has no emulator (build with --features emulator)");
    }
    devs
}

fn main() -> ExitCode {
    let o: Options = tool::parse();
    if let Some(shell) = o.completions {
        print!("{}", tool::completions::<Options>(shell));
        return ExitCode::SUCCESS;
    }
    logs::init(o.log.log_level);
    println!(
        "libraries: CUDA driver {}, NVRTC {}, cuBLAS {}; HIP runtime {}",
        found(ggraph_cuda::driver_present()),
        found(ggraph_cuda::nvrtc_present()),
        found(ggraph_cuda::cublas_present()),
        if ggraph_hip::compiled_in() {
            "compiled in"
        } else {
            "not compiled in (feature hip)"
        },
    );
    let devs = gpu_devices(&o);
    if devs.is_empty() {
        println!("no CUDA or HIP device found");
        return ExitCode::from(2);
    }
    println!(
        "\n{:<8} {:>11} {:>11}  description",
        "device", "free", "total"
    );
    for d in &devs {
        let m = d.memory();
        println!(
            "{:<8} {:>11} {:>11}  {}",
            d.name(),
            format_bytes(m.free_bytes),
            format_bytes(m.total_bytes),
            d.description()
        );
    }
    // the sample graphs and their f64 references, made once for every GPU
    let samples: Vec<(DType, ggraph::Result<Sample>)> = if o.bench_only {
        Vec::new()
    } else {
        [DType::F16, DType::Q8_0, DType::Q4_K]
            .into_iter()
            .map(|w| (w, Sample::new(w)))
            .collect()
    };
    let mut failed = false;
    for d in &devs {
        println!("\n==== {} ({})", d.name(), d.description());
        if !o.bench_only {
            let start = Instant::now();
            let report = conformance::run(d);
            print!("{}", report.summary());
            println!("({:.1} s)", start.elapsed().as_secs_f64());
            if report.check().is_err() {
                failed = true;
            }
            failed |= !llama_block(d, &samples);
            failed |= !mixed_cpu_gpu_llama(d);
        }
        if !o.no_bench {
            let small = d.name().starts_with("emu");
            if let Err(e) = bench(d, &o.types, o.reps, small) {
                println!("mul_mat bench failed: {e}");
                failed = true;
            }
        }
    }
    println!(
        "\n{}",
        if failed {
            "GPU CHECK FAILED"
        } else {
            "GPU CHECK PASSED"
        }
    );
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn found(b: bool) -> &'static str {
    if b { "found" } else { "not found" }
}

/// The sample llama graph entirely on the device, against the f64
/// reference.
fn llama_block(d: &Arc<dyn Device>, samples: &[(DType, Result<Sample>)]) -> bool {
    let mut ok = true;
    for (w, sample) in samples {
        match sample
            .as_ref()
            .map_err(|e| e.to_string())
            .and_then(|s| s.run(d).map_err(|e| e.to_string()))
        {
            Ok(r) => {
                let pass = r.passed();
                ok &= pass;
                println!(
                    "llama block ({w} weights, {} nodes) on {}: {:.2} ms, nmse {:.1e} vs f64 reference: {}",
                    r.nodes,
                    d.name(),
                    r.millis,
                    r.nmse,
                    if pass { "ok" } else { "FAILED" }
                );
            }
            Err(e) => {
                ok = false;
                println!("llama block ({w} weights) on {}: FAILED: {e}", d.name());
            }
        }
    }
    ok
}

/// A llama block split between the CPU and this GPU by the scheduler
/// (weights of some layers on each, copies between them), with standard
/// and flash attention, against the CPU alone and the f64 reference.
fn mixed_cpu_gpu_llama(d: &Arc<dyn Device>) -> bool {
    let cpu: Arc<dyn Device> = ggraph_cpu::CpuDevice::new();
    let mut ok = true;
    for attention in [
        ggraph::model::arch::Attention::Standard,
        ggraph::model::arch::Attention::Flash,
    ] {
        match conformance::testing::mixed::mixed_llama(
            std::slice::from_ref(d),
            cpu.clone(),
            DType::Q8_0,
            attention,
        ) {
            Ok(m) => {
                println!(
                    "mixed CPU+{} llama block ({attention:?} attention) through the scheduler: {} splits, {} copies, {} nodes on the device, nmse vs CPU {:.1e}, vs f64 reference {:.1e}: {}",
                    d.name(),
                    m.splits,
                    m.copies,
                    m.device_nodes,
                    m.nmse_vs_cpu,
                    m.nmse_vs_reference,
                    if m.passed() { "PASS" } else { "FAIL" }
                );
                ok &= m.passed();
            }
            Err(e) => {
                println!("mixed CPU+{} llama block: FAILED: {e}", d.name());
                ok = false;
            }
        }
    }
    ok
}

/// Shapes of the bench: (m, k) = weight rows and row length.
fn bench_shapes(small: bool) -> (Vec<(usize, usize)>, Vec<usize>) {
    if small {
        (vec![(128, 256)], vec![1, 8, 32])
    } else {
        (vec![(14336, 4096), (4096, 4096)], vec![1, 8, 32, 512])
    }
}

/// Weights of `dtype`: a quantised tile of 16 rows repeated (the values do
/// not change the speed; quantising 58M values on the host would).
fn weight_bytes(dtype: DType, m: usize, k: usize, rng: &mut Rng) -> Result<Vec<u8>> {
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

fn bench(d: &Arc<dyn Device>, types: &[DType], reps: usize, small: bool) -> Result<()> {
    let (shapes, ns) = bench_shapes(small);
    let types: Vec<DType> = if types.is_empty() {
        [DType::F32, DType::F16]
            .into_iter()
            .chain(DType::QUANTIZED)
            .collect()
    } else {
        types.to_vec()
    };
    println!(
        "\nmul_mat on {} (GFLOP/s, weights k x m, activations F32 k x n):",
        d.name()
    );
    print!("{:<6} {:>12}", "type", "k x m");
    for n in &ns {
        print!(" {:>10}", format!("n={n}"));
    }
    println!();
    let mut rng = Rng::new(7);
    for &(m, k) in &shapes {
        for &t in &types {
            print!("{:<6} {:>12}", t.name(), format!("{k}x{m}"));
            let w = weight_bytes(t, m, k, &mut rng)?;
            for &n in &ns {
                let gflops = bench_one(d, t, &w, m, k, n, reps)?;
                print!(" {gflops:>10.1}");
                use std::io::Write;
                let _ = std::io::stdout().flush();
            }
            println!();
        }
    }
    Ok(())
}

/// GFLOP/s of one mul_mat of `m` rows of `k` weights by `n` columns.
fn bench_one(
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
    let bt = d.buffer_type();
    let align = bt.alignment();
    let up = |v: u64| v.div_ceil(align) * align;
    let sizes = [
        g.tensor(wt).nbytes() as u64,
        g.tensor(x).nbytes() as u64,
        g.tensor(y).nbytes() as u64,
    ];
    let buffer = bt.alloc(up(sizes[0]) + up(sizes[1]) + sizes[2], BufferUsage::Compute)?;
    let mut offset = 0;
    for (id, size) in [wt, x, y].into_iter().zip(sizes) {
        g.set_data(
            id,
            TensorData {
                buffer: buffer.clone(),
                offset,
            },
        )?;
        offset += up(size);
    }
    g.write_bytes(wt, w)?;
    g.write_f32(x, &Rng::new(n as u64).vec(k * n, -1.0, 1.0))?;
    let mut s = d.new_stream()?;
    s.compute(&g, g.nodes())?;
    s.synchronize()?;
    let start = Instant::now();
    for _ in 0..reps {
        s.compute(&g, g.nodes())?;
    }
    s.synchronize()?;
    let secs = start.elapsed().as_secs_f64() / reps as f64;
    Ok(2.0 * m as f64 * n as f64 * k as f64 / secs / 1e9)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(a: &[&str]) -> std::result::Result<Options, clap::Error> {
        tool::try_parse_from(std::iter::once("gpu-check").chain(a.iter().copied()))
    }

    #[test]
    fn the_command_line_is_well_formed_and_keeps_its_flags() {
        Options::command().debug_assert();
        let o = parse(&["--emulator", "--bench-only", "--reps", "1"]).unwrap();
        assert!(o.emulator && o.bench_only && !o.no_bench && o.reps == 1);
        assert!(o.types.is_empty());
        let o = parse(&["--types", "q4_0,IQ4_XS"]).unwrap();
        assert_eq!(o.types, [DType::Q4_0, DType::IQ4_XS]);
        assert!(parse(&["--types", "Q9_9"]).is_err());
        assert_eq!(parse(&[]).unwrap().reps, 10);
        let e = parse(&["--reps", "0"]).unwrap_err();
        assert!(
            e.exit_code() == 2 && e.to_string().contains("--reps"),
            "{e}"
        );
        let h = parse(&["--help"]).unwrap_err();
        assert_eq!(h.exit_code(), 0);
        assert!(h.to_string().contains("[default: 10]"), "{h}");
    }
}
