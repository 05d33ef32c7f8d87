//! `ggraph estimate MODEL`: what a model will cost on given GPUs, as Ollama
//! computes it (and, once the allocator exists, as ggraph's dry run does).

use ggraph::model::estimate::exact::{ExactEstimate, layer_ranges as ranges};
use ggraph::model::estimate::{Estimate, EstimateRequest, estimate};
use ggraph::model::ollama::{KvCacheType, OllamaEstimate};
use ggraph::options::FlashAttn;
use ggraph::util::format_bytes;
use ggraph::values;

use super::Failure;
use super::model::{Loaded, load};

const JSON_HELP: &str = "\
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

fn kv_cache_type(s: &str) -> Result<KvCacheType, String> {
    KvCacheType::from_name(s).ok_or_else(|| format!("'{s}' is not f16, q8_0, q4_0 or f32"))
}

fn positive_u64(s: &str) -> Result<u64, String> {
    values::positive(s).map(|n| n as u64)
}

fn positive_u32(s: &str) -> Result<u32, String> {
    values::positive(s).and_then(|n| u32::try_from(n).map_err(|_| format!("'{s}' is too large")))
}

fn layer_count(s: &str) -> Result<u32, String> {
    values::count(s).and_then(|n| u32::try_from(n).map_err(|_| format!("'{s}' is too large")))
}

// `ggraph estimate`'s options (its help text is the subcommand's doc).
#[derive(clap::Args, Clone, Debug)]
#[command(after_long_help = JSON_HELP)]
pub struct EstimateArgs {
    /// A .gguf, a GGUF header prefix or a header JSON
    #[arg(value_name = "MODEL")]
    pub model: String,
    /// Context length per sequence
    #[arg(short = 'c', long = "ctx", visible_alias = "ctx-size", value_name = "N",
          default_value_t = EstimateRequest::default().ctx, value_parser = positive_u64)]
    pub ctx: u64,
    /// Tokens per batch
    #[arg(short = 'b', long = "batch", visible_alias = "batch-size", value_name = "N",
          default_value_t = EstimateRequest::default().batch, value_parser = positive_u64)]
    pub batch: u64,
    /// Sequences at once
    #[arg(long, visible_alias = "np", value_name = "N",
          default_value_t = EstimateRequest::default().parallel, value_parser = positive_u32)]
    pub parallel: u32,
    /// KV cache type: f16, q8_0, q4_0, f32
    #[arg(long = "kv-type", value_name = "T", default_value = "f16", value_parser = kv_cache_type)]
    pub kv_type: KvCacheType,
    /// Flash attention
    #[arg(long = "flash-attn", visible_alias = "fa", value_name = "MODE", value_enum,
          default_value_t = FlashAttn::Auto)]
    pub flash_attn: FlashAttn,
    /// Free memory of a hypothetical GPU; repeat for GPUs 0, 1, ... (units:
    /// 24GiB, 8000MB, ...)
    #[arg(long = "gpu-free", value_name = "BYTES", value_parser = values::size)]
    pub gpu_free: Vec<u64>,
    /// Memory to leave free on every GPU
    #[arg(long = "gpu-overhead", value_name = "BYTES", default_value = "0",
          value_parser = values::size)]
    pub gpu_overhead: u64,
    /// The exact estimate also on the devices of llama.cpp
    /// `ggml-rpc-server`s (before the --gpu-free GPUs; their memory is
    /// what the servers report)
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    pub rpc: Option<String>,
    /// Layers to offload [default: as many as fit]
    #[arg(long = "num-gpu", value_name = "N", value_parser = layer_count)]
    pub num_gpu: Option<u32>,
    /// Print one JSON object instead of a table (its members: --help)
    #[arg(long)]
    pub json: bool,
}

impl EstimateArgs {
    fn request(&self) -> EstimateRequest {
        EstimateRequest {
            ctx: self.ctx,
            batch: self.batch,
            parallel: self.parallel,
            kv_type: self.kv_type,
            flash_attention: match self.flash_attn {
                FlashAttn::Auto => None,
                FlashAttn::On => Some(true),
                FlashAttn::Off => Some(false),
            },
            gpu_free: self.gpu_free.clone(),
            gpu_overhead: self.gpu_overhead,
            num_gpu: self.num_gpu,
        }
    }
}

/// The output of `ggraph estimate`.
pub fn render(a: &EstimateArgs) -> Result<String, Failure> {
    let req = a.request();
    let model = load(&a.model).map_err(Failure::other)?;
    let mut est = estimate(&model.header, &req);
    let remote = match &a.rpc {
        Some(list) => ggraph::options::rpc_devices(list).map_err(Failure::other)?,
        None => Vec::new(),
    };
    let exact = exact(&model, &req, remote);
    est.exact = Some(match &exact {
        Ok((e, reason)) => {
            let mut j = e.to_json();
            j["fit"] = reason.clone().into();
            j
        }
        Err(msg) => ggraph::model::serde_json::json!({ "error": msg }),
    });
    if a.json {
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
fn exact(
    model: &Loaded,
    req: &EstimateRequest,
    remote: Vec<std::sync::Arc<dyn ggraph::backend::Device>>,
) -> Result<(ExactEstimate, String), String> {
    use std::sync::Arc;

    use ggraph::backend::Device;
    use ggraph::context::ContextParams;
    use ggraph::model::arch::Attention;
    use ggraph::model::desc::ModelDesc;
    use ggraph::model::estimate::exact::{FitRequest, fit};
    use ggraph::model::placement::{GpuLayers, PlacementOptions};

    let desc = ModelDesc::from_header(&model.header, None).map_err(|e| e.to_string())?;
    let mut devices: Vec<Arc<dyn Device>> = remote;
    devices.extend(req.gpu_free.iter().enumerate().map(|(i, &b)| {
        ggraph_cpu::SimDevice::new(i, ggraph_cpu::SimConfig::gpu(b)) as Arc<dyn Device>
    }));
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
