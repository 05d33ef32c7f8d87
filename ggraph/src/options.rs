//! Command-line option groups the tools share: devices, placement and
//! context settings, in llama.cpp's spelling where it has one (its
//! single-dash names, `-ngl 99`, `-ts 3,1`, are accepted too: see
//! [`crate::tool`]).

use std::sync::Arc;

use clap::ValueEnum;
use ggraph_core::DType;
use ggraph_core::backend::{Device, DeviceKind};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::Attention;
use ggraph_model::context::ContextParams;
use ggraph_model::estimate::exact::FitRequest;
use ggraph_model::placement::{GpuLayers, Override, PlacementOptions, SplitMode, TensorSplit};

use crate::values;

/// For the help of a program that takes the placement or context options.
pub const LLAMA_CPP_SPELLINGS: &str = "\
llama.cpp's single-dash spellings work too: -ngl, -sm, -ts, -mg, -nkvo, -ot, -cmoe, -ncmoe,
-ub, -np, -fa (as do -c, -b, -t).";

/// Device selection.
#[derive(clap::Args, Clone, Debug, Default)]
#[command(next_help_heading = "Devices")]
pub struct DeviceArgs {
    /// A hypothetical GPU with this much free memory (a simulated device);
    /// repeat for GPUs 0, 1, ... [default: the GPUs found]
    #[arg(long = "gpu-free", value_name = "BYTES", value_parser = values::size)]
    pub gpu_free: Vec<u64>,
    /// No GPU, found or simulated
    #[arg(long, conflicts_with = "rpc")]
    pub cpu_only: bool,
    /// The devices of llama.cpp `ggml-rpc-server`s, before the other GPUs
    /// (as llama.cpp's --rpc)
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]", value_parser = values::rpc_list)]
    pub rpc: Option<String>,
    /// CPU threads [default: one per core]
    #[arg(short = 't', long, value_name = "N", value_parser = values::threads)]
    pub threads: Option<usize>,
    /// Use these devices, in this order, instead of the GPUs found (names
    /// as `ggraph devices` lists them: wgpu:0, cuda:1, ...); a software
    /// driver such as Mesa's lavapipe is used only when named here or with
    /// GGRAPH_SOFTWARE_GPUS=1
    #[arg(long = "device", visible_alias = "dev", value_name = "NAME[,NAME...]",
          value_delimiter = ',', conflicts_with_all = ["cpu_only", "gpu_free"])]
    pub device: Vec<String>,
}

/// Fitting a model to the devices' memory: the same options, defaults and
/// search in every tool (`ggraph plan --fit` prints what `llama --fit`
/// then allocates).
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Fit")]
pub struct FitArgs {
    /// Offload as many layers as fit every GPU's free memory less
    /// --fit-margin (and with --fit-ctx, shrink the context first)
    #[arg(long)]
    pub fit: bool,
    /// With --fit: shrink the context down to N cells before offloading
    /// fewer layers
    #[arg(long = "fit-ctx", value_name = "N", value_parser = values::positive, requires = "fit")]
    pub fit_ctx: Option<usize>,
    /// Bytes --fit leaves free on every GPU, and the least free memory a
    /// plan counts as fitting (llama.cpp's -fitt/--fit-target)
    #[arg(long = "fit-margin", visible_alias = "fit-target", value_name = "BYTES",
          default_value = DEFAULT_FIT_MARGIN, value_parser = values::size)]
    pub fit_margin: u64,
}

/// `--fit-margin`'s default.
pub const DEFAULT_FIT_MARGIN: &str = "256MiB";

impl FitArgs {
    /// The fit's request for a placement whose layers the user may have
    /// fixed (`-ngl`) and the requested context.
    pub fn request(&self, placement: &PlacementArgs, params: &ContextParams) -> FitRequest {
        FitRequest {
            margin: self.fit_margin,
            layers_fixed: placement.n_gpu_layers.is_some(),
            fit_ctx: self.fit_ctx.is_some(),
            min_ctx: self.fit_ctx.unwrap_or(params.n_ctx),
        }
    }
}

/// GPU-class devices in order, and the CPU.
pub type Devices = (Vec<Arc<dyn Device>>, Arc<dyn Device>);

impl DeviceArgs {
    /// The GPU-class devices to use and the CPU.
    pub fn devices(&self) -> Result<Devices, String> {
        let cpu: Arc<dyn Device> = match self.threads {
            Some(n) => CpuDevice::with_threads(n).map_err(|e| e.to_string())?,
            None => CpuDevice::new(),
        };
        if self.cpu_only {
            return Ok((Vec::new(), cpu));
        }
        let mut gpus = self.rpc_devices()?;
        if !self.device.is_empty() {
            gpus.extend(named_devices(&self.device)?);
        } else if !self.gpu_free.is_empty() {
            gpus.extend(
                self.gpu_free
                    .iter()
                    .enumerate()
                    .map(|(i, &bytes)| SimDevice::new(i, SimConfig::gpu(bytes)) as Arc<dyn Device>),
            );
        } else {
            gpus.extend(found_gpus());
        }
        Ok((gpus, cpu))
    }

    /// The devices of the `--rpc` servers (none without the option).
    pub fn rpc_devices(&self) -> Result<Vec<Arc<dyn Device>>, String> {
        match &self.rpc {
            Some(list) => rpc_devices(list),
            None => Ok(Vec::new()),
        }
    }
}

/// The devices of the servers of an `--rpc` list.
pub fn rpc_devices(list: &str) -> Result<Vec<Arc<dyn Device>>, String> {
    ggraph_rpc::connect_all(list, ggraph_rpc::RpcOptions::default()).map_err(|e| e.to_string())
}

/// The GPU-class devices of every compiled-in backend, but software
/// drivers running on the CPU (Mesa's lavapipe: slower than the CPU
/// backend), unless `GGRAPH_SOFTWARE_GPUS=1` asks for them too; of those,
/// the ones [`default_gpus`] keeps.
pub fn found_gpus() -> Vec<Arc<dyn Device>> {
    let software = std::env::var("GGRAPH_SOFTWARE_GPUS").is_ok_and(|v| v == "1");
    default_gpus(
        crate::registry()
            .devices()
            .into_iter()
            .filter(|d| d.kind().is_gpu_class() && (software || !d.is_software()))
            .collect(),
    )
}

/// The devices a model uses by default of the GPU-class devices `found`,
/// as llama.cpp picks them: the discrete ones (and other accelerators);
/// integrated GPUs only where there is none, and only those of the first
/// backend that reports one (an integrated GPU seen by two backends, CUDA
/// and Vulkan, counts once). `--device` names any of them.
pub fn default_gpus(found: Vec<Arc<dyn Device>>) -> Vec<Arc<dyn Device>> {
    let (integrated, discrete): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|d| d.kind() == DeviceKind::IntegratedGpu);
    if !discrete.is_empty() {
        return discrete;
    }
    let backend = |d: &Arc<dyn Device>| d.name().split(':').next().unwrap_or_default().to_string();
    let first = integrated.first().map(backend);
    integrated
        .into_iter()
        .filter(|d| Some(backend(d)) == first)
        .collect()
}

/// The GPU-class devices of every compiled-in backend with these names,
/// in this order (software drivers included): `--device`.
pub fn named_devices(names: &[String]) -> Result<Vec<Arc<dyn Device>>, String> {
    let all: Vec<Arc<dyn Device>> = crate::registry()
        .devices()
        .into_iter()
        .filter(|d| d.kind().is_gpu_class())
        .collect();
    names
        .iter()
        .map(|name| {
            all.iter()
                .find(|d| d.name() == name)
                .cloned()
                .ok_or_else(|| {
                    let found: Vec<&str> = all.iter().map(|d| d.name()).collect();
                    format!(
                        "--device {name}: no such GPU-class device (found: {})",
                        if found.is_empty() {
                            "none".to_string()
                        } else {
                            found.join(", ")
                        }
                    )
                })
        })
        .collect()
}

/// How offloaded layers spread over the GPUs.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitModeArg {
    /// Everything offloaded on the main GPU
    None,
    /// Whole layers per GPU
    Layer,
    /// Every matrix's rows across the GPUs
    Row,
}

impl From<SplitModeArg> for SplitMode {
    fn from(m: SplitModeArg) -> SplitMode {
        match m {
            SplitModeArg::None => SplitMode::None,
            SplitModeArg::Layer => SplitMode::Layer,
            SplitModeArg::Row => SplitMode::Row,
        }
    }
}

/// Placement.
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Placement")]
pub struct PlacementArgs {
    /// Layers on the GPUs, counting the output layer, or 'all' [default: all]
    #[arg(long = "n-gpu-layers", visible_alias = "ngl", value_name = "N",
          value_parser = values::gpu_layers)]
    pub n_gpu_layers: Option<GpuLayers>,
    /// How offloaded layers spread over the GPUs
    #[arg(long = "split-mode", visible_alias = "sm", value_name = "MODE",
          value_enum, default_value_t = SplitModeArg::Layer)]
    pub split_mode: SplitModeArg,
    /// Shares per GPU: proportions of the offloaded layers, counted as
    /// llama.cpp's -ts counts them (3,1: three layers on GPU 0 for each on
    /// GPU 1; rows with --split-mode row), or byte budgets (12GiB,8GiB)
    /// [default: by free memory, each layer weighed by its bytes]
    #[arg(long = "tensor-split", visible_alias = "ts", value_name = "LIST",
          value_parser = values::tensor_split)]
    pub tensor_split: Option<TensorSplit>,
    /// The GPU of row split's other tensors
    #[arg(long = "main-device", visible_aliases = ["main-gpu", "mg"], value_name = "I",
          default_value_t = 0, value_parser = values::count)]
    pub main_device: usize,
    /// Keep the KV cache on the host
    #[arg(long = "no-kv-offload", visible_alias = "nkvo")]
    pub no_kv_offload: bool,
    /// Never lift host-weight ops onto a GPU
    #[arg(long = "no-op-offload")]
    pub no_op_offload: bool,
    /// Tensors matching RE on DEV (cpu or a GPU index); first match wins;
    /// repeatable
    #[arg(long = "override", visible_aliases = ["override-tensor", "ot"],
          value_name = "RE=DEV", value_parser = values::tensor_override)]
    pub overrides: Vec<Override>,
    /// Keep weights in GGUF's layout: no repacked rows for the CPU
    /// (`CPU_REPACK`)
    #[arg(long = "no-repack", visible_alias = "nr")]
    pub no_repack: bool,
    /// Every MoE expert tensor on the host
    #[arg(long = "cpu-moe", visible_alias = "cmoe")]
    pub cpu_moe: bool,
    /// The expert tensors of the first N layers on the host
    #[arg(long = "n-cpu-moe", visible_alias = "ncmoe", value_name = "N",
          value_parser = values::count)]
    pub n_cpu_moe: Option<usize>,
}

impl PlacementArgs {
    /// Checks the options that name GPUs against the GPUs there are.
    pub fn check(&self, gpus: usize) -> Result<(), String> {
        if self.main_device > 0 && self.main_device >= gpus {
            return Err(format!(
                "--main-device {}: {}",
                self.main_device,
                match gpus {
                    0 => "there is no GPU".to_string(),
                    1 => "there is one GPU, 0".to_string(),
                    n => format!("there are {n} GPUs, 0 to {}", n - 1),
                }
            ));
        }
        Ok(())
    }

    /// Placement options from the command line.
    pub fn options(&self) -> PlacementOptions {
        let mut opts = PlacementOptions {
            n_gpu_layers: self.n_gpu_layers.unwrap_or(GpuLayers::All),
            split_mode: self.split_mode.into(),
            tensor_split: self.tensor_split.clone(),
            main_device: self.main_device,
            offload_kqv: !self.no_kv_offload,
            op_offload: !self.no_op_offload,
            overrides: self.overrides.clone(),
            repack: !self.no_repack,
        };
        if self.cpu_moe {
            opts = opts.cpu_moe();
        }
        if let Some(n) = self.n_cpu_moe {
            opts = opts.n_cpu_moe(n);
        }
        opts
    }
}

/// A KV cache type.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum KvType {
    /// 16-bit floats, 2 bytes a value (llama.cpp's default)
    F16,
    /// 8-bit blocks, 1.06 bytes a value
    #[value(name = "q8_0")]
    Q8_0,
    /// 4-bit blocks, 0.56 bytes a value
    #[value(name = "q4_0")]
    Q4_0,
    /// 32-bit floats, 4 bytes a value
    F32,
}

impl From<KvType> for DType {
    fn from(t: KvType) -> DType {
        match t {
            KvType::F16 => DType::F16,
            KvType::Q8_0 => DType::Q8_0,
            KvType::Q4_0 => DType::Q4_0,
            KvType::F32 => DType::F32,
        }
    }
}

/// Flash attention: auto, on or off.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashAttn {
    /// ggraph's choice (flash attention)
    Auto,
    /// Fused attention: the score matrix is never stored
    On,
    /// Scores, softmax and product as separate ops (not with a quantised
    /// V cache)
    Off,
}

/// Context.
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Context")]
pub struct ContextArgs {
    /// Context length per sequence
    #[arg(short = 'c', long = "ctx", visible_alias = "ctx-size", value_name = "N",
          default_value_t = 4096, value_parser = values::positive)]
    pub ctx: usize,
    /// Tokens per decode call
    #[arg(short = 'b', long = "batch", visible_alias = "batch-size", value_name = "N",
          default_value_t = ContextParams::default().n_batch, value_parser = values::positive)]
    pub batch: usize,
    /// Tokens per graph [default: --batch, at most 512]
    #[arg(long = "ubatch", visible_aliases = ["ubatch-size", "ub"], value_name = "N",
          value_parser = values::positive)]
    pub ubatch: Option<usize>,
    /// Sequences at once (the cache holds ctx x N)
    #[arg(long = "parallel", visible_alias = "np", value_name = "N", default_value_t = 1,
          value_parser = values::positive)]
    pub parallel: usize,
    /// KV cache type
    #[arg(long = "kv-type", value_name = "T", value_enum, ignore_case = true,
          default_value_t = KvType::F16)]
    pub kv_type: KvType,
    /// Flash attention
    #[arg(long = "flash-attn", visible_alias = "fa", value_name = "MODE", value_enum,
          default_value_t = FlashAttn::Auto)]
    pub flash_attn: FlashAttn,
    /// Sliding-window layers keep every cell (a full-size cache, as
    /// llama.cpp's --swa-full) instead of a cache of their window
    #[arg(long = "swa-full")]
    pub swa_full: bool,
}

impl ContextArgs {
    /// Context settings from the command line.
    pub fn params(&self) -> Result<ContextParams, String> {
        let d = ContextParams::default();
        let parallel = self.parallel.max(1);
        let ctx = self.ctx.max(1);
        let kv: DType = self.kv_type.into();
        let attention = match self.flash_attn {
            FlashAttn::Auto | FlashAttn::On => Attention::Flash,
            FlashAttn::Off => Attention::Standard,
        };
        if attention == Attention::Standard && kv.is_quantized() {
            return Err(format!(
                "a {kv} V cache needs flash attention (--flash-attn on)"
            ));
        }
        let n_ctx = ctx
            .checked_mul(parallel)
            .ok_or_else(|| format!("--ctx {ctx} x --parallel {parallel} is too large a context"))?;
        let n_batch = self.batch.max(1);
        if let Some(ub) = self.ubatch
            && ub > n_batch
        {
            return Err(format!(
                "--ubatch {ub} is larger than --batch {n_batch}: a ubatch is a part of a batch"
            ));
        }
        let n_ubatch = self
            .ubatch
            .unwrap_or(n_batch.min(d.n_ubatch))
            .clamp(1, n_ctx);
        Ok(ContextParams {
            n_ctx,
            n_batch,
            n_ubatch,
            n_seq_max: parallel,
            attention,
            k_type: kv,
            v_type: kv,
            swa_full: self.swa_full,
            ..d
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;
    use ggraph_model::placement::OverrideTarget;

    use super::*;

    #[derive(Parser, Debug)]
    struct All {
        #[command(flatten)]
        devices: DeviceArgs,
        #[command(flatten)]
        placement: PlacementArgs,
        #[command(flatten)]
        context: ContextArgs,
    }

    fn parse(args: &[&str]) -> Result<All, clap::Error> {
        crate::tool::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_are_llama_cpp_s() {
        let a = parse(&[]).unwrap();
        let o = a.placement.options();
        assert_eq!(o.n_gpu_layers, GpuLayers::All);
        assert_eq!(o.split_mode, SplitMode::Layer);
        assert!(o.offload_kqv && o.op_offload && o.tensor_split.is_none());
        let p = a.context.params().unwrap();
        assert_eq!((p.n_ctx, p.n_batch, p.n_ubatch), (4096, 2048, 512));
        assert_eq!((p.k_type, p.attention), (DType::F16, Attention::Flash));
        assert!(a.devices.gpu_free.is_empty() && !a.devices.cpu_only);
    }

    #[test]
    fn long_names_and_llama_cpp_s_short_ones_mean_the_same() {
        let long = parse(&[
            "--gpu-free=12GiB",
            "--gpu-free",
            "8GiB",
            "--n-gpu-layers",
            "20",
            "--split-mode",
            "row",
            "--tensor-split",
            "3,1",
            "--override",
            "exps=cpu",
            "--ctx",
            "8192",
            "--batch",
            "1024",
            "--ubatch",
            "256",
            "--flash-attn",
            "off",
            "--kv-type",
            "F32",
            "--threads",
            "3",
        ])
        .unwrap();
        let short = parse(&[
            "--gpu-free=12GiB",
            "--gpu-free",
            "8GiB",
            "-ngl",
            "20",
            "-sm",
            "row",
            "-ts",
            "3,1",
            "-ot",
            "exps=cpu",
            "-c",
            "8192",
            "-b",
            "1024",
            "-ub",
            "256",
            "-fa",
            "off",
            "--kv-type",
            "f32",
            "-t",
            "3",
        ])
        .unwrap();
        for a in [&long, &short] {
            assert_eq!(a.devices.gpu_free, vec![12 << 30, 8 << 30]);
            assert_eq!(a.devices.threads, Some(3));
            let o = a.placement.options();
            assert_eq!(o.n_gpu_layers, GpuLayers::Count(20));
            assert_eq!(o.split_mode, SplitMode::Row);
            assert_eq!(o.tensor_split, Some(TensorSplit::Fractions(vec![3.0, 1.0])));
            assert_eq!(o.overrides[0].target, OverrideTarget::Host);
            let p = a.context.params().unwrap();
            assert_eq!((p.n_ctx, p.n_batch, p.n_ubatch), (8192, 1024, 256));
            assert_eq!((p.k_type, p.attention), (DType::F32, Attention::Standard));
        }
        let b = parse(&["--tensor-split", "12GiB,8GiB", "--override-tensor", "x=1"]).unwrap();
        assert_eq!(
            b.placement.tensor_split,
            Some(TensorSplit::Bytes(vec![12 << 30, 8 << 30]))
        );
        assert_eq!(b.placement.overrides[0].target, OverrideTarget::Device(1));
    }

    #[test]
    fn bad_values_and_unknown_flags_are_errors_that_name_the_flag() {
        let e = parse(&["--gpu-free", "lots"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("--gpu-free"), "{e}");
        let e = parse(&["-ts", "3,x"]).unwrap_err();
        assert!(e.to_string().contains("--tensor-split"), "{e}");
        let e = parse(&["--split-mode", "diagonal"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert!(e.to_string().contains("--split-mode"), "{e}");
        let e = parse(&["--kv-type", "q5"]).unwrap_err();
        assert!(e.to_string().contains("--kv-type"), "{e}");
        let e = parse(&["--nope"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--nope"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn a_quantised_v_cache_needs_flash_attention_and_huge_contexts_do_not_overflow() {
        let a = parse(&["--kv-type", "q8_0", "-fa", "off"]).unwrap();
        assert!(a.context.params().unwrap_err().contains("flash attention"));
        let huge = (usize::MAX / 2).to_string();
        let a = parse(&["--ctx", &huge, "--parallel", "4"]).unwrap();
        assert!(
            a.context
                .params()
                .unwrap_err()
                .contains("too large a context")
        );
    }
}
