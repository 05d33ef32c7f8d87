//! What a graph needs to know of a KV cache: its size and types, and a
//! source of each layer's cache tensors.

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::{GraphBuilder, TensorId};

/// The KV cache a graph reads and writes: its size and types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Cells per layer.
    pub kv_size: usize,
    /// Type of K's values (llama.cpp's `type_k`): F32, F16, BF16, Q8_0 or
    /// Q4_0.
    pub k_type: DType,
    /// Type of V's values (llama.cpp's `type_v`); a quantised V needs flash
    /// attention.
    pub v_type: DType,
}

/// Provides each layer's cache tensors (`[n_embd_kv, kv_size]` each).
pub trait CacheSource {
    /// Layer `layer`'s K and V cache as tensors of the graph `b` builds,
    /// each `[n_embd_kv, kv.kv_size]` of `kv.k_type` and `kv.v_type`; an
    /// error when the source has no such cache for that layer.
    fn layer_cache(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        kv: &KvLayout,
        n_embd_kv: usize,
    ) -> Result<(TensorId, TensorId)>;
}

/// Unbound cache leafs (for planning and tests).
pub struct FreshCache;

impl CacheSource for FreshCache {
    fn layer_cache(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        kv: &KvLayout,
        n_embd_kv: usize,
    ) -> Result<(TensorId, TensorId)> {
        let k = b.tensor_leaf(
            &format!("cache_k_l{layer}"),
            kv.k_type,
            &[n_embd_kv, kv.kv_size],
        )?;
        let v = b.tensor_leaf(
            &format!("cache_v_l{layer}"),
            kv.v_type,
            &[n_embd_kv, kv.kv_size],
        )?;
        Ok((k, v))
    }
}
