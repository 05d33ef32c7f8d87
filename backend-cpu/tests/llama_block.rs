//! End to end: a small llama model (embedding, rms_norm, attention with
//! rope and a causal mask, SwiGLU FFN, logits) on the CPU, checked against
//! the independent f64 reference evaluator.

use std::sync::Arc;

use ggraph_conformance::nmse;
use ggraph_conformance::{reference, testing};
use ggraph_core::backend::Device;
use ggraph_core::{DType, exec};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{Attention, BuildShape, FreshWeights, ModelConfig, build_graph};
use ggraph_model::kv::{FreshCache, KvLayout};

fn small_config() -> ModelConfig {
    ModelConfig::dense(97, 64, 2, 4, 2, 96)
}

/// Runs the model on `device` and returns (nmse against the reference,
/// logits).
fn run(
    device: Arc<dyn Device>,
    config: &ModelConfig,
    shape: BuildShape,
    weights: DType,
) -> (f64, Vec<f32>) {
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
    let want = ev.values(lg.logits.unwrap());
    assert_eq!(got.len(), config.n_vocab * shape.n_outputs);
    (nmse(&got, &want), got)
}

fn no_cache(n_tokens: usize, attention: Attention) -> BuildShape {
    BuildShape::prompt(n_tokens, attention)
}

#[test]
fn llama_block_matches_the_f64_reference() {
    let (e, logits) = run(
        CpuDevice::new(),
        &small_config(),
        no_cache(7, Attention::Standard),
        DType::F32,
    );
    assert!(e < 1e-9, "nmse {e}");
    assert!(
        logits.iter().any(|v| v.abs() > 0.1),
        "logits are not trivially zero"
    );
}

#[test]
fn flash_attention_gives_the_same_logits_as_standard_attention() {
    let cfg = small_config();
    let (e, flash) = run(
        CpuDevice::new(),
        &cfg,
        no_cache(7, Attention::Flash),
        DType::F32,
    );
    assert!(e < 1e-9, "nmse {e}");
    let (_, standard) = run(
        CpuDevice::new(),
        &cfg,
        no_cache(7, Attention::Standard),
        DType::F32,
    );
    let d = nmse(
        &flash,
        &standard.iter().map(|v| *v as f64).collect::<Vec<_>>(),
    );
    assert!(d < 1e-9, "flash vs standard nmse {d}");
}

#[test]
fn quantised_weights_match_the_reference_of_their_dequantised_values() {
    // quantised weights multiply activations quantised to 8 bits (as ggml
    // does), so their bound is the conformance suite's 5e-4; f16 weights
    // multiply f32 activations
    let bound = |w: DType| if w.is_quantized() { 5e-4 } else { 1e-6 };
    for w in [DType::F16, DType::Q8_0, DType::Q4_0] {
        let (e, _) = run(
            CpuDevice::new(),
            &small_config(),
            no_cache(5, Attention::Standard),
            w,
        );
        assert!(e < bound(w), "{w}: nmse {e}");
    }
    let mut cfg = small_config();
    cfg.n_embd = 256;
    cfg.head_dim = 64;
    cfg.n_rot = 64;
    cfg.n_ff = 512;
    for w in [DType::Q4_K, DType::Q6_K] {
        let (e, _) = run(CpuDevice::new(), &cfg, no_cache(3, Attention::Standard), w);
        assert!(e < bound(w), "{w}: nmse {e}");
    }
}

#[test]
fn a_kv_cache_with_earlier_cells_is_read_and_written() {
    // head_dim 32, so that a Q8_0 cache row holds whole blocks
    let cfg = ModelConfig::dense(97, 64, 2, 2, 1, 96);
    for (attention, v_type) in [
        (Attention::Standard, DType::F16),
        (Attention::Flash, DType::Q8_0),
    ] {
        let kv = KvLayout {
            kv_size: 16,
            k_type: DType::F16,
            v_type,
        };
        let mut shape = BuildShape::cached(4, 1, 11, attention, kv);
        // one run with each mask type
        if attention == Attention::Flash {
            shape.mask_type = DType::F32;
        }
        let (e, logits) = run(CpuDevice::new(), &cfg, shape, DType::F32);
        assert!(e < 1e-6, "{attention:?}: nmse {e}");
        assert_eq!(logits.len(), cfg.n_vocab);
    }
}

#[test]
fn mixture_of_experts_matches_the_reference() {
    let mut cfg = small_config();
    cfg.n_expert = 4;
    cfg.n_expert_used = 2;
    cfg.n_ff_expert = 32;
    let (e, _) = run(
        CpuDevice::new(),
        &cfg,
        no_cache(6, Attention::Flash),
        DType::F32,
    );
    assert!(e < 1e-9, "nmse {e}");
}

#[test]
fn a_simulated_device_computes_the_same_logits() {
    let cfg = small_config();
    let (_, cpu) = run(
        CpuDevice::new(),
        &cfg,
        no_cache(7, Attention::Standard),
        DType::Q8_0,
    );
    let sim: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(64 << 20));
    let (e, logits) = run(sim, &cfg, no_cache(7, Attention::Standard), DType::Q8_0);
    // Q8_0 weights: activations are quantised to 8 bits
    assert!(e < 5e-4, "nmse {e}");
    assert_eq!(cpu, logits, "same kernels, same numbers");
}
