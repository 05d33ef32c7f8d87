//! Every architecture split over two lavapipe devices: the llama.cpp
//! fixture models (`ggraph-model/tests/fixtures/arch/`, one per
//! architecture, and the expert forms of gemma4 and granitehybrid and
//! gpt-oss with MXFP4 experts) decoded with their layers (or their matrices' rows) over
//! two wgpu devices and the CPU give the CPU's greedy tokens, which are llama.cpp's
//! (`ggraph/tests/architectures.rs` checks those against
//! `expected.json`).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_cpu::CpuDevice;
use ggraph_model::arch::{ARCHITECTURES, Attention};
use ggraph_model::context::ContextParams;
use ggraph_model::desc::ModelDesc;
use ggraph_model::gguf::ModelFile;
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::{PlacementOptions, SplitMode};
use ggraph_wgpu::WgpuDevice;

const PROMPT: [i32; 20] = [
    1, 51, 88, 125, 162, 199, 236, 273, 25, 62, 99, 136, 173, 210, 247, 284, 36, 73, 110, 147,
];

fn open(arch: &str) -> ModelDesc {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ggraph-model/tests/fixtures/arch")
        .join(format!("{arch}.gguf"));
    ModelDesc::from_file(ModelFile::open(&path).unwrap()).unwrap()
}

/// Six greedy tokens after the prompt.
fn greedy(model: Model, attention: Attention) -> Vec<i32> {
    let params = ContextParams {
        n_ctx: 64,
        n_batch: 64,
        n_ubatch: 64,
        attention,
        k_type: DType::F16,
        v_type: DType::F16,
        ..ContextParams::default()
    };
    ggraph_conformance::testing::greedy::greedy(model, params, &PROMPT, 6)
        .unwrap()
        .1
}

#[test]
fn every_architecture_split_over_two_wgpu_devices_gives_the_cpu_tokens() {
    let Some(first) = common::device_or_skip("architectures over wgpu") else {
        return;
    };
    let second = WgpuDevice::open(0).expect("a second device on the same adapter");
    let devices: Vec<Arc<dyn Device>> = vec![first, second];
    // every architecture's fixture, and the mixtures of experts of those
    // whose own fixture is dense (MXFP4 experts too)
    let names = ARCHITECTURES.iter().map(|a| a.name);
    for name in names.chain(["gemma4moe", "granitehybrid_moe", "gpt-oss_mxfp4"]) {
        let desc = open(name);
        for (split_mode, attention) in [
            (SplitMode::Layer, Attention::Standard),
            (SplitMode::Layer, Attention::Flash),
            (SplitMode::Row, Attention::Flash),
        ] {
            let opts = PlacementOptions {
                split_mode,
                ..PlacementOptions::default()
            };
            let cpu = Model::load(
                &desc,
                &[],
                CpuDevice::new(),
                &PlacementOptions::default(),
                LoadMode::Real,
                None,
            )
            .unwrap();
            let want = greedy(cpu, attention);
            let split = Model::load(
                &desc,
                &devices,
                CpuDevice::new(),
                &opts,
                LoadMode::Real,
                None,
            )
            .unwrap();
            let on_gpus = split
                .weight_bytes()
                .iter()
                .filter(|(n, b)| n.starts_with("wgpu") && *b > 0)
                .count();
            assert_eq!(on_gpus, 2, "{name}: weights on both wgpu devices");
            assert_eq!(
                greedy(split, attention),
                want,
                "{name} {attention:?}: split by {split_mode:?} over two wgpu devices"
            );
        }
    }
}
