//! `ggraph plan MODEL`: what a model costs on each device and how the
//! scheduler will split it, by a dry run of the real load and allocator;
//! with `--fit`, the most layers (and context) that fit.

use std::fmt::Write;

use ggraph::model::desc::ModelDesc;
use ggraph::model::estimate::exact::{FitRequest, exact_estimate, fit};
use ggraph::model::placement::{GpuLayers, plan_placement_checked};
use ggraph::options;
use ggraph::util::{format_bytes, parse_bytes};

use super::Failure;
use super::args::{Args, Spec};
use super::model::load;

pub const USAGE: &str = "usage: ggraph plan MODEL [options]

MODEL is a .gguf, a GGUF header prefix or a header JSON; only the header
is read. The figures come from a dry run of ggraph's own loader, cache
and allocator: a real run allocates exactly this.

  --fit               choose the layers (and with --fit-ctx the context)
                      that fit every device, less --gpu-overhead
  --fit-ctx N         with --fit: shrink the context down to N before
                      offloading fewer layers
  --gpu-overhead B    bytes to leave free on every GPU (default 0)
";

const SPEC: Spec = Spec {
    values: &["--gpu-overhead", "--fit-ctx"],
    repeated: &[],
    flags: &["--fit"],
};

pub fn usage() -> String {
    format!(
        "{USAGE}\n{}\n\n{}\n\n{}",
        options::DEVICE_HELP,
        options::PLACEMENT_HELP,
        options::CONTEXT_HELP
    )
}

pub fn render(args: &[String]) -> Result<String, Failure> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(usage());
    }
    let specs = [
        &SPEC,
        &options::DEVICE_SPEC,
        &options::PLACEMENT_SPEC,
        &options::CONTEXT_SPEC,
    ];
    let a = Args::parse_all(&specs, args).map_err(Failure::usage)?;
    let [path] = a.positional.as_slice() else {
        return Err(Failure::usage("one MODEL expected"));
    };
    let (devices, cpu) = options::devices(&a).map_err(Failure::usage)?;
    let opts = options::placement(&a).map_err(Failure::usage)?;
    let params = options::context(&a).map_err(Failure::usage)?;
    let margin = match a.value("--gpu-overhead") {
        None => 0,
        Some(s) => parse_bytes(s).map_err(|e| Failure::usage(format!("--gpu-overhead: {e}")))?,
    };
    let model = load(path).map_err(Failure::other)?;
    let desc = ModelDesc::from_header(&model.header, None).map_err(Failure::other)?;
    let mut out = String::new();
    let c = &desc.config;
    let _ = writeln!(
        out,
        "model    {}: llama, {} layers, n_embd {}, {} heads ({} KV), n_ff {}, vocab {}, {} of weights",
        model.path.display(),
        c.n_layer,
        c.n_embd,
        c.n_head,
        c.n_head_kv,
        c.n_ff,
        c.n_vocab,
        format_bytes(desc.total_bytes())
    );
    let _ = writeln!(
        out,
        "context  {} cells ({} sequence(s)), ubatch {}, {:?} attention, K {} V {}",
        params.n_ctx,
        params.n_seq_max,
        params.n_ubatch,
        params.attention,
        params.k_type,
        params.v_type
    );
    let devs: Vec<String> = devices
        .iter()
        .map(|d| format!("{} ({})", d.name(), d.description()))
        .collect();
    let _ = writeln!(
        out,
        "devices  {}",
        if devs.is_empty() {
            "CPU only".to_string()
        } else {
            devs.join(", ")
        }
    );
    let estimate = if a.flag("--fit") {
        let req = FitRequest {
            margin,
            layers_fixed: a.value("--n-gpu-layers").is_some(),
            fit_ctx: a.value("--fit-ctx").is_some(),
            min_ctx: a
                .parsed("--fit-ctx", 256, |s| s.parse().ok(), "a number")
                .map_err(Failure::usage)?,
        };
        let f = fit(&desc, &devices, cpu, &opts, &params, req).map_err(Failure::other)?;
        let _ = writeln!(out, "fit      {}", f.reason);
        f.estimate
    } else {
        exact_estimate(&desc, &devices, cpu, &opts, &params).map_err(Failure::other)?
    };
    let layers = match opts.n_gpu_layers {
        GpuLayers::All if !a.flag("--fit") => "all".to_string(),
        _ => estimate.n_gpu_layers.to_string(),
    };
    let _ = writeln!(
        out,
        "layers   {layers} of {} on GPUs, context {}\n",
        c.n_layer + 1,
        estimate.n_ctx
    );
    out.push_str(&estimate.table());
    for (name, short) in estimate.over(margin) {
        let _ = writeln!(out, "does not fit: {name} is {} short", format_bytes(short));
    }
    if !opts.overrides.is_empty() {
        let free: Vec<u64> = devices.iter().map(|d| d.memory().free_bytes).collect();
        let plan = plan_placement_checked(&desc, devices.len(), &free, &opts, false)
            .map_err(Failure::other)?;
        let _ = writeln!(out, "\noverrides (first match wins):");
        for (o, matched) in opts.overrides.iter().zip(&plan.override_matches) {
            let shown: Vec<&str> = matched.iter().take(6).map(String::as_str).collect();
            let more = matched.len().saturating_sub(shown.len());
            let _ = writeln!(
                out,
                "  {} -> {:?}: {} tensor(s){}{}",
                o.pattern,
                o.target,
                matched.len(),
                if shown.is_empty() {
                    String::new()
                } else {
                    format!(": {}", shown.join(", "))
                },
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
        }
    }
    let _ = writeln!(out, "\n{} split(s):", estimate.splits);
    for (i, s) in estimate.split_lines.iter().enumerate() {
        let _ = writeln!(out, "  {i}: {s}");
    }
    Ok(out)
}
