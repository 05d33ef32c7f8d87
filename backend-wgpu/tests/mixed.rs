//! Across a real device boundary on lavapipe: llama models split by the
//! scheduler between the CPU and one or two wgpu devices, by layers and by
//! rows, and generation that gives the CPU's greedy tokens.

mod common;

use std::sync::Arc;

use ggraph_conformance::testing::mixed::mixed_llama;
use ggraph_conformance::{nmse, testing};
use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_cpu::CpuDevice;
use ggraph_model::arch::{Attention, ModelConfig};
use ggraph_model::context::ContextParams;
use ggraph_model::desc::ModelDesc;
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::{PlacementOptions, SplitMode};
use ggraph_wgpu::WgpuDevice;

fn two_devices(test: &str) -> Option<Vec<Arc<dyn Device>>> {
    let first = common::device_or_skip(test)?;
    let second = WgpuDevice::open(0).expect("a second device on the same adapter");
    Some(vec![first as Arc<dyn Device>, second as Arc<dyn Device>])
}

#[test]
fn a_llama_block_split_between_the_cpu_and_one_or_two_wgpu_devices_matches_the_cpu() {
    let Some(devices) = two_devices("mixed llama") else {
        return;
    };
    let cpu: Arc<dyn Device> = CpuDevice::new();
    for attention in [Attention::Standard, Attention::Flash] {
        for n in [1, 2] {
            let m = mixed_llama(&devices[..n], cpu.clone(), DType::Q8_0, attention).unwrap();
            assert!(m.passed(), "{attention:?} over {n} wgpu device(s): {m:?}");
            assert!(m.splits > n, "{}", m.explain);
        }
    }
}

fn desc() -> ModelDesc {
    ModelDesc::random(ModelConfig::dense(160, 64, 4, 4, 2, 128), DType::Q8_0, 17).unwrap()
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 32,
        n_batch: 32,
        n_ubatch: 8,
        attention: Attention::Flash,
        n_kv_pad: 32,
        ..ContextParams::default()
    }
}

/// Logits of a prompt's last token, then 6 greedy tokens.
fn greedy(model: Model) -> (Vec<f32>, Vec<i32>) {
    testing::greedy::greedy(model, params(), &[5, 9, 100, 42, 7], 6).unwrap()
}

#[test]
fn layer_and_row_split_over_two_wgpu_devices_give_the_cpu_tokens() {
    let Some(devices) = two_devices("wgpu placement") else {
        return;
    };
    let d = desc();
    let cpu_only = Model::load(
        &d,
        &[],
        CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )
    .unwrap();
    let (want_logits, want_tokens) = greedy(cpu_only);
    let want: Vec<f64> = want_logits.iter().map(|x| *x as f64).collect();
    for mode in [SplitMode::Layer, SplitMode::Row] {
        let opts = PlacementOptions {
            split_mode: mode,
            ..PlacementOptions::default()
        };
        let m = Model::load(&d, &devices, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
        let on_gpus = m
            .weight_bytes()
            .iter()
            .filter(|(n, _)| n.starts_with("wgpu"))
            .count();
        assert_eq!(on_gpus, 2, "{mode:?}: {:?}", m.weight_bytes());
        let (logits, tokens) = greedy(m);
        let e = nmse(&logits, &want);
        assert!(e < 5e-4, "{mode:?}: nmse {e}");
        assert_eq!(tokens, want_tokens, "{mode:?}: greedy tokens");
    }
}
