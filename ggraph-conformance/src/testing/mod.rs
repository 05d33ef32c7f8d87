//! Test support shared by the backends' test suites: deterministic data for
//! graphs, and a small llama fixture with everything it needs filled in.

use std::collections::HashMap;

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::quant;
use ggraph_core::util::Rng;
use ggraph_model::arch::{BuildShape, ModelConfig, ModelGraph, causal_mask};

pub mod greedy;
pub mod mixed;
pub mod random_graph;

/// Bytes for a tensor of `graph` holding `values` (logical order),
/// quantised to its type. The tensor must be contiguous.
pub fn bytes_of(graph: &Graph, id: TensorId, values: &[f32]) -> Result<Vec<u8>> {
    let t = graph.tensor(id);
    if t.is_empty() {
        return Ok(Vec::new());
    }
    quant::quantize(t.dtype, values)
}

/// Leaf data for a llama graph: weights scaled to keep activations of
/// order one, tokens below the vocabulary, positions, a causal mask,
/// cache cells for the ubatch at the end of the visible cache, and random
/// earlier cache contents.
pub fn llama_leaf_data(
    lg: &ModelGraph,
    graph: &Graph,
    config: &ModelConfig,
    shape: &BuildShape,
    seed: u64,
) -> Result<HashMap<TensorId, Vec<u8>>> {
    let mut data = HashMap::new();
    let n_tokens = shape.n_tokens;
    let first_pos = (shape.n_kv - n_tokens) as i32;
    let positions: Vec<i32> = (0..n_tokens as i32).map(|i| first_pos + i).collect();
    let cell_pos: Vec<Option<i32>> = (0..shape.n_kv as i32).map(Some).collect();
    for &leaf in graph.leafs() {
        let t = graph.tensor(leaf);
        let n = t.nelements();
        // seeded by name, so that graphs of another structure over the same
        // model get the same data
        let mut rng = Rng::new(seed ^ name_hash(&t.name));
        let values: Vec<f32> = if leaf == lg.inputs.tokens {
            (0..n).map(|_| rng.below(config.n_vocab) as f32).collect()
        } else if leaf == lg.inputs.positions {
            positions.iter().map(|p| *p as f32).collect()
        } else if Some(leaf) == lg.inputs.kq_mask {
            causal_mask(&positions, &cell_pos, 0)
        } else if Some(leaf) == lg.inputs.kq_mask_swa {
            causal_mask(&positions, &cell_pos, config.n_swa)
        } else if Some(leaf) == lg.inputs.out_ids {
            // the last n_outputs tokens
            (n_tokens - n..n_tokens).map(|i| i as f32).collect()
        } else if Some(leaf) == lg.inputs.k_idx {
            positions.iter().map(|p| *p as f32).collect()
        } else if Some(leaf) == lg.inputs.v_idx {
            positions.iter().map(|p| *p as f32).collect()
        } else if t.name.contains("norm") {
            rng.vec(n, 0.8, 1.2)
        } else if t.flags.weight {
            let fan_in = t.ne[0].max(1) as f32;
            let a = if &*t.name == "token_embd.weight" {
                1.0
            } else {
                1.5 / fan_in.sqrt()
            };
            rng.vec(n, -a, a)
        } else {
            // cache contents and anything else
            rng.vec(n, -1.0, 1.0)
        };
        let bytes = if t.dtype == DType::I32 {
            values
                .iter()
                .flat_map(|v| (*v as i32).to_le_bytes())
                .collect()
        } else {
            bytes_of(graph, leaf, &values)?
        };
        data.insert(leaf, bytes);
    }
    Ok(data)
}

fn name_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
