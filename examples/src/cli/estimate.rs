//! `ggraph estimate MODEL`: what a model will cost on given GPUs, as Ollama
//! computes it (and, once the allocator exists, as ggraph's dry run does).

use ggraph::model::estimate::exact::ExactEstimate;
use ggraph::model::estimate::{Estimate, EstimateRequest, estimate};
use ggraph::model::ollama::{KvCacheType, OllamaEstimate};
use ggraph::util::{format_bytes, parse_bytes};

use super::Failure;
use super::args::{Args, Spec};
use super::model::{Loaded, load};

pub const USAGE: &str = "usage: ggraph estimate MODEL [--json] [options]

MODEL is a .gguf file, a GGUF header prefix (the file's first bytes, up to
the end of the tensor infos, tensor data absent) or a header JSON (see
`ggraph header`). Only the header is read.

options:
  --ctx N             context length per sequence (default 4096)
  --batch N           tokens per batch (default 512)
  --parallel N        sequences at once (default 1)
  --kv-type T         KV cache type: f16, q8_0, q4_0, f32 (default f16)
  --flash-attn MODE   auto, on or off (default auto)
  --gpu-free BYTES    free memory of a hypothetical GPU; repeat for GPUs
                      0, 1, ... (units: 24GiB, 8000MB, ...)
  --gpu-overhead B    memory to leave free on every GPU (default 0)
  --num-gpu N         layers to offload (default: as many as fit)
  --json              print one JSON object instead of a table

JSON: {\"model\": {...}, \"request\": {...}, \"ollama\": {...}, \"exact\": ...}
  ollama: what Ollama's GraphSize and llama-engine layout compute: \"kv\"
    (bytes per layer), \"kv_total\", \"graph_partial\" and \"graph_full\" (after
    Ollama's fallback), \"gpus\" ([{\"id\": \"0\", \"layers\": [...]}, ...] in
    --gpu-free order; layer block_count is the output layer),
    \"layers_on_gpu\", \"graph_kind\" (\"full\" or \"partial\"), and the request
    as Ollama adjusted it with \"notes\" saying why; {\"error\": ...} when
    Ollama's formulas cannot be applied to the model.
  exact: ggraph's own figures by a dry run of its loader, cache and
    allocator on simulated GPUs with the --gpu-free memories: \"devices\"
    (CPU first: name, layers, weights, kv, compute, total, free),
    \"n_gpu_layers\" (fitted, or --num-gpu), \"n_ctx\", \"splits\", \"fit\"
    (why); {\"error\": ...} for models ggraph cannot build.";

const SPEC: Spec = Spec {
    values: &[
        "--ctx",
        "--batch",
        "--parallel",
        "--kv-type",
        "--flash-attn",
        "--gpu-overhead",
        "--num-gpu",
    ],
    repeated: &["--gpu-free"],
    flags: &["--json"],
};

fn request(a: &Args) -> Result<EstimateRequest, String> {
    let d = EstimateRequest::default();
    let int = |s: &str| s.replace('_', "").parse::<u64>().ok();
    let ctx = a.parsed(
        "--ctx",
        d.ctx,
        |s| int(s).filter(|&n| n > 0),
        "a positive integer",
    )?;
    let batch = a.parsed(
        "--batch",
        d.batch,
        |s| int(s).filter(|&n| n > 0),
        "a positive integer",
    )?;
    let parallel = a.parsed(
        "--parallel",
        d.parallel,
        |s| s.parse::<u32>().ok().filter(|&n| n > 0),
        "a positive integer",
    )?;
    let kv_type = a.parsed(
        "--kv-type",
        d.kv_type,
        KvCacheType::from_name,
        "f16, q8_0, q4_0 or f32",
    )?;
    let flash_attention = a.parsed(
        "--flash-attn",
        None,
        |s| match s {
            "auto" => Some(None),
            "on" => Some(Some(true)),
            "off" => Some(Some(false)),
            _ => None,
        },
        "auto, on or off",
    )?;
    let gpu_free = a
        .all("--gpu-free")
        .iter()
        .map(|s| parse_bytes(s).map_err(|e| format!("--gpu-free: {e}")))
        .collect::<Result<Vec<u64>, String>>()?;
    let gpu_overhead = match a.value("--gpu-overhead") {
        None => 0,
        Some(s) => parse_bytes(s).map_err(|e| format!("--gpu-overhead: {e}"))?,
    };
    let num_gpu = a.parsed(
        "--num-gpu",
        None,
        |s| s.parse::<u32>().ok().map(Some),
        "a layer count",
    )?;
    Ok(EstimateRequest {
        ctx,
        batch,
        parallel,
        kv_type,
        flash_attention,
        gpu_free,
        gpu_overhead,
        num_gpu,
    })
}

/// The output of `ggraph estimate ARGS`.
pub fn render(args: &[String]) -> Result<String, Failure> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(format!("{USAGE}\n"));
    }
    let a = Args::parse(&SPEC, args).map_err(Failure::usage)?;
    match a.positional.len() {
        1 => {}
        0 => return Err(Failure::usage("MODEL is missing")),
        _ => {
            return Err(Failure::usage(format!(
                "one MODEL expected, got {:?}",
                a.positional
            )));
        }
    }
    let req = request(&a).map_err(Failure::usage)?;
    let model = load(&a.positional[0]).map_err(Failure::other)?;
    let mut est = estimate(&model.header, &req);
    let exact = exact(&model, &req);
    est.exact = Some(match &exact {
        Ok((e, reason)) => {
            let mut j = e.to_json();
            j["fit"] = reason.clone().into();
            j
        }
        Err(msg) => ggraph::model::serde_json::json!({ "error": msg }),
    });
    if a.flag("--json") {
        let mut j = est.to_json();
        j["model"]["path"] = model.path.display().to_string().into();
        j["model"]["source"] = model.source.name().into();
        Ok(format!("{j:#}\n"))
    } else {
        Ok(table(&model, &est, &exact))
    }
}

/// ggraph's own figures for the request: a dry run on simulated GPUs with
/// the `--gpu-free` memories, the layers fitted (or `--num-gpu`), less the
/// GPU overhead.
fn exact(model: &Loaded, req: &EstimateRequest) -> Result<(ExactEstimate, String), String> {
    use std::sync::Arc;

    use ggraph::backend::Device;
    use ggraph::context::ContextParams;
    use ggraph::model::desc::ModelDesc;
    use ggraph::model::estimate::exact::{FitRequest, fit};
    use ggraph::model::llama::Attention;
    use ggraph::model::placement::{GpuLayers, PlacementOptions};

    let desc = ModelDesc::from_header(&model.header, None).map_err(|e| e.to_string())?;
    let devices: Vec<Arc<dyn Device>> = req
        .gpu_free
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            ggraph_cpu::SimDevice::new(i, ggraph_cpu::SimConfig::gpu(b)) as Arc<dyn Device>
        })
        .collect();
    let kv = match req.kv_type {
        KvCacheType::F16 => ggraph::DType::F16,
        KvCacheType::Q8_0 => ggraph::DType::Q8_0,
        KvCacheType::Q4_0 => ggraph::DType::Q4_0,
        KvCacheType::F32 => ggraph::DType::F32,
    };
    let attention = match req.flash_attention {
        Some(false) if !kv.is_quantized() => Attention::Standard,
        _ => Attention::Flash,
    };
    let n_ctx = req
        .ctx
        .checked_mul(req.parallel as u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            format!(
                "--ctx {} x --parallel {} is too large a context",
                req.ctx, req.parallel
            )
        })?;
    let params = ContextParams {
        n_ctx,
        n_batch: req.batch as usize,
        n_ubatch: (req.batch as usize).clamp(1, n_ctx),
        n_seq_max: req.parallel as usize,
        attention,
        k_type: kv,
        v_type: kv,
        ..ContextParams::default()
    };
    let opts = PlacementOptions {
        n_gpu_layers: req
            .num_gpu
            .map_or(GpuLayers::All, |n| GpuLayers::Count(n as usize)),
        ..PlacementOptions::default()
    };
    let cpu: Arc<dyn Device> = ggraph_cpu::CpuDevice::new();
    let f = fit(
        &desc,
        &devices,
        cpu,
        &opts,
        &params,
        FitRequest {
            margin: req.gpu_overhead,
            layers_fixed: req.num_gpu.is_some(),
            fit_ctx: false,
            min_ctx: n_ctx,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok((f.estimate, f.reason))
}

/// `0-15, 20, 32`: layer indices as ranges.
pub fn ranges(layers: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            layers[i].to_string()
        } else {
            format!("{}-{}", layers[i], layers[j])
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn kv_summary(kv: &[u64]) -> String {
    match (kv.iter().min(), kv.iter().max()) {
        (Some(lo), Some(hi)) if lo == hi => format!("{} per layer", format_bytes(*lo)),
        (Some(lo), Some(hi)) => format!("{} to {} per layer", format_bytes(*lo), format_bytes(*hi)),
        _ => "no layers".into(),
    }
}

fn ollama_table(o: &OllamaEstimate, out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "ollama     ctx {}, batch {}, parallel {}, kv {}, flash attention {}",
        o.ctx,
        o.batch,
        o.parallel,
        o.kv_type.name(),
        o.flash_attention.name()
    );
    for n in &o.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    let _ = writeln!(
        out,
        "  kv cache   {} ({} layers), total {}",
        kv_summary(&o.kv),
        o.kv.len(),
        format_bytes(o.kv_total)
    );
    let _ = writeln!(
        out,
        "  graph      partial {}, full {}",
        format_bytes(o.graph_partial),
        format_bytes(o.graph_full)
    );
    if let Some(b) = o.reserved_buffer {
        let _ = writeln!(
            out,
            "  buffer     {} off every GPU (blk.0 + kv[0])",
            format_bytes(b)
        );
    }
    let _ = writeln!(
        out,
        "  {:<5} {:>11} {:<18} {:>11} {:>11} {:>11} {:>11}",
        "gpu", "free", "layers", "weights", "cache", "graph", "total"
    );
    for g in &o.gpus {
        let _ = writeln!(
            out,
            "  {:<5} {:>11} {:<18} {:>11} {:>11} {:>11} {:>11}",
            g.id,
            format_bytes(g.free_bytes),
            ranges(&g.layers),
            format_bytes(g.weights_bytes),
            format_bytes(g.cache_bytes),
            format_bytes(g.graph_bytes),
            format_bytes(g.total_bytes())
        );
    }
    let cpu_layers: Vec<usize> = (0..o.total_layers)
        .filter(|l| !o.gpus.iter().any(|g| g.layers.contains(l)))
        .collect();
    let _ = writeln!(
        out,
        "  {:<5} {:>11} {:<18} {:>11} {:>11} {:>11} {:>11}",
        "cpu",
        "",
        ranges(&cpu_layers),
        format_bytes(o.cpu_weights_bytes),
        format_bytes(o.cpu_cache_bytes),
        "",
        format_bytes(o.cpu_weights_bytes.wrapping_add(o.cpu_cache_bytes))
    );
    let _ = writeln!(
        out,
        "  {} of {} layers on GPUs (layer {} is the output), {} graph",
        o.layers_on_gpu,
        o.total_layers,
        o.total_layers.saturating_sub(1),
        o.graph_kind.name()
    );
}

fn table(
    model: &Loaded,
    est: &Estimate,
    exact: &Result<(ExactEstimate, String), String>,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "model      {} ({}): {}, {} layers, {} tensors, {} of weights",
        model.path.display(),
        model.source.name(),
        est.architecture.as_deref().unwrap_or("no architecture"),
        est.block_count.map_or("?".into(), |n| n.to_string()),
        est.n_tensors,
        format_bytes(est.tensor_bytes)
    );
    let r = &est.request;
    let _ = writeln!(
        out,
        "request    ctx {}, batch {}, parallel {}, kv {}, flash attention {}, gpu overhead {}",
        r.ctx,
        r.batch,
        r.parallel,
        r.kv_type.name(),
        match r.flash_attention {
            None => "auto",
            Some(true) => "on",
            Some(false) => "off",
        },
        format_bytes(r.gpu_overhead)
    );
    match &est.ollama {
        Ok(o) => ollama_table(o, &mut out),
        Err(e) => {
            let _ = writeln!(out, "ollama     cannot estimate: {e}");
        }
    }
    match exact {
        Ok((e, reason)) => {
            let _ = writeln!(
                out,
                "exact      ggraph's dry run: {} of {} layers on GPUs, {} split(s); {reason}",
                e.n_gpu_layers,
                est.block_count.map_or(0, |n| n + 1),
                e.splits
            );
            for line in e.table().lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "exact      cannot estimate: {e}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_lists_print_as_ranges() {
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        assert_eq!(ranges(&[]), "-");
        assert_eq!(ranges(&[5]), "5");
    }
}
