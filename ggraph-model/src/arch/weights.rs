//! Where a graph's weights come from: a loaded model's tensors, or fresh
//! leafs for tests and benches. Weights use GGUF's tensor names.

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GraphBuilder, TensorId};

use std::collections::HashMap;

use super::config::{ModelConfig, Presence};

/// Provides the model's weights to the graph.
pub trait WeightSource {
    /// The leaf for weight `name` of ggml shape `shape`; an error if the
    /// model's tensor has another shape. `None` for optional weights the
    /// model does not have.
    fn weight(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<TensorId>>;
}

/// Fresh (unbound) weight leafs of one type, norms in F32, no optional
/// weights (rope factors, biases): for tests and
/// benches that fill or merely plan them.
pub struct FreshWeights {
    /// The type of every matrix (norms, 1-D weights and MoE routers are F32).
    pub dtype: DType,
}

impl WeightSource for FreshWeights {
    fn weight(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<TensorId>> {
        if name.starts_with("rope_f") || name.ends_with(".bias") {
            return Ok(None);
        }
        let dtype = if shape.len() == 1 || name.contains("norm") || ModelConfig::stays_f32(name) {
            DType::F32
        } else {
            self.dtype
        };
        b.weight(name, dtype, shape).map(Some)
    }
}

/// The weights of one graph build as the blocks read them: by name, each
/// with the shape the model's table ([`ModelConfig::weights`]) gives it,
/// the same table the loader checks files against, so a tensor's shape is
/// written once.
pub(super) struct Tensors<'a> {
    source: &'a mut dyn WeightSource,
    table: HashMap<String, (Vec<usize>, Presence)>,
    arch: &'static str,
}

impl<'a> Tensors<'a> {
    /// The weights of `config`'s table, from `source`.
    pub(super) fn new(config: &ModelConfig, source: &'a mut dyn WeightSource) -> Tensors<'a> {
        let table = (config.weights().into_iter())
            .map(|d| (d.name, (d.shape, d.presence)))
            .collect();
        Tensors {
            source,
            table,
            arch: config.arch.name,
        }
    }

    /// Weight `name`, which the table must declare and the model have.
    pub(super) fn req(&mut self, b: &mut GraphBuilder, name: &str) -> Result<TensorId> {
        let Some((shape, _)) = self.table.get(name) else {
            return Err(Error::InvalidArgument(format!(
                "the {} graph reads '{name}', which its weight table does not declare",
                self.arch
            )));
        };
        let shape = shape.clone();
        self.source
            .weight(b, name, &shape)?
            .ok_or_else(|| Error::InvalidArgument(format!("model has no tensor '{name}'")))
    }

    /// Weight `name` if the table declares it and the model has it.
    pub(super) fn opt(&mut self, b: &mut GraphBuilder, name: &str) -> Result<Option<TensorId>> {
        match self.table.get(name) {
            Some((shape, _)) => {
                let shape = shape.clone();
                self.source.weight(b, name, &shape)
            }
            None => Ok(None),
        }
    }

    /// A tensor the model has beside its architecture's table (the copy
    /// of tied token embeddings the output layer reads, `ModelDesc`).
    pub(super) fn model_tensor(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<TensorId>> {
        self.source.weight(b, name, shape)
    }
}

/// The model's rope frequency factors, n_rot / 2 values that divide each
/// pair's frequency, as llama.cpp picks them: `rope_freqs.weight` (llama
/// 3.1 and later), else LongRoPE's long factors when the context of a
/// sequence, `n_ctx_seq`, is past the original one and its short factors
/// otherwise (phi-3.5); `None` when the model has none. Every rope over Q
/// or K uses them, the K shift of the cache included.
pub fn rope_freq_factors(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    n_ctx_seq: usize,
    weights: &mut dyn WeightSource,
) -> Result<Option<TensorId>> {
    let shape = [c.n_rot / 2];
    if let Some(f) = weights.weight(b, "rope_freqs.weight", &shape)? {
        return Ok(Some(f));
    }
    let long = c.n_ctx_orig > 0 && n_ctx_seq > c.n_ctx_orig;
    let name = if long {
        "rope_factors_long.weight"
    } else {
        "rope_factors_short.weight"
    };
    weights.weight(b, name, &shape)
}
