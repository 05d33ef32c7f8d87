//! `ggraph plan MODEL`: what a model costs on each device and how the
//! scheduler will split it, by a dry run of the real load and allocator;
//! with `--fit`, the most layers (and context) that fit.

use std::fmt::Write;

use ggraph::model::desc::ModelDesc;
use ggraph::model::estimate::exact::{exact_estimate, fit};
use ggraph::model::placement::{GpuLayers, plan_placement_checked};
use ggraph::options::{ContextArgs, DeviceArgs, FitArgs, LLAMA_CPP_SPELLINGS, PlacementArgs};
use ggraph::util::format_bytes;

use super::Failure;
use super::model::load;

// `ggraph plan`'s options (its help text is the subcommand's doc).
#[derive(clap::Args, Clone, Debug)]
#[command(after_help = LLAMA_CPP_SPELLINGS)]
pub struct PlanArgs {
    /// A .gguf, a GGUF header prefix or a header JSON
    #[arg(value_name = "MODEL")]
    pub model: String,
    #[command(flatten)]
    pub fit: FitArgs,
    #[command(flatten)]
    pub devices: DeviceArgs,
    #[command(flatten)]
    pub placement: PlacementArgs,
    #[command(flatten)]
    pub context: ContextArgs,
}

/// The output of `ggraph plan`.
pub fn render(a: &PlanArgs) -> Result<String, Failure> {
    let path = &a.model;
    let (devices, cpu) = a.devices.devices().map_err(Failure::usage)?;
    a.placement.check(devices.len()).map_err(Failure::usage)?;
    let opts = a.placement.options();
    let params = a.context.params().map_err(Failure::usage)?;
    let margin = a.fit.fit_margin;
    let model = load(path).map_err(Failure::other)?;
    let desc = ModelDesc::from_header(&model.header, None).map_err(Failure::other)?;
    // the fit first: the context it chose heads the plan
    let (estimate, params, fit_reason) = if a.fit.fit {
        let req = a.fit.request(&a.placement, &params);
        let f = fit(&desc, &devices, cpu, &opts, &params, req).map_err(Failure::other)?;
        (f.estimate, f.params, Some(f.reason))
    } else {
        let e = exact_estimate(&desc, &devices, cpu, &opts, &params).map_err(Failure::other)?;
        (e, params, None)
    };
    let mut out = String::new();
    let c = &desc.config;
    let _ = writeln!(
        out,
        "model    {}: {}, {} layers, n_embd {}, {} heads ({} KV), n_ff {}, vocab {}, {} of weights",
        model.path.display(),
        c.arch.name,
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
    if let Some(reason) = &fit_reason {
        let _ = writeln!(out, "fit      {reason}");
    }
    let layers = match opts.n_gpu_layers {
        _ if devices.is_empty() => "none".to_string(),
        GpuLayers::All if !a.fit.fit => "all".to_string(),
        _ => estimate.n_gpu_layers.to_string(),
    };
    let _ = writeln!(
        out,
        "layers   {layers} of {} on GPUs{}, context {}\n",
        c.n_layer + 1,
        if devices.is_empty() { " (no GPU)" } else { "" },
        estimate.n_ctx
    );
    out.push_str(&estimate.table());
    let bufts: Vec<String> = estimate
        .weight_buffer_types
        .iter()
        .map(|(n, b)| format!("{n} {}", format_bytes(*b)))
        .collect();
    let _ = writeln!(out, "weights by buffer type: {}", bufts.join(", "));
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
