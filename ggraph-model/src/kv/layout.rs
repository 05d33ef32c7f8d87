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

/// Which of a recurrent layer's two states (llama.cpp's `r` and `s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatePart {
    /// The convolution's last inputs (`r`, `n_embd_r` values).
    Conv,
    /// The scan's state (`s`, `n_embd_s` values).
    Scan,
}

impl StatePart {
    /// The tensor's name in a graph, for layer `il`.
    pub fn name(self, il: usize) -> String {
        match self {
            StatePart::Conv => format!("cache_r_l{il}"),
            StatePart::Scan => format!("cache_s_l{il}"),
        }
    }
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

    /// Layer `layer`'s recurrent state `part` as a tensor of the graph
    /// `b` builds: F32 `[n_embd_state, rows]`, one row per state slot; an
    /// error when the source keeps no such state for that layer.
    fn layer_state(
        &mut self,
        _b: &mut GraphBuilder,
        layer: usize,
        _part: StatePart,
        _n_embd_state: usize,
        _rows: usize,
    ) -> Result<TensorId> {
        Err(ggraph_core::error::Error::InvalidArgument(format!(
            "no recurrent state for layer {layer}: the graph needs the context's memory"
        )))
    }
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

    fn layer_state(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        part: StatePart,
        n_embd_state: usize,
        rows: usize,
    ) -> Result<TensorId> {
        b.tensor_leaf(&part.name(layer), DType::F32, &[n_embd_state, rows])
    }
}
