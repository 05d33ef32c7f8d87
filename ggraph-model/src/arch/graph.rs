//! A model's graph of one ubatch, built by the decoder (`decoder.rs`) or
//! an encoder (`encoder.rs`), then pooled where the shape asks
//! (`pooling.rs`).

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};

use super::config::ModelConfig;
use super::decoder::build_decoder;
use super::encoder::build_encoder;
use super::model_graph::ModelGraph;
use super::pooling::{dense_modules, pool};
use super::shape::BuildShape;
use super::weights::{Tensors, WeightSource};
use crate::kv::CacheSource;

/// Builds the graph of model `config` for one ubatch.
pub fn build_graph(
    config: &ModelConfig,
    shape: &BuildShape,
    weights: &mut dyn WeightSource,
    cache: &mut dyn CacheSource,
) -> Result<ModelGraph> {
    config.validate()?;
    if shape.n_outputs == 0 || shape.n_outputs > shape.n_tokens {
        return Err(Error::InvalidArgument(format!(
            "n_outputs {} must be in 1..={}",
            shape.n_outputs, shape.n_tokens
        )));
    }
    if shape.kv.is_none() && shape.n_kv != shape.n_tokens {
        return Err(Error::InvalidArgument(
            "without a cache, n_kv must equal n_tokens".into(),
        ));
    }
    let caches_seen = shape.kv.map(|kv| (shape.n_kv, kv)).into_iter();
    for (n_kv, kv) in caches_seen.chain(shape.swa.map(|s| (s.n_kv, s.kv))) {
        if n_kv > kv.kv_size || n_kv < shape.n_tokens.min(kv.kv_size) {
            return Err(Error::InvalidArgument(format!(
                "n_kv {n_kv} must be in n_tokens..=kv_size ({}..={})",
                shape.n_tokens, kv.kv_size
            )));
        }
    }
    if shape.swa.is_some() && shape.kv.is_none() {
        return Err(Error::InvalidArgument(
            "a sliding-window cache needs the main cache".into(),
        ));
    }
    if !matches!(shape.mask_type, DType::F32 | DType::F16) {
        return Err(Error::InvalidArgument(format!(
            "the attention mask is F32 or F16, not {}",
            shape.mask_type
        )));
    }
    if config.arch.encoder && shape.kv.is_some() {
        return Err(Error::InvalidArgument(format!(
            "a {} model keeps no cache: its graphs attend only to their ubatch",
            config.arch.name
        )));
    }
    let head = shape.pooled.is_none() && !config.arch.embeddings_only;
    let mut body = match config.arch.encoder {
        true => build_encoder(config, shape, weights)?,
        false => build_decoder(config, shape, weights, cache, head)?,
    };
    let dense = config.n_dense > 0 && body.logits.is_none();
    let mut embeddings = body.hidden;
    // the weight table only where a head after the layers reads it (it
    // lists every weight of the model)
    if shape.pooled.is_some() || dense {
        let weights = &mut Tensors::new(config, weights);
        if let Some(p) = shape.pooled {
            let (pooled, inputs) = pool(&mut body.b, config, weights, embeddings, p)?;
            body.inputs.pooling = inputs;
            embeddings = pooled;
        }
        if dense {
            embeddings = dense_modules(&mut body.b, weights, embeddings)?;
        }
    }
    let mut b = body.b;
    b.set_output(body.logits.unwrap_or(embeddings))?;
    Ok(ModelGraph {
        graph: b.build(),
        inputs: body.inputs,
        logits: body.logits,
        embeddings,
        caches: body.caches,
        layer_outputs: body.layer_outputs,
    })
}
