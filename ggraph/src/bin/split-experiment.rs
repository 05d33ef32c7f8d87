//! `split-experiment`: one model, one device set, several placements; for
//! each placement prints the splits, the copies and bytes moved per token,
//! the memory per device, and (with --run) the time per token.
//!
//! Devices can be real (the GPUs found), simulated with given memory, link
//! bandwidth and throughput, or both.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use clap::builder::PossibleValuesParser;
use clap::error::ErrorKind;
use clap_complete::Shell;
use ggraph::backend::{Device, DevicePerf};
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::logs::Verbosity;
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::{GpuLayers, OverrideTarget, PlacementOptions, SplitMode};
use ggraph::options::found_gpus;
use ggraph::util::format_bytes;
use ggraph::{DType, logs, runner, tool, values};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

const PLACEMENT_HELP: &str = "\
A placement (--placement) is comma-separated key=value:
  split=none|layer|row  ngl=N|all  ts=3:1 or ts=8GiB:4GiB  main=I  kv=host
  offload=off  moe=cpu  override=REGEX@DEVICE
Without --placement: split=none, split=layer, split=row and ngl=<half the layers>.";

/// split-experiment: one model under several placements
///
/// One model, one device set, several placements; for each placement
/// prints the splits, the copies and bytes moved per token, the memory per
/// device, and (with --run) the time per token. Devices can be real (the
/// GPUs found), simulated with given memory, link bandwidth and
/// throughput, or both.
#[derive(Parser, Debug)]
#[command(name = "split-experiment", version, after_help = PLACEMENT_HELP)]
struct Cli {
    /// The model, a .gguf (or give --shape)
    #[arg(value_name = "MODEL.gguf")]
    model: Option<String>,
    /// A random-weight model: tiny, small, 8b-4l [default: tiny]
    #[arg(long, value_name = "NAME", conflicts_with = "model",
          value_parser = PossibleValuesParser::new(runner::SHAPES))]
    shape: Option<String>,
    /// Its weight type
    #[arg(long, value_name = "TYPE", default_value = "Q4_0", value_parser = values::weight_dtype)]
    weights: DType,
    // (the help as an attribute: rustdoc would read its brackets as links)
    #[arg(long, value_name = "SPEC", value_parser = sim_spec,
          help = "A simulated GPU: MEMORY[:LINK_GBPS[:TFLOPS]], e.g. 24GiB:25:80; repeatable")]
    sim: Vec<SimSpec>,
    /// Add the GPUs found (after the simulated ones)
    #[arg(long)]
    real: bool,
    /// A placement (below); repeatable
    #[arg(long, value_name = "P", value_parser = placement_spec)]
    placement: Vec<PlacementSpec>,
    /// KV cells
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = values::count)]
    ctx: usize,
    /// Decode N tokens and time them (0: a dry run)
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = values::count)]
    run: usize,
    /// Write each placement's one-token graph as DOT into DIR
    #[arg(long, value_name = "DIR")]
    dot: Option<String>,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[arg(long, value_name = "SHELL")]
    completions: Option<Shell>,
    #[command(flatten)]
    log: Verbosity,
}

fn main() -> ExitCode {
    let cli: Cli = tool::parse();
    if let Some(shell) = cli.completions {
        print!("{}", tool::completions::<Cli>(shell));
        return ExitCode::SUCCESS;
    }
    logs::init(cli.log.log_level);
    if cli.sim.is_empty() && !cli.real {
        tool::usage_error::<Cli>(
            ErrorKind::MissingRequiredArgument,
            "no devices: give --sim MEMORY (repeatable) and/or --real",
        )
        .exit();
    }
    match run(&cli) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("split-experiment: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A simulated GPU: memory, and link and compute speeds if given.
#[derive(Clone, Debug, PartialEq)]
struct SimSpec {
    bytes: u64,
    link_gbps: Option<f64>,
    tflops: Option<f64>,
}

fn sim_spec(spec: &str) -> Result<SimSpec, String> {
    let mut parts = spec.split(':');
    let bytes = values::size(parts.next().unwrap_or(""))?;
    let num = |p: Option<&str>, what: &str| -> Result<Option<f64>, String> {
        p.map(|s| {
            s.parse::<f64>()
                .map_err(|_| format!("{what} '{s}' is not a number"))
        })
        .transpose()
    };
    let link_gbps = num(parts.next(), "link GB/s")?;
    let tflops = num(parts.next(), "TFLOP/s")?;
    Ok(SimSpec {
        bytes,
        link_gbps,
        tflops,
    })
}

fn sim(i: usize, spec: &SimSpec) -> Arc<dyn Device> {
    let config = SimConfig::gpu(spec.bytes);
    let base = config.perf;
    let config = config.perf(DevicePerf {
        link_bytes_per_s: spec.link_gbps.map_or(base.link_bytes_per_s, |g| g * 1e9),
        flops_per_s: spec.tflops.map_or(base.flops_per_s, |t| t * 1e12),
        mem_bytes_per_s: base.mem_bytes_per_s,
    });
    SimDevice::new(i, config)
}

/// A placement as written and as parsed.
#[derive(Clone, Debug)]
struct PlacementSpec {
    text: String,
    options: PlacementOptions,
}

fn placement_spec(s: &str) -> Result<PlacementSpec, String> {
    Ok(PlacementSpec {
        text: s.to_string(),
        options: placement(s)?,
    })
}

fn placement(spec: &str) -> Result<PlacementOptions, String> {
    let mut o = PlacementOptions::default();
    for kv in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("placement '{spec}': '{kv}' is not key=value"))?;
        match k {
            "split" => {
                o.split_mode = match v {
                    "none" => SplitMode::None,
                    "layer" => SplitMode::Layer,
                    "row" => SplitMode::Row,
                    _ => return Err(format!("placement '{spec}': split={v}")),
                }
            }
            "ngl" => {
                o.n_gpu_layers = match v {
                    "all" => GpuLayers::All,
                    n => GpuLayers::Count(
                        n.parse()
                            .map_err(|_| format!("placement '{spec}': ngl={n}"))?,
                    ),
                }
            }
            "ts" => {
                o.tensor_split = Some(
                    values::tensor_split_by(v, ':')
                        .map_err(|e| format!("placement '{spec}': ts={v}: {e}"))?,
                );
            }
            "main" => {
                o.main_device = v
                    .parse()
                    .map_err(|_| format!("placement '{spec}': main={v}"))?
            }
            "kv" if v == "host" => o.offload_kqv = false,
            "offload" if v == "off" => o.op_offload = false,
            "moe" if v == "cpu" => o = o.cpu_moe(),
            "override" => {
                let (re, dev) = v.rsplit_once('@').ok_or("override=REGEX@DEVICE")?;
                let target = if dev == "cpu" {
                    OverrideTarget::Host
                } else {
                    OverrideTarget::Device(
                        dev.parse()
                            .map_err(|_| format!("override device '{dev}'"))?,
                    )
                };
                o.overrides.push(
                    ggraph::model::placement::Override::new(re, target)
                        .map_err(|e| e.to_string())?,
                );
            }
            _ => return Err(format!("placement '{spec}': unknown key '{k}'")),
        }
    }
    Ok(o)
}

fn run(a: &Cli) -> Result<String, String> {
    let desc: ModelDesc = match &a.model {
        Some(path) => runner::open_model(path).map_err(|e| e.to_string())?,
        None => runner::random_model(a.shape.as_deref().unwrap_or("tiny"), a.weights, 1)
            .map_err(|e| e.to_string())?,
    };
    let mut devices: Vec<Arc<dyn Device>> =
        a.sim.iter().enumerate().map(|(i, s)| sim(i, s)).collect();
    if a.real {
        devices.extend(found_gpus());
    }
    if devices.is_empty() {
        return Err("no devices: give --sim MEMORY (repeatable) and/or --real".into());
    }
    let n_layer = desc.config.n_layer;
    let mut specs = a.placement.clone();
    if specs.is_empty() {
        for s in [
            "split=none".to_string(),
            "split=layer".into(),
            "split=row".into(),
            format!("ngl={}", n_layer.div_ceil(2)),
        ] {
            specs.push(placement_spec(&s)?);
        }
    }
    let run_tokens = a.run;
    let n_ctx = a.ctx;
    let params = ContextParams {
        n_ctx,
        n_batch: 512.min(n_ctx),
        n_ubatch: 512.min(n_ctx),
        ..ContextParams::default()
    };
    let mut out = String::new();
    let c = &desc.config;
    let _ = writeln!(
        out,
        "model: llama {} layers, n_embd {}, vocab {}, {} of weights; {} KV cells",
        c.n_layer,
        c.n_embd,
        c.n_vocab,
        format_bytes(desc.total_bytes()),
        n_ctx
    );
    for d in &devices {
        let _ = writeln!(out, "device {}: {}", d.name(), d.description());
    }
    for spec in &specs {
        let _ = writeln!(out, "\n== placement {}", spec.text);
        let opts = &spec.options;
        let cpu: Arc<dyn Device> = CpuDevice::new();
        let mode = if run_tokens > 0 && desc.has_data() {
            LoadMode::Real
        } else {
            LoadMode::DryRun
        };
        let model = match Model::load(&desc, &devices, cpu, opts, mode, None) {
            Ok(m) => m,
            Err(e) => {
                let _ = writeln!(out, "does not load: {e}");
                continue;
            }
        };
        let mut ctx = match Context::new(Arc::new(model), params.clone()) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(out, "no context: {e}");
                continue;
            }
        };
        let r = ctx
            .split_report(1, n_ctx.min(512))
            .map_err(|e| e.to_string())?;
        let _ = writeln!(
            out,
            "per token: {} split(s), {} copies, {} moved",
            r.splits,
            r.copies,
            format_bytes(r.bytes_copied)
        );
        let p = ctx
            .split_report(params.n_ubatch, n_ctx.min(params.n_ubatch))
            .map_err(|e| e.to_string())?;
        let _ = writeln!(
            out,
            "per {}-token ubatch: {} split(s), {} copies, {} moved ({} per token)",
            params.n_ubatch,
            p.splits,
            p.copies,
            format_bytes(p.bytes_copied),
            format_bytes(p.bytes_copied / params.n_ubatch as u64)
        );
        out.push_str(&runner::memory_table(&ctx));
        for line in runner::over_memory(&ctx) {
            let _ = writeln!(out, "{line}");
        }
        if let Some(dir) = &a.dot {
            let name = spec.text.replace([',', '=', ':', '/'], "_");
            let path = std::path::Path::new(dir).join(format!("{name}.dot"));
            std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
            std::fs::write(&path, &r.dot).map_err(|e| format!("{}: {e}", path.display()))?;
            let _ = writeln!(out, "DOT: {}", path.display());
        }
        if mode == LoadMode::Real {
            ctx.decode(&Batch::tokens(&runner::random_prompt(8, c.n_vocab, 3)))
                .map_err(|e| e.to_string())?;
            let t = Instant::now();
            let mut next = runner::argmax(ctx.logits());
            for _ in 0..run_tokens {
                ctx.decode(&Batch::tokens(&[next]))
                    .map_err(|e| e.to_string())?;
                next = runner::argmax(ctx.logits());
            }
            let ms = t.elapsed().as_secs_f64() * 1e3 / run_tokens as f64;
            let sims = devices.iter().any(|d| d.name().starts_with("sim:"));
            let _ = writeln!(
                out,
                "time per token: {ms:.2} ms{}",
                if sims {
                    " (simulated devices compute on the CPU: not a GPU timing)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(a: &[&str]) -> Result<Cli, clap::Error> {
        tool::try_parse_from(std::iter::once("split-experiment").chain(a.iter().copied()))
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn sims_and_placements_parse_and_mistakes_name_the_flag() {
        let c = parse(&[
            "--shape",
            "small",
            "--sim",
            "24GiB:25:80",
            "--sim",
            "12GiB",
            "--placement",
            "split=row,ts=3:1",
            "--run",
            "4",
        ])
        .unwrap();
        assert_eq!(
            c.sim,
            [
                SimSpec {
                    bytes: 24 << 30,
                    link_gbps: Some(25.0),
                    tflops: Some(80.0)
                },
                SimSpec {
                    bytes: 12 << 30,
                    link_gbps: None,
                    tflops: None
                }
            ]
        );
        assert_eq!(c.placement[0].options.split_mode, SplitMode::Row);
        assert_eq!((c.run, c.ctx, c.weights), (4, 4096, DType::Q4_0));
        for (a, flag) in [
            (&["--sim", "lots"][..], "--sim"),
            (&["--sim", "1GiB:fast"], "--sim"),
            (
                &["--sim", "1GiB", "--placement", "split=diagonal"],
                "--placement",
            ),
            (&["--sim", "1GiB", "--shape", "huge"], "--shape"),
            (&["m.gguf", "--shape", "tiny"], "--shape"),
            (&["--sim", "1GiB", "--nope"], "--nope"),
        ] {
            let e = parse(a).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{a:?}");
            assert!(e.to_string().contains(flag), "{a:?}: {e}");
        }
        let h = parse(&["--help"]).unwrap_err().to_string();
        assert!(
            h.contains("[default: 4096]") && h.contains("split=none|layer|row"),
            "{h}"
        );
    }
}
