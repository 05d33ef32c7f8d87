//! Fitting never fails for a model the host can hold: swept over GPU sizes
//! from far too small to ample, on one, two and three simulated GPUs, it
//! always gives a plan, offloads more as memory grows, keeps every device
//! within its free memory, and plans exactly what a real load allocates.

use std::sync::Arc;

use ggraph_core::DType;
use ggraph_core::backend::{Device, weight_buffer_type_names};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{Attention, ModelConfig};
use ggraph_model::context::{Context, ContextParams};
use ggraph_model::desc::ModelDesc;
use ggraph_model::estimate::exact::{Fit, FitRequest, exact_estimate, fit};
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::PlacementOptions;

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 64,
        attention: Attention::Flash,
        ..ContextParams::default()
    }
}

fn request(margin: u64) -> FitRequest {
    FitRequest {
        margin,
        layers_fixed: false,
        fit_ctx: false,
        min_ctx: 64,
    }
}

/// `n` simulated GPUs of `bytes` each.
fn gpus(n: usize, bytes: u64) -> Vec<Arc<SimDevice>> {
    (0..n)
        .map(|i| SimDevice::new(i, SimConfig::gpu(bytes)))
        .collect()
}

fn as_devices(sims: &[Arc<SimDevice>]) -> Vec<Arc<dyn Device>> {
    sims.iter().map(|s| s.clone() as Arc<dyn Device>).collect()
}

/// What every GPU holds when everything is offloaded to one roomy GPU.
fn everything_on_one_gpu(desc: &ModelDesc) -> u64 {
    let roomy = as_devices(&gpus(1, 1 << 40));
    let e = exact_estimate(
        desc,
        &roomy,
        CpuDevice::new(),
        &PlacementOptions::default(),
        &params(),
    )
    .unwrap();
    e.devices[1].total()
}

/// Loads `desc` for real as the fit says, on fresh GPUs of the same size,
/// and checks that each GPU and the host allocate what the fit planned.
fn check_real_load(desc: &ModelDesc, f: &Fit, n_gpus: usize, bytes: u64, margin: u64) {
    let sims = gpus(n_gpus, bytes);
    let model = Arc::new(
        Model::load(
            desc,
            &as_devices(&sims),
            CpuDevice::new(),
            &f.options,
            LoadMode::Real,
            None,
        )
        .unwrap_or_else(|e| panic!("{n_gpus} x {bytes}: the fitted plan does not load: {e}")),
    );
    let ctx = Context::new(model.clone(), f.params.clone())
        .unwrap_or_else(|e| panic!("{n_gpus} x {bytes}: no context for the fitted plan: {e}"));
    for (i, sim) in sims.iter().enumerate() {
        let planned = &f.estimate.devices[i + 1];
        assert_eq!(
            sim.allocated_bytes(),
            planned.total(),
            "{n_gpus} x {bytes}, {}: planned {planned:?}",
            sim.name()
        );
        assert!(
            planned.total() == 0 || planned.total() + margin <= bytes,
            "{n_gpus} x {bytes}, {} over: {planned:?}",
            sim.name()
        );
    }
    let host = &f.estimate.devices[0];
    // the CPU's own memory and its repacked weights (`CPU_REPACK`), which a
    // fit without op offload leaves to the CPU
    let host_buffer_types = weight_buffer_type_names(model.cpu.as_ref());
    let on_host = |list: Vec<(String, u64)>| -> u64 {
        list.iter()
            .filter(|(n, _)| host_buffer_types.contains(n))
            .map(|(_, b)| b)
            .sum()
    };
    assert_eq!(host.weights, on_host(model.weight_bytes()));
    assert_eq!(host.kv, on_host(ctx.kv_bytes_per_buffer_type()));
    assert_eq!(host.compute, *ctx.compute_bytes().last().unwrap());
}

#[test]
fn a_fit_always_gives_a_plan_that_loads_and_offloads_more_as_memory_grows() {
    let config = ModelConfig::dense(512, 128, 4, 4, 2, 256);
    let desc = ModelDesc::random(config, DType::Q4_0, 5).unwrap();
    let need = everything_on_one_gpu(&desc);
    let margin = 4 << 10;
    // from far too small for any layer (smaller than the output weight, so
    // that it cannot even be allocated there) to room for everything
    let sizes: Vec<u64> = [1, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 128]
        .iter()
        .map(|&sixtyfourths| need * sixtyfourths / 64 + margin)
        .collect();
    for n_gpus in 1..=3 {
        let mut last_layers = 0;
        for &total in &sizes {
            let bytes = total / n_gpus as u64;
            let sims = gpus(n_gpus, bytes);
            let f = fit(
                &desc.without_data(),
                &as_devices(&sims),
                CpuDevice::new(),
                &PlacementOptions::default(),
                &params(),
                request(margin),
            )
            .unwrap_or_else(|e| panic!("{n_gpus} x {bytes}: no plan: {e}"));
            assert!(
                f.estimate.over(margin).is_empty(),
                "{n_gpus} x {bytes}: {}\n{}",
                f.reason,
                f.estimate.table()
            );
            let layers = f.estimate.n_gpu_layers;
            println!("{n_gpus} x {bytes}: {}", f.reason);
            assert!(
                layers >= last_layers,
                "{n_gpus} x {bytes}: {layers} layers after {last_layers} with less memory ({})",
                f.reason
            );
            last_layers = layers;
            assert!(!f.reason.is_empty());
            check_real_load(&desc, &f, n_gpus, bytes, margin);
        }
        assert_eq!(
            last_layers, 5,
            "{n_gpus} GPUs with room for everything offload every layer"
        );
    }
}

/// The cases: a llama-3-8B-shaped model on a GPU smaller than its
/// output weight, and on two GPUs of 512 and 256 MiB, fits with the
/// output layer on the host and says what limited it.
#[test]
fn a_gpu_smaller_than_the_output_weight_keeps_the_output_on_the_host() {
    let desc = ModelDesc::random(ModelConfig::llama3_8b(32), DType::Q4_0, 1)
        .unwrap()
        .without_data();
    let p = ContextParams {
        n_ctx: 4096,
        ..ContextParams::default()
    };
    for sizes in [&[400u64 << 20][..], &[512 << 20, 256 << 20]] {
        let sims: Vec<Arc<dyn Device>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &b)| SimDevice::new(i, SimConfig::gpu(b)) as Arc<dyn Device>)
            .collect();
        let f = fit(
            &desc,
            &sims,
            CpuDevice::new(),
            &PlacementOptions::default(),
            &p,
            request(0),
        )
        .unwrap_or_else(|e| panic!("{sizes:?}: no plan: {e}"));
        assert!(f.estimate.over(0).is_empty(), "{sizes:?}: {}", f.reason);
        assert!(
            f.estimate.n_gpu_layers < 33,
            "{sizes:?}: the output layer stays on the host ({})",
            f.reason
        );
        assert!(
            f.estimate.devices[0].layers.contains(&32),
            "{sizes:?}: {:?}",
            f.estimate.devices[0]
        );
        assert!(f.reason.contains("one more would not"), "{}", f.reason);
    }
}

/// With devices too small for any compute and a margin larger than they
/// are, the plan keeps everything on the host (op offload off) instead of
/// failing, and says so.
#[test]
fn devices_too_small_for_anything_leave_everything_on_the_host() {
    let config = ModelConfig::dense(512, 128, 4, 4, 2, 256);
    let desc = ModelDesc::random(config, DType::Q4_0, 5)
        .unwrap()
        .without_data();
    let sims = as_devices(&gpus(2, 8 << 10));
    let big_batch = ContextParams {
        n_ubatch: 256,
        n_batch: 256,
        ..params()
    };
    let f = fit(
        &desc,
        &sims,
        CpuDevice::new(),
        &PlacementOptions::default(),
        &big_batch,
        request(64 << 10),
    )
    .unwrap();
    assert_eq!(f.estimate.n_gpu_layers, 0, "{}", f.reason);
    assert!(
        f.estimate.devices[1..].iter().all(|d| d.total() == 0),
        "{}",
        f.estimate.table()
    );
    assert!(!f.options.op_offload, "{}", f.reason);
    assert!(f.reason.contains("op offload off"), "{}", f.reason);
}
