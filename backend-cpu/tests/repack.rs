//! Weights in the CPU's own layout (`CPU_REPACK`) through the loader, the
//! estimates, the scheduler and the decode loop.

use std::sync::Arc;

use ggraph_conformance::nmse;
use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_core::ir::GraphBuilder;
use ggraph_cpu::{CPU_BUFFER_TYPE, CPU_REPACK_BUFFER_TYPE, CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{Attention, ModelConfig, WeightSource};
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams};
use ggraph_model::desc::ModelDesc;
use ggraph_model::estimate::exact::exact_estimate;
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::PlacementOptions;

const PROMPT: [i32; 6] = [3, 14, 15, 92, 65, 35];

/// Weights of one type, every matrix of whole groups of eight rows (and
/// rows of whole Q4_K super-blocks); the norms stay F32.
fn desc(weights: DType) -> ModelDesc {
    let c = ModelConfig::dense(256, 256, 2, 4, 2, 512);
    ModelDesc::random(c, weights, 5).unwrap()
}

/// As [`desc`], with four experts of 256 a layer, two used.
fn moe_desc(weights: DType) -> ModelDesc {
    let mut c = ModelConfig::dense(256, 256, 2, 4, 2, 512);
    c.n_expert = 4;
    c.n_expert_used = 2;
    c.n_ff_expert = 256;
    ModelDesc::random(c, weights, 6).unwrap()
}

fn cpu() -> Arc<dyn Device> {
    CpuDevice::with_repack(2, true).unwrap()
}

fn load(d: &ModelDesc, devices: &[Arc<dyn Device>], repack: bool, mode: LoadMode) -> Model {
    let opts = PlacementOptions {
        repack,
        ..PlacementOptions::default()
    };
    Model::load(d, devices, cpu(), &opts, mode, None).unwrap()
}

/// Greedy tokens after the prompt, the logits of every step, and the
/// scheduler's explanation of the last graph.
fn decode(model: Model, steps: usize) -> (Vec<i32>, Vec<f32>, String) {
    let params = ContextParams {
        n_ctx: 32,
        n_batch: 8,
        n_ubatch: 8,
        attention: Attention::Flash,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::new(model), params).unwrap();
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    let (mut tokens, mut logits) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let l = ctx.logits().to_vec();
        let next = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as i32;
        logits.extend_from_slice(&l);
        tokens.push(next);
        ctx.decode(&Batch::tokens(&[next])).unwrap();
    }
    let explain = ctx.scheduler().explain();
    (tokens, logits, explain)
}

/// The same model (dense, and with experts) with its matrices repacked and
/// in GGUF's layout: the same greedy tokens, logits within a product's
/// rounding, and the scheduler shows where the weights live.
#[test]
fn repacked_weights_give_the_tokens_of_gguf_s_layout() {
    let models = [DType::Q4_0, DType::Q4_K, DType::IQ4_NL, DType::MXFP4]
        .into_iter()
        .flat_map(|t| [(t, desc(t)), (t, moe_desc(t))]);
    for (weights, d) in models {
        let (t_plain, l_plain, _) = decode(load(&d, &[], false, LoadMode::Real), 6);
        let repacked = load(&d, &[], true, LoadMode::Real);
        let bytes = repacked.weight_bytes();
        assert!(
            bytes
                .iter()
                .any(|(n, b)| n == CPU_REPACK_BUFFER_TYPE && *b > 0),
            "{weights}: {bytes:?}"
        );
        let (t_repack, l_repack, explain) = decode(repacked, 6);
        assert_eq!(t_repack, t_plain, "{weights}");
        let want: Vec<f64> = l_plain.iter().map(|&v| v as f64).collect();
        let e = nmse(&l_repack, &want);
        // GGUF's Q4_K prompt products quantise the activations with one
        // scale a 256 values (ggml's Q8_K); the repacked layout's, of more
        // than eight columns, 32 at a time
        let bound = if weights == DType::Q4_K { 1e-3 } else { 1e-4 };
        assert!(e < bound, "{weights}: nmse {e}");
        assert!(explain.contains(CPU_REPACK_BUFFER_TYPE), "{explain}");
    }
}

/// A repacked weight reads back as GGUF's bytes, and the dry run (what the
/// exact estimate loads) plans the same bytes per buffer type as the real
/// load, the repacked ones included.
#[test]
fn repacked_weights_read_back_byte_identical_and_plans_count_them() {
    let d = desc(DType::Q4_0);
    let real = load(&d, &[], true, LoadMode::Real);
    let dry = load(&d, &[], true, LoadMode::DryRun);
    assert_eq!(dry.weight_bytes(), real.weight_bytes());
    let plain = load(&d, &[], false, LoadMode::DryRun);
    let total = |m: &Model| m.weight_bytes().iter().map(|(_, b)| b).sum::<u64>();
    assert_eq!(total(&real), total(&plain), "the layout takes GGUF's bytes");
    // the exact estimate counts the CPU's repacked weights as its own
    let estimate = |repack: bool| {
        let opts = PlacementOptions {
            repack,
            ..PlacementOptions::default()
        };
        let params = ContextParams {
            n_ctx: 64,
            ..ContextParams::default()
        };
        exact_estimate(&d, &[], cpu(), &opts, &params).unwrap()
    };
    let (with, without) = (estimate(true), estimate(false));
    assert_eq!(with.devices[0].weights, total(&real));
    assert_eq!(with.devices[0].weights, without.devices[0].weights);
    let laid: Vec<&str> = [
        "blk.0.attn_q.weight",
        "blk.1.ffn_down.weight",
        "output.weight",
    ]
    .into();
    let mut source = &real;
    for t in &d.tensors {
        let mut b = GraphBuilder::new();
        let id = source.weight(&mut b, &t.name, &t.shape).unwrap().unwrap();
        let g = b.build();
        let read = g.read_bytes(id).unwrap();
        assert_eq!(read, d.bytes_of(t).unwrap(), "{}", t.name);
        let buffer = g.memory_of(id).unwrap().0.buffer_type_name().to_string();
        if laid.contains(&t.name.as_str()) {
            assert_eq!(buffer, CPU_REPACK_BUFFER_TYPE, "{}", t.name);
        }
        if t.dtype == DType::F32 {
            assert_eq!(buffer, CPU_BUFFER_TYPE, "{}", t.name);
        }
    }
}

/// With a device that op-offloads prompt-sized products, host weights stay
/// in GGUF's layout (the offload copies them from host memory), as
/// llama.cpp keeps them in a GPU's pinned memory; without op offload they
/// are repacked.
#[test]
fn host_weights_stay_in_gguf_s_layout_when_their_products_may_be_offloaded() {
    let d = desc(DType::Q4_0);
    let sim: Vec<Arc<dyn Device>> = vec![SimDevice::new(0, SimConfig::gpu(1 << 30))];
    let opts = |op_offload: bool| PlacementOptions {
        n_gpu_layers: ggraph_model::placement::GpuLayers::Count(1),
        op_offload,
        ..PlacementOptions::default()
    };
    let names =
        |m: &Model| -> Vec<String> { m.weight_bytes().into_iter().map(|(n, _)| n).collect() };
    let offload = Model::load(&d, &sim, cpu(), &opts(true), LoadMode::DryRun, None).unwrap();
    assert!(!names(&offload).contains(&CPU_REPACK_BUFFER_TYPE.to_string()));
    let no_offload = Model::load(&d, &sim, cpu(), &opts(false), LoadMode::DryRun, None).unwrap();
    assert!(names(&no_offload).contains(&CPU_REPACK_BUFFER_TYPE.to_string()));
    assert!(
        names(&no_offload).contains(&"sim:0".to_string()),
        "{:?}",
        names(&no_offload)
    );
}
