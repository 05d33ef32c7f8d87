//! Command-line option groups the tools share: devices, placement and
//! context settings, in llama.cpp's spelling where it has one.

use std::sync::Arc;

use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_core::util::parse_bytes;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::context::ContextParams;
use ggraph_model::llama::Attention;
use ggraph_model::placement::{
    GpuLayers, Override, OverrideTarget, PlacementOptions, SplitMode, TensorSplit,
};

use crate::args::{Args, Spec};

/// Device selection.
pub const DEVICE_SPEC: Spec = Spec {
    values: &["--threads"],
    repeated: &["--gpu-free"],
    flags: &["--cpu-only"],
};

pub const DEVICE_HELP: &str = "\
devices:
  --gpu-free BYTES    a hypothetical GPU with this much free memory (a
                      simulated device); repeat for GPUs 0, 1, ...
                      (default: the GPUs found)
  --cpu-only          no GPU, found or simulated
  --threads N         CPU threads (default: one per core)";

/// Placement.
pub const PLACEMENT_SPEC: Spec = Spec {
    values: &[
        "--n-gpu-layers",
        "--split-mode",
        "--tensor-split",
        "--main-device",
        "--n-cpu-moe",
    ],
    repeated: &["--override"],
    flags: &["--no-kv-offload", "--no-op-offload", "--cpu-moe"],
};

pub const PLACEMENT_HELP: &str = "\
placement:
  --n-gpu-layers N    layers on the GPUs, counting the output layer, or
                      'all' (default all)
  --split-mode M      none, layer or row (default layer)
  --tensor-split S    shares per GPU as fractions (3,1) or byte budgets
                      (12GiB,8GiB) (default: by free memory)
  --main-device I     the GPU of row split's other tensors (default 0)
  --no-kv-offload     keep the KV cache on the host
  --no-op-offload     never lift host-weight ops onto a GPU
  --override RE=DEV   tensors matching RE on DEV (cpu or a GPU index);
                      first match wins; repeatable
  --cpu-moe           every MoE expert tensor on the host
  --n-cpu-moe N       the expert tensors of the first N layers on the host";

/// Context.
pub const CONTEXT_SPEC: Spec = Spec {
    values: &[
        "--ctx",
        "--batch",
        "--ubatch",
        "--parallel",
        "--kv-type",
        "--flash-attn",
    ],
    repeated: &[],
    flags: &[],
};

pub const CONTEXT_HELP: &str = "\
context:
  --ctx N             context length per sequence (default 4096)
  --batch N           tokens per decode call (default 2048)
  --ubatch N          tokens per graph (default: batch, at most 512)
  --parallel N        sequences at once (default 1; the cache holds ctx x N)
  --kv-type T         f16, q8_0, q4_0 or f32 (default f16)
  --flash-attn MODE   auto, on or off (default auto: on)";

fn int(a: &Args, name: &str, default: usize) -> Result<usize, String> {
    a.parsed(
        name,
        default,
        |s| s.replace('_', "").parse().ok(),
        "a number",
    )
}

/// GPU-class devices in order, and the CPU.
pub type Devices = (Vec<Arc<dyn Device>>, Arc<dyn Device>);

/// The GPU-class devices to use and the CPU.
pub fn devices(a: &Args) -> Result<Devices, String> {
    let cpu: Arc<dyn Device> = match a.value("--threads") {
        Some(t) => {
            let n: usize = t
                .parse()
                .map_err(|_| format!("--threads {t}: expected a number"))?;
            CpuDevice::with_threads(n).map_err(|e| e.to_string())?
        }
        None => CpuDevice::new(),
    };
    if a.flag("--cpu-only") {
        return Ok((Vec::new(), cpu));
    }
    let free = a.all("--gpu-free");
    if !free.is_empty() {
        let sims = free
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let bytes = parse_bytes(s).map_err(|e| format!("--gpu-free: {e}"))?;
                Ok(SimDevice::new(i, SimConfig::gpu(bytes)) as Arc<dyn Device>)
            })
            .collect::<Result<Vec<_>, String>>()?;
        return Ok((sims, cpu));
    }
    let gpus = crate::registry()
        .devices()
        .into_iter()
        .filter(|d| d.kind().is_gpu_class())
        .collect();
    Ok((gpus, cpu))
}

/// Placement options from the command line.
pub fn placement(a: &Args) -> Result<PlacementOptions, String> {
    let n_gpu_layers = match a.value("--n-gpu-layers") {
        None | Some("all") => GpuLayers::All,
        Some(s) => GpuLayers::Count(
            s.parse()
                .map_err(|_| format!("--n-gpu-layers {s}: expected a number or all"))?,
        ),
    };
    let split_mode = match a.value("--split-mode").unwrap_or("layer") {
        "none" => SplitMode::None,
        "layer" => SplitMode::Layer,
        "row" => SplitMode::Row,
        s => return Err(format!("--split-mode {s}: expected none, layer or row")),
    };
    let tensor_split = match a.value("--tensor-split") {
        None => None,
        Some(s) => {
            let parts: Vec<&str> = s.split(',').map(str::trim).collect();
            let has_unit = parts
                .iter()
                .any(|p| p.chars().any(|c| c.is_ascii_alphabetic()));
            Some(if has_unit {
                TensorSplit::Bytes(
                    parts
                        .iter()
                        .map(|p| parse_bytes(p).map_err(|e| format!("--tensor-split: {e}")))
                        .collect::<Result<_, _>>()?,
                )
            } else {
                TensorSplit::Fractions(
                    parts
                        .iter()
                        .map(|p| {
                            p.parse::<f64>()
                                .map_err(|_| format!("--tensor-split: '{p}' is not a number"))
                        })
                        .collect::<Result<_, _>>()?,
                )
            })
        }
    };
    let mut overrides = Vec::new();
    for o in a.all("--override") {
        let (re, dev) = o
            .rsplit_once('=')
            .ok_or_else(|| format!("--override {o}: expected REGEX=DEVICE"))?;
        let target = match dev {
            "cpu" | "CPU" | "host" => OverrideTarget::Host,
            d => OverrideTarget::Device(
                d.trim_start_matches("gpu")
                    .parse()
                    .map_err(|_| format!("--override {o}: device '{d}' is cpu or a GPU index"))?,
            ),
        };
        overrides.push(Override::new(re, target).map_err(|e| e.to_string())?);
    }
    let mut opts = PlacementOptions {
        n_gpu_layers,
        split_mode,
        tensor_split,
        main_device: int(a, "--main-device", 0)?,
        offload_kqv: !a.flag("--no-kv-offload"),
        op_offload: !a.flag("--no-op-offload"),
        overrides,
    };
    if a.flag("--cpu-moe") {
        opts = opts.cpu_moe();
    }
    if let Some(n) = a.value("--n-cpu-moe") {
        let n: usize = n
            .parse()
            .map_err(|_| format!("--n-cpu-moe {n}: expected a number"))?;
        opts = opts.n_cpu_moe(n);
    }
    Ok(opts)
}

/// Context settings from the command line.
pub fn context(a: &Args) -> Result<ContextParams, String> {
    let d = ContextParams::default();
    let parallel = int(a, "--parallel", 1)?.max(1);
    let ctx = int(a, "--ctx", 4096)?.max(1);
    let kv = match a
        .value("--kv-type")
        .unwrap_or("f16")
        .to_ascii_lowercase()
        .as_str()
    {
        "f16" => DType::F16,
        "f32" => DType::F32,
        "q8_0" => DType::Q8_0,
        "q4_0" => DType::Q4_0,
        s => return Err(format!("--kv-type {s}: expected f16, q8_0, q4_0 or f32")),
    };
    let attention = match a.value("--flash-attn").unwrap_or("auto") {
        "auto" | "on" => Attention::Flash,
        "off" => Attention::Standard,
        s => return Err(format!("--flash-attn {s}: expected auto, on or off")),
    };
    if attention == Attention::Standard && kv.is_quantized() {
        return Err(format!(
            "a {kv} V cache needs flash attention (--flash-attn on)"
        ));
    }
    let n_ctx = ctx
        .checked_mul(parallel)
        .ok_or_else(|| format!("--ctx {ctx} x --parallel {parallel} is too large a context"))?;
    let n_batch = int(a, "--batch", d.n_batch)?.max(1);
    let n_ubatch = int(a, "--ubatch", n_batch.min(d.n_ubatch))?.clamp(1, n_ctx);
    Ok(ContextParams {
        n_ctx,
        n_batch,
        n_ubatch,
        n_seq_max: parallel,
        attention,
        k_type: kv,
        v_type: kv,
        ..d
    })
}
