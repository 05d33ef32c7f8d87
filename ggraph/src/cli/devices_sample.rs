//! The sample graph `ggraph devices` runs on every device: a small llama
//! model, checked against the f64 reference.
//!
//! The graph, its inputs and the reference logits are made once
//! ([`Sample::new`]) and every device runs the same graph on the same
//! data ([`Sample::run`]): the reference costs about as much as all the
//! devices' runs together, so it is not evaluated again per device.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ggraph_conformance::nmse;
use ggraph_conformance::{reference, testing};
use ggraph_core::backend::Device;
use ggraph_core::ir::Graph;
use ggraph_core::{DType, Result, TensorId, exec};
use ggraph_model::arch::{Attention, BuildShape, FreshWeights, ModelConfig, build_graph};
use ggraph_model::kv::FreshCache;

/// What a sample run measured.
pub struct SampleRun {
    pub nodes: usize,
    pub millis: f64,
    pub nmse: f64,
    /// The bound `nmse` must stay under (see [`sample_bound`]).
    pub bound: f64,
}

impl SampleRun {
    pub fn passed(&self) -> bool {
        self.nmse < self.bound
    }
}

/// The error bound of the sample's logits with `weights`: float weights
/// 1e-4; quantised weights 5e-4, the conformance suite's bound for a
/// quantised mul_mat, since a backend may quantise the activations to 8
/// bits as ggml does (the CPU does).
pub fn sample_bound(weights: DType) -> f64 {
    if weights.is_quantized() { 5e-4 } else { 1e-4 }
}

/// The sample model: 4 layers, n_embd 256, 8 heads (4 KV heads), 32 tokens.
pub fn sample_config() -> (ModelConfig, BuildShape) {
    let config = ModelConfig::dense(1000, 256, 4, 8, 4, 512);
    let shape = BuildShape::prompt(32, Attention::Standard);
    (config, shape)
}

/// The sample graph with its inputs and the f64 reference's logits.
pub struct Sample {
    pub weights: DType,
    graph: Graph,
    logits: TensorId,
    data: HashMap<TensorId, Vec<u8>>,
    reference: Vec<f64>,
}

impl Sample {
    /// Builds the sample graph with `weights` and its inputs (seed 7), and
    /// evaluates the reference.
    pub fn new(weights: DType) -> Result<Sample> {
        let (config, shape) = sample_config();
        let lg = build_graph(
            &config,
            &shape,
            &mut FreshWeights { dtype: weights },
            &mut FreshCache,
        )?;
        let data = testing::llama_leaf_data(&lg, &lg.graph, &config, &shape, 7)?;
        // the evaluator reads the graph's structure and these bytes, never
        // a device's memory
        let logits = lg.logits_tensor()?;
        let reference = reference::evaluate(&lg.graph, |id| Ok(data[&id].clone()))?.values(logits);
        Ok(Sample {
            weights,
            logits,
            graph: lg.graph,
            data,
            reference,
        })
    }

    /// Runs the graph on `device` (after one warm-up run) and compares its
    /// logits with the reference's.
    pub fn run(&self, device: &Arc<dyn Device>) -> Result<SampleRun> {
        let mut graph = self.graph.clone();
        let _buffer = exec::alloc_one_buffer(&mut graph, &device.buffer_type())?;
        for (id, bytes) in &self.data {
            graph.write_bytes(*id, bytes)?;
        }
        let mut stream = device.new_stream()?;
        stream.compute(&graph, graph.nodes())?;
        stream.synchronize()?;
        // the logits read back inside the timing: a remote server's
        // synchronize returns before its graph has run (its next request
        // waits for it), so only the read shows when the result is there
        let start = Instant::now();
        stream.compute(&graph, graph.nodes())?;
        stream.synchronize()?;
        let got = graph.read_f32(self.logits)?;
        let millis = start.elapsed().as_secs_f64() * 1e3;
        Ok(SampleRun {
            nodes: graph.nodes().len(),
            millis,
            nmse: nmse(&got, &self.reference),
            bound: sample_bound(self.weights),
        })
    }
}
