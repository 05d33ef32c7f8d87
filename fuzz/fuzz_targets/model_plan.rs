//! A GGUF header through everything that happens before a model's first
//! weight is read: its architecture and tensors checked, its weights
//! placed on the CPU and simulated GPUs, its KV cache and worst-case graph
//! planned (the exact estimate's dry run). Hyperparameters and shapes that
//! disagree must give an error, never a panic.
//!
//!     scripts/fuzz 600 model_plan
//!
//! Input: one byte of options, then the header. Bits of the first byte:
//! 0-1 devices (CPU only, one GPU, two GPUs split by layer, two by row);
//! 2 standard attention (else flash); 3 a Q8_0 K cache; 4 half the layers
//! offloaded (else all); 5 no repacked layout; 6 no op offload.
//! Seeds: fuzz/corpus/model_plan/, a small model of every architecture.
#![no_main]

use std::sync::{Arc, OnceLock};

use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::Attention;
use ggraph_model::context::ContextParams;
use ggraph_model::desc::ModelDesc;
use ggraph_model::estimate::exact::exact_estimate;
use ggraph_model::gguf::parse_header;
use ggraph_model::placement::{GpuLayers, PlacementOptions, SplitMode};
use libfuzzer_sys::fuzz_target;

struct Devices {
    cpu: Arc<dyn Device>,
    gpus: Vec<Arc<dyn Device>>,
}

fn devices() -> &'static Devices {
    static D: OnceLock<Devices> = OnceLock::new();
    D.get_or_init(|| Devices {
        cpu: CpuDevice::new(),
        gpus: vec![
            SimDevice::new(0, SimConfig::gpu(1 << 30)) as Arc<dyn Device>,
            SimDevice::new(1, SimConfig::gpu(1 << 29)) as Arc<dyn Device>,
        ],
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, header)) = data.split_first() else {
        return;
    };
    let Ok(h) = parse_header(header, "fuzz") else {
        return;
    };
    let Ok(desc) = ModelDesc::from_header(&h, None) else {
        return;
    };
    let d = devices();
    let (gpus, split_mode) = match flags & 3 {
        0 => (&d.gpus[..0], SplitMode::Layer),
        1 => (&d.gpus[..1], SplitMode::Layer),
        2 => (&d.gpus[..], SplitMode::Layer),
        _ => (&d.gpus[..], SplitMode::Row),
    };
    let opts = PlacementOptions {
        n_gpu_layers: if flags & 16 != 0 {
            GpuLayers::Count(desc.config.n_layer / 2)
        } else {
            GpuLayers::All
        },
        split_mode,
        repack: flags & 32 == 0,
        op_offload: flags & 64 == 0,
        ..PlacementOptions::default()
    };
    let params = ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 64,
        n_kv_pad: 32,
        attention: if flags & 4 != 0 {
            Attention::Standard
        } else {
            Attention::Flash
        },
        k_type: if flags & 8 != 0 {
            DType::Q8_0
        } else {
            DType::F16
        },
        ..ContextParams::default()
    };
    if let Ok(e) = exact_estimate(&desc, gpus, d.cpu.clone(), &opts, &params) {
        let _ = e.to_json();
    }
});
