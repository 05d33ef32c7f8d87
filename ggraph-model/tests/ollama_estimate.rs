//! Ollama's llama-engine load: request adjustments, the reserved buffer,
//! per-layer sizes, the graph fallback and the layer layout over GPUs.
//!
//! The model of the layout cases is a small llama whose sizes are easy to
//! follow: 4 layers of 100 MiB of weights (blk.i.attn_q.weight, F32 [1024,
//! 25600]) plus 16 MiB of f16 KV cache each (4096 tokens * (128+128) * 8
//! heads * 2 bytes), and an output layer of 65,540,096 bytes (output_norm
//! F32 [1024] + output F16 [1024, 32000]). Graphs at ctx 4096, batch 512:
//! full 83,888,128 and partial 97,060,864 bytes (Ollama's llama formulas).
//! Every GPU first loses the buffer blk.0 + kv[0] = 121,634,816 bytes, then
//! keeps back 457 MiB = 479,199,232 bytes and, from the second layout on,
//! max(partial, full) of graph. The expected layouts were worked out by
//! hand from llm/server.go (buildLayout, assignLayers, findBestFit,
//! greedyFit).

use ggraph_model::estimate::{EstimateRequest, estimate};
use ggraph_model::gguf::{GgufHeader, header_from_json};
use ggraph_model::ollama::{self, GraphKind, KvCacheType, OllamaEstimate};
use serde_json::json;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const LAYER: u64 = 104_857_600 + 16_777_216;
const OUTPUT: u64 = 4096 + 65_536_000;
const PARTIAL: u64 = 97_060_864;
const FULL: u64 = 83_888_128;

fn small_llama() -> GgufHeader {
    let mut tensors =
        vec![json!({"name": "token_embd.weight", "type": "F16", "shape": [1024, 32000]})];
    for i in 0..4 {
        tensors.push(json!({"name": format!("blk.{i}.attn_q.weight"), "type": "F32", "shape": [1024, 25600]}));
    }
    tensors.push(json!({"name": "output_norm.weight", "type": "F32", "shape": [1024]}));
    tensors.push(json!({"name": "output.weight", "type": "F16", "shape": [1024, 32000]}));
    header_from_json(
        &json!({
            "kv": {
                "general.architecture": "llama",
                "llama.block_count": 4,
                "llama.context_length": 8192,
                "llama.embedding_length": 1024,
                "llama.attention.head_count": 8,
                "llama.attention.head_count_kv": 8,
                "tokenizer.ggml.tokens": {"type": "array[string]", "size": 32000},
            },
            "tensors": tensors,
        }),
        "small llama",
    )
    .unwrap()
}

fn on(gpu_free: &[u64]) -> EstimateRequest {
    EstimateRequest {
        gpu_free: gpu_free.to_vec(),
        ..EstimateRequest::default()
    }
}

fn run(req: &EstimateRequest) -> OllamaEstimate {
    ollama::estimate(&small_llama(), req).unwrap()
}

fn layers(e: &OllamaEstimate) -> Vec<Vec<usize>> {
    e.gpus.iter().map(|g| g.layers.clone()).collect()
}

#[test]
fn layer_sizes_buffer_and_graphs_follow_ollama() {
    let e = run(&on(&[]));
    assert_eq!(e.kv, vec![16_777_216; 4]);
    assert_eq!(e.kv_total, 67_108_864);
    assert_eq!(
        e.layer_weights,
        vec![104_857_600, 104_857_600, 104_857_600, 104_857_600, OUTPUT]
    );
    assert_eq!(
        e.layer_cache,
        vec![16_777_216, 16_777_216, 16_777_216, 16_777_216, 0]
    );
    assert_eq!(e.reserved_buffer, Some(LAYER));
    assert_eq!((e.graph_partial, e.graph_full), (PARTIAL, FULL));
    // No GPUs: nothing offloaded, the partial graph.
    assert_eq!((e.layers_on_gpu, e.total_layers), (0, 5));
    assert_eq!(e.graph_kind, GraphKind::Partial);
    assert_eq!(e.cpu_weights_bytes, 4 * 104_857_600 + OUTPUT);
}

#[test]
fn a_gpu_with_room_for_everything_gets_the_full_graph() {
    // 2 GiB - buffer - 457 MiB - graph leaves 1,449,588,736 bytes, more than
    // the 552,079,360 the five layers need.
    let e = run(&on(&[2 * GIB]));
    assert_eq!(layers(&e), vec![vec![0, 1, 2, 3, 4]]);
    assert_eq!((e.layers_on_gpu, e.graph_kind), (5, GraphKind::Full));
    let g = &e.gpus[0];
    assert_eq!(g.id, "0");
    assert_eq!(g.weights_bytes, 4 * 104_857_600 + OUTPUT);
    assert_eq!(g.cache_bytes, 4 * 16_777_216);
    assert_eq!(g.graph_bytes, FULL);
    assert_eq!((e.cpu_weights_bytes, e.cpu_cache_bytes), (0, 0));
}

#[test]
fn when_the_output_does_not_fit_too_the_graph_is_partial() {
    // 1 GiB leaves 472,907,776 bytes: four layers with the output would
    // fit, but not all five, so Ollama drops the output layer and places
    // three repeating layers (364,904,448 bytes). With the graph reserved
    // (375,846,912 left) the same three fit.
    let e = run(&on(&[GIB]));
    assert_eq!(layers(&e), vec![vec![1, 2, 3]]);
    assert_eq!((e.layers_on_gpu, e.graph_kind), (3, GraphKind::Partial));
    assert_eq!(e.gpus[0].graph_bytes, PARTIAL);
    assert_eq!(e.cpu_weights_bytes, 104_857_600 + OUTPUT);
    assert_eq!(e.cpu_cache_bytes, 16_777_216);
}

#[test]
fn gpus_are_tried_largest_first() {
    // GPU 1 (1.5 GiB) alone holds everything; GPU 0 stays empty.
    let e = run(&on(&[GIB, 1536 * MIB]));
    assert_eq!(layers(&e), vec![vec![], vec![0, 1, 2, 3, 4]]);
    assert_eq!(e.graph_kind, GraphKind::Full);
    assert_eq!((e.gpus[0].graph_bytes, e.gpus[1].graph_bytes), (0, FULL));
}

#[test]
fn layers_spread_over_two_gpus_that_each_hold_a_graph() {
    // 800 MiB each leaves 238,026,752 bytes per GPU before any graph: the
    // layout uses both GPUs, so both then reserve the 97,060,864-byte
    // graph, leaving 140,965,888 each: one layer per GPU. The first layers
    // go to the GPU first in the sorted list (GPU 0, a tie kept in order).
    let e = run(&on(&[800 * MIB, 800 * MIB]));
    assert_eq!(layers(&e), vec![vec![2], vec![3]]);
    assert_eq!((e.layers_on_gpu, e.graph_kind), (2, GraphKind::Partial));
    assert_eq!(e.gpus[0].graph_bytes, PARTIAL);
    assert_eq!(e.gpus[1].graph_bytes, PARTIAL);
    assert_eq!(e.gpus[1].total_bytes(), LAYER + PARTIAL);
}

#[test]
fn the_gpu_overhead_is_kept_free() {
    // 1 GiB of overhead on 2 GiB leaves what 1 GiB alone leaves.
    let e = run(&EstimateRequest {
        gpu_overhead: GIB,
        ..on(&[2 * GIB])
    });
    assert_eq!(layers(&e), vec![vec![1, 2, 3]]);
    assert_eq!(e.graph_kind, GraphKind::Partial);
}

#[test]
fn a_requested_layer_count_is_placed_without_the_output() {
    let e = run(&EstimateRequest {
        num_gpu: Some(2),
        ..on(&[2 * GIB])
    });
    assert_eq!(layers(&e), vec![vec![2, 3]]);
    let e = run(&EstimateRequest {
        num_gpu: Some(0),
        ..on(&[2 * GIB])
    });
    assert_eq!((e.layers_on_gpu, e.graph_kind), (0, GraphKind::Partial));
}

#[test]
fn ollama_adjusts_the_request_and_says_so() {
    // More context than the model was trained for, batch above context.
    let e = run(&EstimateRequest {
        ctx: 100_000,
        ..EstimateRequest::default()
    });
    assert_eq!(e.ctx, 8192);
    assert!(
        e.notes.iter().any(|n| n.contains("context_length 8192")),
        "{:?}",
        e.notes
    );
    let e = run(&EstimateRequest {
        ctx: 256,
        ..EstimateRequest::default()
    });
    assert_eq!(e.batch, 256);
    // A quantized cache needs flash attention on; f32 is not accepted.
    let e = run(&EstimateRequest {
        kv_type: KvCacheType::Q8_0,
        ..EstimateRequest::default()
    });
    assert_eq!(e.kv_type, KvCacheType::F16);
    assert_eq!(e.kv[0], 16_777_216);
    let e = run(&EstimateRequest {
        kv_type: KvCacheType::Q8_0,
        flash_attention: Some(true),
        ..EstimateRequest::default()
    });
    assert_eq!(e.kv_type, KvCacheType::Q8_0);
    assert_eq!(e.kv[0], 8_388_608);
    let e = run(&EstimateRequest {
        kv_type: KvCacheType::F32,
        ..EstimateRequest::default()
    });
    assert_eq!(e.kv_type, KvCacheType::F16);
    assert!(e.notes.iter().any(|n| n.contains("f32")));
}

#[test]
fn embedding_models_batch_the_whole_context() {
    let mut j = small_llama().to_json(&Default::default());
    j["kv"]["llama.pooling_type"] = json!(1);
    let h = header_from_json(&j, "embedding").unwrap();
    let e = ollama::estimate(&h, &EstimateRequest::default()).unwrap();
    assert_eq!(e.batch, 4096);
}

#[test]
fn without_a_graph_formula_ollama_falls_back_to_the_kv_size() {
    // An architecture Ollama has no formula for, with two recurrent layers:
    // kv_total 37,896,192; partial = 32 / max(0, 1) * kv_total / 6.
    let h = header_from_json(
        &json!({"kv": {
            "general.architecture": "hybrid",
            "hybrid.block_count": 4,
            "hybrid.embedding_length": 4096,
            "hybrid.attention.head_count": 32,
            "hybrid.attention.head_count_kv": [8, 0, 0, 8],
            "hybrid.ssm.conv_kernel": 4,
            "hybrid.ssm.state_size": 128,
            "hybrid.ssm.inner_size": 4096,
            "hybrid.ssm.group_count": 8,
            "tokenizer.ggml.tokens": {"type": "array[string]", "size": 1000},
        }}),
        "hybrid",
    )
    .unwrap();
    let e = ollama::estimate(&h, &EstimateRequest::default()).unwrap();
    assert_eq!(e.kv_total, 37_896_192);
    assert_eq!((e.graph_partial, e.graph_full), (202_113_024, 202_113_024));
    // No tensors: no blk.0, no buffer, layers weigh nothing.
    assert_eq!(e.reserved_buffer, None);
    assert_eq!(e.layer_cache, vec![0; 5]);
}

#[test]
fn the_json_document_has_the_documented_members() {
    let est = estimate(&small_llama(), &on(&[GIB, 2 * GIB]));
    let j = est.to_json();
    let o = &j["ollama"];
    assert_eq!(
        o["kv"],
        json!([16_777_216u64, 16_777_216u64, 16_777_216u64, 16_777_216u64])
    );
    assert_eq!(o["kv_total"], json!(67_108_864u64));
    assert_eq!(o["graph_partial"], json!(PARTIAL));
    assert_eq!(o["graph_full"], json!(FULL));
    assert_eq!(o["gpus"][0]["id"], json!("0"));
    assert_eq!(o["gpus"][1]["id"], json!("1"));
    assert_eq!(o["gpus"][1]["layers"], json!([0, 1, 2, 3, 4]));
    assert_eq!(o["layers_on_gpu"], json!(5));
    assert_eq!(o["graph_kind"], json!("full"));
    assert!(j["exact"].is_null());
    assert_eq!(j["model"]["architecture"], json!("llama"));
    assert_eq!(j["request"]["gpu_free"], json!([GIB, 2 * GIB]));
    // An estimate Ollama cannot make is an error member, not a failure.
    let mut hj = small_llama().to_json(&Default::default());
    hj["kv"]
        .as_object_mut()
        .unwrap()
        .remove("tokenizer.ggml.tokens");
    let h = header_from_json(&hj, "no vocab").unwrap();
    let j = estimate(&h, &EstimateRequest::default()).to_json();
    assert!(
        j["ollama"]["error"]
            .as_str()
            .unwrap()
            .contains("tokenizer.ggml.tokens")
    );
}
