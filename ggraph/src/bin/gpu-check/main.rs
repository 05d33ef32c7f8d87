//! `gpu-check`: the checks that need a GPU, for a machine that has one but
//! no Rust. Build it anywhere (`cargo build --release -p ggraph --bin
//! gpu-check`), copy the binary over, run it (or `scripts/gpu-check`).
//!
//! For every CUDA and HIP device found (and wgpu's adapters with
//! `--backends wgpu`) it prints the device (name, memory, compute
//! capability or architecture), then runs each part asked for:
//! - `checks`: the conformance suite (a summary per op), a small llama
//!   model against the f64 reference, a llama block split between the CPU
//!   and the device by the scheduler;
//! - `bandwidth`: the device's copy bandwidth (ggraph's copy kernel and the
//!   driver's copy), the limit of generation;
//! - `bench`: the mul_mat bench (GFLOP/s for weights 4096x14336 and
//!   4096x4096, n = 1, 8, 32, 512, F32, F16 and every quantised type), with
//!   cuBLAS's own GEMM beside F32 and F16;
//! - `runner`: the llama runner with every layer on the device (prompt 512
//!   and generation 128 tokens/s, `small` and `8b-4l` shapes, F16 and
//!   Q4_0), and the bandwidth generation uses;
//! - `host` (not by default; needs no GPU, a build with `emulator`): the
//!   host's microseconds per generated token and per kernel launch, the
//!   runner on a device whose kernels compute nothing.
//!
//! Exits non-zero on any failure, and with 2 when there is no device.
//!
//! Usage: gpu-check [--parts checks,bandwidth,bench,runner,host] [--backends cuda,hip,wgpu]
//! [--reps N] [--types T,T] [--shapes S,S] [--runner-types T,T] [--emulator]
//! (`--help` says more; `--emulator` needs the feature `emulator`: it adds
//! the host emulator of the GPU kernels, with small shapes, to check this
//! program itself without a GPU)

mod bench;
mod checks;
#[cfg(feature = "emulator")]
mod host_cost;
mod raw;
mod runner;

/// The sample llama graph of `ggraph devices`, run here on every GPU.
#[path = "../../cli/devices_sample.rs"]
mod devices_sample;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use clap_complete::Shell;
use ggraph::backend::{BackendRegistration, Device};
use ggraph::logs::Verbosity;
use ggraph::util::format_bytes;
use ggraph::{DType, logs, tool, values};
use ggraph_conformance as conformance;
use ggraph_gpu::GpuDevice;

use devices_sample::Sample;

/// What gpu-check runs on each device, in this order.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// The conformance suite, the sample llama graph and a llama block
    /// split between the CPU and the device
    Checks,
    /// The device's copy bandwidth
    Bandwidth,
    /// The mul_mat bench, with cuBLAS beside F32 and F16
    Bench,
    /// The llama runner with every layer on the device
    Runner,
    /// The host's time per generated token and per launch, on a device
    /// whose kernels compute nothing (a build with the feature `emulator`;
    /// needs no GPU)
    Host,
}

/// The device families gpu-check looks for.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// CUDA (driver, NVRTC and cuBLAS loaded at run time)
    Cuda,
    /// HIP (a build with the feature `hip`)
    Hip,
    /// wgpu's adapters (Vulkan, Metal, DX12)
    Wgpu,
}

/// gpu-check: the checks that need a GPU
///
/// For every CUDA and HIP device found (wgpu's adapters with `--backends
/// wgpu`): the device (name, memory, compute capability or architecture),
/// then the parts asked for: the conformance suite, a small llama model
/// against the f64 reference and a llama block split between the CPU and
/// the GPU (`checks`); the copy bandwidth (`bandwidth`); the mul_mat bench
/// with cuBLAS beside it (`bench`); the llama runner on the GPU
/// (`runner`). Exits 1 on any failure, 2 when there is no device.
#[derive(Parser, Debug)]
#[command(name = "gpu-check", version)]
struct Options {
    /// The parts to run, comma-separated
    #[arg(long, value_name = "PART,PART", value_delimiter = ',', value_enum,
          default_values_t = [Part::Checks, Part::Bandwidth, Part::Bench, Part::Runner])]
    parts: Vec<Part>,
    /// The device families to look for, comma-separated
    #[arg(long, value_name = "B,B", value_delimiter = ',', value_enum,
          default_values_t = [Backend::Cuda, Backend::Hip])]
    backends: Vec<Backend>,
    /// Repetitions of each bench cell
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = values::positive)]
    reps: usize,
    /// Weight types of the mul_mat bench, comma-separated [default: F32,
    /// F16 and every quantised type]
    #[arg(long, value_name = "T,T", value_delimiter = ',', value_parser = values::dtype)]
    types: Vec<DType>,
    /// Model shapes of the runner, comma-separated: tiny, small, 8b-4l
    /// [default: small,8b-4l; tiny on the emulator]
    #[arg(long, value_name = "S,S", value_delimiter = ',', value_parser = shape)]
    shapes: Vec<String>,
    /// Weight types of the runner, comma-separated
    #[arg(long = "runner-types", value_name = "T,T", value_delimiter = ',',
          value_parser = values::dtype, default_values_t = [DType::F16, DType::Q4_0])]
    runner_types: Vec<DType>,
    /// Prompt tokens of the runner [default: 512; 32 on the emulator]
    #[arg(long, value_name = "N", value_parser = values::positive)]
    prompt: Option<usize>,
    /// Generated tokens of the runner [default: 128; 8 on the emulator]
    #[arg(long = "gen", value_name = "N", value_parser = values::positive)]
    generation: Option<usize>,
    /// Add the host emulator of the GPU kernels (a build with the feature
    /// `emulator`), with small shapes
    #[arg(long)]
    emulator: bool,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[arg(long, value_name = "SHELL")]
    completions: Option<Shell>,
    #[command(flatten)]
    log: Verbosity,
}

fn shape(s: &str) -> Result<String, String> {
    ggraph::runner::preset(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// One device under test; `engine` for CUDA, HIP and the emulator (the
/// raw runtime calls the bench compares with).
struct Gpu {
    device: Arc<dyn Device>,
    engine: Option<Arc<GpuDevice>>,
}

impl Gpu {
    fn engine(d: Arc<GpuDevice>) -> Gpu {
        Gpu {
            device: d.clone(),
            engine: Some(d),
        }
    }

    /// The emulator: small shapes everywhere.
    fn small(&self) -> bool {
        self.device.name().starts_with("emu")
    }
}

fn gpus(o: &Options) -> Vec<Gpu> {
    let mut gpus: Vec<Gpu> = Vec::new();
    if o.backends.contains(&Backend::Cuda) {
        gpus.extend(ggraph_cuda::devices().into_iter().map(Gpu::engine));
    }
    if o.backends.contains(&Backend::Hip) {
        gpus.extend(ggraph_hip::devices().into_iter().map(Gpu::engine));
    }
    if o.backends.contains(&Backend::Wgpu) {
        gpus.extend(
            ggraph_wgpu::Registration
                .devices()
                .into_iter()
                .map(|device| Gpu {
                    device,
                    engine: None,
                }),
        );
    }
    if o.emulator {
        #[cfg(feature = "emulator")]
        gpus.push(Gpu::engine(ggraph_gpu::emulator::EmuRuntime::device(
            0,
            4 << 30,
            true,
        )));
        #[cfg(not(feature = "emulator"))]
        eprintln!("--emulator: this build has no emulator (build with --features emulator)");
    }
    gpus
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
    let part = |p: Part| o.parts.contains(&p);
    let mut failed = false;
    if part(Part::Host) {
        let shapes = if o.shapes.is_empty() {
            vec!["small".to_string()]
        } else {
            o.shapes.clone()
        };
        #[cfg(feature = "emulator")]
        {
            failed |= !host_cost::table(&shapes, &o.runner_types, o.generation.unwrap_or(64));
        }
        #[cfg(not(feature = "emulator"))]
        {
            let _ = shapes;
            println!("--parts host: this build has no emulator (build with --features emulator)");
            failed = true;
        }
        if o.parts.iter().all(|&p| p == Part::Host) {
            return verdict(failed);
        }
    }
    let gpus = gpus(&o);
    if gpus.is_empty() {
        println!("no device found ({:?})", o.backends);
        return ExitCode::from(2);
    }
    println!(
        "\n{:<8} {:>11} {:>11}  description",
        "device", "free", "total"
    );
    for g in &gpus {
        let m = g.device.memory();
        println!(
            "{:<8} {:>11} {:>11}  {}",
            g.device.name(),
            format_bytes(m.free_bytes),
            format_bytes(m.total_bytes),
            g.device.description()
        );
    }
    // the sample graphs and their f64 references, made once for every GPU
    let samples: Vec<(DType, ggraph::Result<Sample>)> = if part(Part::Checks) {
        [DType::F16, DType::Q8_0, DType::Q4_K]
            .into_iter()
            .map(|w| (w, Sample::new(w)))
            .collect()
    } else {
        Vec::new()
    };
    for g in &gpus {
        let d = &g.device;
        let small = g.small();
        println!("\n==== {} ({})", d.name(), d.description());
        if part(Part::Checks) {
            let start = Instant::now();
            let report = conformance::run(d);
            print!("{}", report.summary());
            println!("({:.1} s)", start.elapsed().as_secs_f64());
            if report.check().is_err() {
                failed = true;
            }
            failed |= !checks::llama_block(d, &samples);
            failed |= !checks::mixed_cpu_gpu_llama(d);
        }
        let mut limit = None;
        if part(Part::Bandwidth) {
            let bytes = if small { 16 << 20 } else { 1 << 30 };
            match bench::bandwidth(d, g.engine.as_deref(), bytes, o.reps) {
                Ok(b) => {
                    println!(
                        "\ncopy bandwidth on {} ({} copied, read + written): copy kernel {} GB/s, driver's copy {}",
                        d.name(),
                        format_bytes(bytes as u64),
                        bench::figure(b.kernel),
                        b.driver
                            .map_or("-".into(), |v| format!("{} GB/s", bench::figure(v)))
                    );
                    limit = Some(b.limit());
                }
                Err(e) => {
                    println!("copy bandwidth on {}: FAILED: {e}", d.name());
                    failed = true;
                }
            }
        }
        if part(Part::Bench)
            && let Err(e) = bench::mul_mat(d, g.engine.as_deref(), &o.types, o.reps, small)
        {
            println!("mul_mat bench failed: {e}");
            failed = true;
        }
        if part(Part::Runner) {
            let shapes = if o.shapes.is_empty() {
                let defaults: &[&str] = if small {
                    &["tiny"]
                } else {
                    &["small", "8b-4l"]
                };
                defaults.iter().map(|s| s.to_string()).collect()
            } else {
                o.shapes.clone()
            };
            let settings = runner::Settings {
                shapes: &shapes,
                types: &o.runner_types,
                prompt: o.prompt.unwrap_or(if small { 32 } else { 512 }),
                generation: o.generation.unwrap_or(if small { 8 } else { 128 }),
                bandwidth: limit,
            };
            failed |= !runner::table(d, &settings);
        }
    }
    verdict(failed)
}

/// The last line, and the exit code.
fn verdict(failed: bool) -> ExitCode {
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
        let o = parse(&[]).unwrap();
        assert_eq!(
            o.parts,
            [Part::Checks, Part::Bandwidth, Part::Bench, Part::Runner]
        );
        assert_eq!(o.backends, [Backend::Cuda, Backend::Hip]);
        assert_eq!(o.runner_types, [DType::F16, DType::Q4_0]);
        assert!(o.types.is_empty() && o.shapes.is_empty() && o.reps == 10);
        let o = parse(&["--emulator", "--parts", "bench,runner", "--reps", "1"]).unwrap();
        assert!(o.emulator && o.reps == 1);
        assert_eq!(o.parts, [Part::Bench, Part::Runner]);
        let o = parse(&["--types", "q4_0,IQ4_XS", "--backends", "wgpu"]).unwrap();
        assert_eq!(o.types, [DType::Q4_0, DType::IQ4_XS]);
        assert_eq!(o.backends, [Backend::Wgpu]);
        let o = parse(&["--shapes", "8b-4l,tiny", "--prompt", "64", "--gen", "16"]).unwrap();
        assert_eq!(o.shapes, ["8b-4l", "tiny"]);
        assert_eq!((o.prompt, o.generation), (Some(64), Some(16)));
        assert!(parse(&["--types", "Q9_9"]).is_err());
        assert!(parse(&["--parts", "everything"]).is_err());
        let e = parse(&["--shapes", "70b"]).unwrap_err();
        assert!(e.to_string().contains("unknown model shape"), "{e}");
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
