//! Every architecture split over two lavapipe devices: the llama.cpp
//! fixture models (`ggraph-model/tests/fixtures/arch/`, one per
//! architecture, and the expert forms of gemma4 and granitehybrid and
//! gpt-oss with MXFP4 experts) decoded with their layers (or their matrices' rows) over
//! two wgpu devices and the CPU give the CPU's greedy tokens, which are llama.cpp's
//! (`ggraph/tests/architectures.rs` checks those against
//! `expected.json`), or an encoder's embedding within cosine 0.99999 of
//! the CPU's (`ggraph/tests/embeddings.rs` checks those).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_cpu::CpuDevice;
use ggraph_model::arch::{ARCHITECTURES, Attention};
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams};
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

/// What a model computes: six greedy tokens after the prompt, or an
/// encoder's pooled embedding of it.
#[derive(Debug)]
enum Output {
    Tokens(Vec<i32>),
    Embedding(Vec<f32>),
}

fn output(model: Model, attention: Attention) -> Output {
    if !model.config.arch.embeddings_only {
        return Output::Tokens(greedy(model, attention));
    }
    let params = ContextParams {
        n_ctx: 64,
        n_batch: 64,
        n_ubatch: 64,
        attention,
        embeddings: true,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::new(model), params).unwrap();
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    Output::Embedding(ctx.embeddings_seq(0).unwrap().to_vec())
}

/// The same greedy tokens, or embeddings of cosine similarity at least
/// 0.99999 (the wgpu kernels sum in their own orders).
fn same(a: &Output, b: &Output) -> bool {
    match (a, b) {
        (Output::Tokens(a), Output::Tokens(b)) => a == b,
        (Output::Embedding(a), Output::Embedding(b)) => {
            let dot = |x: &[f32], y: &[f32]| -> f64 {
                x.iter()
                    .zip(y)
                    .map(|(p, q)| f64::from(*p) * f64::from(*q))
                    .sum()
            };
            dot(a, b) / (dot(a, a) * dot(b, b)).sqrt() >= 0.99999
        }
        _ => false,
    }
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
            let want = output(cpu, attention);
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
            let got = output(split, attention);
            assert!(
                same(&got, &want),
                "{name} {attention:?}: split by {split_mode:?} over two wgpu devices: \
                 {got:?}, on the CPU {want:?}"
            );
        }
    }
}
