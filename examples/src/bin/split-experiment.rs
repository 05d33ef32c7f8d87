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

use ggraph::args::{Args, Spec};
use ggraph::backend::{Device, DevicePerf};
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::{
    GpuLayers, OverrideTarget, PlacementOptions, SplitMode, TensorSplit,
};
use ggraph::util::{format_bytes, parse_bytes};
use ggraph::{DType, options, runner};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

const USAGE: &str = "usage: split-experiment (MODEL.gguf | --shape NAME) [options]

  --shape NAME        a random-weight model: tiny, small, 8b-4l
  --weights TYPE      its weight type (default Q4_0)
  --sim SPEC          a simulated GPU: MEMORY[:LINK_GBPS[:TFLOPS]], e.g.
                      24GiB:25:80; repeatable
  --real              add the GPUs found (after the simulated ones)
  --placement P       a placement: comma-separated key=value of
                        split=none|layer|row  ngl=N|all  ts=3:1 or ts=8GiB:4GiB
                        main=I  kv=host  offload=off  moe=cpu
                      repeatable (default: split=none, split=layer, split=row,
                      ngl=<half>)
  --ctx N             KV cells (default 4096)
  --run N             decode N tokens and time them (else a dry run)
  --dot DIR           write each placement's one-token graph as DOT";

const SPEC: Spec = Spec {
    values: &["--shape", "--weights", "--ctx", "--run", "--dot"],
    repeated: &["--sim", "--placement"],
    flags: &["--real"],
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
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

fn sim(i: usize, spec: &str) -> Result<Arc<dyn Device>, String> {
    let mut parts = spec.split(':');
    let mem = parse_bytes(parts.next().unwrap_or("")).map_err(|e| format!("--sim {spec}: {e}"))?;
    let mut config = SimConfig::gpu(mem);
    #[allow(unused_assignments)]
    let num = |p: Option<&str>, what: &str| -> Result<Option<f64>, String> {
        p.map(|s| {
            s.parse::<f64>()
                .map_err(|_| format!("--sim {spec}: {what} '{s}' is not a number"))
        })
        .transpose()
    };
    let link = num(parts.next(), "link GB/s")?;
    let tflops = num(parts.next(), "TFLOP/s")?;
    let base = config.perf;
    config = config.perf(DevicePerf {
        link_bytes_per_s: link.map_or(base.link_bytes_per_s, |g| g * 1e9),
        flops_per_s: tflops.map_or(base.flops_per_s, |t| t * 1e12),
        mem_bytes_per_s: base.mem_bytes_per_s,
    });
    Ok(SimDevice::new(i, config))
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
                let parts: Vec<&str> = v.split(':').collect();
                o.tensor_split = Some(
                    if parts
                        .iter()
                        .any(|p| p.chars().any(|c| c.is_ascii_alphabetic()))
                    {
                        TensorSplit::Bytes(
                            parts
                                .iter()
                                .map(|p| parse_bytes(p).map_err(|e| e.to_string()))
                                .collect::<Result<_, _>>()?,
                        )
                    } else {
                        TensorSplit::Fractions(
                            parts
                                .iter()
                                .map(|p| p.parse().map_err(|_| format!("ts part '{p}'")))
                                .collect::<Result<_, _>>()?,
                        )
                    },
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

fn run(args: &[String]) -> Result<String, String> {
    let a = Args::parse(&SPEC, args)?;
    let desc: ModelDesc = match (a.positional.as_slice(), a.value("--shape")) {
        ([path], None) => runner::open_model(path).map_err(|e| e.to_string())?,
        ([], shape) => {
            let weights = a.parsed("--weights", DType::Q4_0, DType::from_name, "a type name")?;
            runner::random_model(shape.unwrap_or("tiny"), weights, 1).map_err(|e| e.to_string())?
        }
        _ => return Err(format!("give one MODEL.gguf or --shape\n{USAGE}")),
    };
    let mut devices: Vec<Arc<dyn Device>> = a
        .all("--sim")
        .iter()
        .enumerate()
        .map(|(i, s)| sim(i, s))
        .collect::<Result<_, _>>()?;
    if a.flag("--real") {
        let (real, _) = options::devices(&Args::default())?;
        devices.extend(real);
    }
    if devices.is_empty() {
        return Err("no devices: give --sim MEMORY (repeatable) and/or --real".into());
    }
    let n_layer = desc.config.n_layer;
    let mut specs: Vec<String> = a.all("--placement").to_vec();
    if specs.is_empty() {
        specs = vec![
            "split=none".into(),
            "split=layer".into(),
            "split=row".into(),
            format!("ngl={}", n_layer.div_ceil(2)),
        ];
    }
    let run_tokens = a.parsed("--run", 0usize, |s| s.parse().ok(), "a token count")?;
    let n_ctx = a.parsed("--ctx", 4096usize, |s| s.parse().ok(), "a number")?;
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
        let _ = writeln!(out, "\n== placement {spec}");
        let opts = placement(spec)?;
        let cpu: Arc<dyn Device> = CpuDevice::new();
        let mode = if run_tokens > 0 && desc.has_data() {
            LoadMode::Real
        } else {
            LoadMode::DryRun
        };
        let model = match Model::load(&desc, &devices, cpu, &opts, mode, None) {
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
        if let Some(dir) = a.value("--dot") {
            let name = spec.replace([',', '=', ':', '/'], "_");
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
