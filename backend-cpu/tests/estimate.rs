//! The exact estimate equals what a real load and context allocate, on
//! the CPU and simulated devices; fitting picks what fits.

use std::path::PathBuf;
use std::sync::Arc;

use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{ARCHITECTURES, Attention, GEMMA4, HeadShape, ModelConfig};
use ggraph_model::context::{Context, ContextParams};
use ggraph_model::desc::ModelDesc;
use ggraph_model::estimate::exact::{FitRequest, check_fits, exact_estimate, fit};
use ggraph_model::gguf::{ModelFile, read_header};
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::make::{make_vocab, model_gguf};
use ggraph_model::placement::{GpuLayers, PlacementOptions, SplitMode};

/// A GGUF file in the temporary directory, removed when dropped (a
/// failing test included).
struct TempGguf(PathBuf);

impl std::ops::Deref for TempGguf {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempGguf {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempGguf {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

/// A small random llama written as a GGUF file.
fn gguf(name: &str) -> TempGguf {
    gguf_of(name, ModelConfig::dense(512, 128, 4, 4, 2, 256))
}

/// A small random model of `config` written as a GGUF file.
fn gguf_of(name: &str, config: ModelConfig) -> TempGguf {
    let desc = ModelDesc::random(config, DType::Q4_0, 5).unwrap();
    let w = model_gguf(&desc, make_vocab(512)).unwrap();
    let path = std::env::temp_dir().join(format!(
        "ggraph-estimate-{}-{name}.gguf",
        std::process::id()
    ));
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    TempGguf(path)
}

fn params(attention: Attention) -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 32,
        attention,
        ..ContextParams::default()
    }
}

#[test]
fn the_estimate_equals_what_loading_and_reserving_allocate() {
    for arch in ARCHITECTURES {
        let config = ModelConfig::new(arch, 512, 128, 4, 4, 2, 256);
        estimate_equals_allocation(&gguf_of(&format!("equal-{}", arch.name), config));
    }
    // Gemma 4 as the E models are: sliding layers with heads of their own
    // sizes, the last layers reading earlier layers' caches, per-layer
    // inputs, FFNs of two widths
    let mut config = ModelConfig::new(&GEMMA4, 512, 128, 6, 4, 1, 256).with_head_dim(64);
    config.n_rot = 64;
    config.attention_scale = 1.0;
    config.n_swa = 16;
    config.swa_layers = vec![true, true, true, false, true, false];
    config.swa_heads = Some(HeadShape {
        head_dim: 32,
        n_head_kv: 2,
        n_rot: 32,
    });
    config.n_kv_shared = 2;
    config.n_embd_per_layer = 16;
    config.n_ff_layers = vec![256, 256, 256, 256, 512, 512];
    estimate_equals_allocation(&gguf_of("equal-gemma4-e", config));
}

fn estimate_equals_allocation(path: &TempGguf) {
    let header_only = ModelDesc::from_header(&read_header(path, None).unwrap(), None).unwrap();
    let with_data = ModelDesc::from_file(ModelFile::open(path).unwrap()).unwrap();
    for (mode, attention) in [
        (SplitMode::Layer, Attention::Standard),
        (SplitMode::Row, Attention::Flash),
    ] {
        let opts = PlacementOptions {
            split_mode: mode,
            n_gpu_layers: GpuLayers::Count(4),
            ..PlacementOptions::default()
        };
        let p = params(attention);
        let sims: Vec<Arc<SimDevice>> = (0..2)
            .map(|i| SimDevice::new(i, SimConfig::gpu(64 << 20)))
            .collect();
        let devices: Vec<Arc<dyn Device>> =
            sims.iter().map(|s| s.clone() as Arc<dyn Device>).collect();
        let est = exact_estimate(&header_only, &devices, CpuDevice::new(), &opts, &p).unwrap();
        assert_eq!(
            sims.iter().map(|s| s.allocated_bytes()).sum::<u64>(),
            0,
            "a dry run allocates nothing"
        );

        let model = Arc::new(
            Model::load(
                &with_data,
                &devices,
                CpuDevice::new(),
                &opts,
                LoadMode::Real,
                None,
            )
            .unwrap(),
        );
        let ctx = Context::new(model.clone(), p).unwrap();
        for (i, sim) in sims.iter().enumerate() {
            let d = &est.devices[i + 1];
            assert_eq!(d.name, sim.name());
            assert!(d.total() > 0, "{mode:?}: {d:?}");
            assert_eq!(
                d.total(),
                sim.allocated_bytes(),
                "{mode:?} {}: estimated {d:?}",
                sim.name()
            );
        }
        let host = &est.devices[0];
        let weights_host: u64 = model
            .weight_bytes()
            .iter()
            .filter(|(n, _)| n == "CPU")
            .map(|(_, b)| b)
            .sum();
        let kv_host: u64 = ctx
            .kv_bytes_per_buffer_type()
            .iter()
            .filter(|(n, _)| n == "CPU")
            .map(|(_, b)| b)
            .sum();
        assert_eq!(host.weights, weights_host);
        assert_eq!(host.kv, kv_host);
        assert_eq!(host.compute, *ctx.compute_bytes().last().unwrap());
        println!("{} {mode:?}:\n{}", with_data.config.arch.name, est.table());
    }
}

#[test]
fn fitting_offloads_what_fits_and_says_why_it_stopped() {
    let path = gguf("fit");
    let desc = ModelDesc::from_header(&read_header(&path, None).unwrap(), None).unwrap();
    let p = params(Attention::Flash);
    // a device with room for about two layers and the compute memory
    let small: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(512 << 10));
    let req = FitRequest {
        margin: 16 << 10,
        layers_fixed: false,
        fit_ctx: false,
        min_ctx: 64,
    };
    let f = fit(
        &desc,
        &[small.clone()],
        CpuDevice::new(),
        &PlacementOptions::default(),
        &p,
        req,
    )
    .unwrap();
    let n = f.estimate.n_gpu_layers;
    assert!(n > 0 && n < 5, "{n} layers: {}", f.reason);
    assert!(
        f.reason.contains("one more would not") && f.reason.contains("sim:0"),
        "{}",
        f.reason
    );
    assert!(f.estimate.over(req.margin).is_empty());

    // the fitted placement loads and reserves for real
    let with_data = ModelDesc::from_file(ModelFile::open(&path).unwrap()).unwrap();
    let opts = PlacementOptions {
        n_gpu_layers: GpuLayers::Count(n),
        ..PlacementOptions::default()
    };
    let model = Arc::new(
        Model::load(
            &with_data,
            &[small.clone()],
            CpuDevice::new(),
            &opts,
            LoadMode::Real,
            None,
        )
        .unwrap(),
    );
    let _ctx = Context::new(model, p.clone()).unwrap();
    assert!(small.memory().free_bytes >= req.margin);

    // shrinking the context instead keeps every layer
    let roomy: Arc<dyn Device> = SimDevice::new(1, SimConfig::gpu(1 << 20 | 512 << 10));
    let big = ContextParams { n_ctx: 2048, ..p };
    let f = fit(
        &desc,
        &[roomy],
        CpuDevice::new(),
        &PlacementOptions::default(),
        &big,
        FitRequest {
            fit_ctx: true,
            ..req
        },
    )
    .unwrap();
    assert_eq!(f.estimate.n_gpu_layers, 5, "{}", f.reason);
    assert!(
        f.estimate.n_ctx < 2048 && f.estimate.n_ctx >= 64,
        "{}",
        f.reason
    );
}

/// A device with room for the weights but not for the KV cache and compute
/// memory: the check before loading says so, naming the device, and nothing
/// is allocated; with room for everything it passes.
#[test]
fn a_context_that_does_not_fit_is_refused_before_anything_is_allocated() {
    let path = gguf("check");
    let desc = ModelDesc::from_file(ModelFile::open(&path).unwrap()).unwrap();
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let opts = PlacementOptions::default();
    let p = params(Attention::Flash);
    // the weights alone, measured
    let roomy = SimDevice::new(0, SimConfig::gpu(1 << 30));
    let est = check_fits(
        &desc,
        &[roomy.clone() as Arc<dyn Device>],
        cpu.clone(),
        &opts,
        &p,
    )
    .unwrap();
    let need = &est.devices[1];
    assert!(need.kv > 0 && need.compute > 0);
    assert_eq!(roomy.allocated_bytes(), 0, "a dry run allocates nothing");

    let tight = SimDevice::new(1, SimConfig::gpu(need.weights + need.kv / 2));
    let devices = [tight.clone() as Arc<dyn Device>];
    // loading the weights alone would pass
    assert!(
        Model::load(
            &desc.without_data(),
            &devices,
            cpu.clone(),
            &opts,
            LoadMode::DryRun,
            None
        )
        .is_ok()
    );
    let e = check_fits(&desc, &devices, cpu, &opts, &p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sim:1") && e.contains("short") && e.contains("n_gpu_layers"),
        "{e}"
    );
    assert_eq!(tight.allocated_bytes(), 0);
}
