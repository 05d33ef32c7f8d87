//! A small llama model end to end on the emulated GPU (the real kernels
//! and dispatch), against the f64 reference, as backend-cpu's llama test
//! does for the CPU.

use std::sync::Arc;

use ggraph_conformance::nmse;
use ggraph_conformance::{reference, testing};
use ggraph_core::backend::Device;
use ggraph_core::{DType, exec};
use ggraph_gpu::emulator::EmuRuntime;
use ggraph_model::arch::{Attention, BuildShape, FreshWeights, ModelConfig, build_graph};
use ggraph_model::kv::{FreshCache, KvLayout};

fn run(device: Arc<dyn Device>, config: &ModelConfig, shape: BuildShape, weights: DType) -> f64 {
    let lg = build_graph(
        config,
        &shape,
        &mut FreshWeights { dtype: weights },
        &mut FreshCache,
    )
    .unwrap();
    let mut graph = lg.graph.clone();
    let data = testing::llama_leaf_data(&lg, &graph, config, &shape, 42).unwrap();
    let _buf = exec::alloc_one_buffer(&mut graph, &device.buffer_type()).unwrap();
    for (id, bytes) in &data {
        graph.write_bytes(*id, bytes).unwrap();
    }
    exec::compute_on(device.as_ref(), &graph).unwrap();
    let got = graph.read_f32(lg.logits.unwrap()).unwrap();
    let ev = reference::evaluate(&graph, |id| Ok(data[&id].clone())).unwrap();
    assert_eq!(got.len(), config.n_vocab * shape.n_outputs);
    assert!(
        got.iter().any(|v| v.abs() > 0.1),
        "logits are not trivially zero"
    );
    nmse(&got, &ev.values(lg.logits.unwrap()))
}

fn no_cache(n_tokens: usize, attention: Attention) -> BuildShape {
    BuildShape::prompt(n_tokens, attention)
}

fn emu() -> Arc<dyn Device> {
    EmuRuntime::device(0, 1 << 30, true)
}

#[test]
fn llama_block_on_the_emulated_gpu_matches_the_f64_reference() {
    let cfg = ModelConfig::dense(97, 64, 2, 4, 2, 96);
    for attention in [Attention::Standard, Attention::Flash] {
        // 12 tokens: the batched (BLAS / tiled) mul_mat path, not mat-vec
        let e = run(emu(), &cfg, no_cache(12, attention), DType::F32);
        assert!(e < 1e-9, "{attention:?}: nmse {e}");
    }
}

#[test]
fn quantised_llama_weights_on_the_emulated_gpu() {
    for (w, tokens) in [
        (DType::F16, 3),
        (DType::Q8_0, 12),
        (DType::Q4_0, 3),
        (DType::Q4_1, 12),
        (DType::Q5_0, 3),
        (DType::Q5_1, 12),
        (DType::IQ4_NL, 3),
    ] {
        let cfg = ModelConfig::dense(97, 64, 1, 4, 2, 96);
        let e = run(emu(), &cfg, no_cache(tokens, Attention::Standard), w);
        assert!(e < 1e-6, "{w}: nmse {e}");
    }
    let mut cfg = ModelConfig::dense(97, 256, 1, 4, 2, 512);
    cfg.n_rot = 64;
    for w in [
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_XS,
    ] {
        let e = run(emu(), &cfg, no_cache(2, Attention::Standard), w);
        assert!(e < 1e-6, "{w}: nmse {e}");
    }
}

#[test]
fn kv_cache_and_mixture_of_experts_on_the_emulated_gpu() {
    let cfg = ModelConfig::dense(97, 64, 1, 2, 1, 96);
    let kv = KvLayout {
        kv_size: 16,
        k_type: DType::F16,
        v_type: DType::Q8_0,
    };
    let mut shape = BuildShape::cached(4, 1, 11, Attention::Flash, kv);
    shape.mask_type = DType::F32;
    let e = run(emu(), &cfg, shape, DType::F32);
    assert!(e < 1e-6, "kv cache: nmse {e}");

    let mut moe = ModelConfig::dense(97, 64, 1, 4, 2, 96);
    moe.n_expert = 4;
    moe.n_expert_used = 2;
    moe.n_ff_expert = 32;
    let e = run(emu(), &moe, no_cache(6, Attention::Flash), DType::F32);
    assert!(e < 1e-9, "moe: nmse {e}");
}

#[test]
fn the_scheduler_splits_a_llama_model_between_the_cpu_and_the_emulated_gpu() {
    let cpu: Arc<dyn Device> = ggraph_cpu::CpuDevice::new();
    for attention in [Attention::Standard, Attention::Flash] {
        let m = ggraph_conformance::testing::mixed::mixed_llama(
            &[emu()],
            cpu.clone(),
            DType::Q8_0,
            attention,
        )
        .unwrap();
        assert!(m.passed(), "{attention:?}: {m:?}");
        assert!(m.splits >= 2 && m.device_nodes > 20, "{}", m.explain);
    }
}
