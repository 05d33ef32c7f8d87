//! A model's graph of one ubatch as its builders hand it over: its
//! inputs, outputs and the tensors callers look at.

use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{Graph, GraphBuilder, TensorId};

use super::pooling::PoolingInputs;
use super::recurrent::RecurrentInputs;

/// Input leafs of a model's graph.
#[derive(Clone, Debug)]
pub struct GraphInputs {
    /// I32 `[n_tokens]` token ids.
    pub tokens: TensorId,
    /// I32 `[n_tokens]` positions.
    pub positions: TensorId,
    /// `[n_kv, n_tokens]` attention mask (0 or -inf), F16 or F32; absent
    /// when every layer is a sliding-window one (no node would read it).
    pub kq_mask: Option<TensorId>,
    /// The same for the sliding-window layers, which also mask the cells
    /// `n_swa` or more positions before the token (present when the model
    /// has such layers): `[n_kv of their cache, n_tokens]`.
    pub kq_mask_swa: Option<TensorId>,
    /// I32 `[n_outputs]` rows of the last layer to keep (absent when every
    /// token outputs).
    pub out_ids: Option<TensorId>,
    /// I32 `[n_tokens]` cache cells the ubatch writes (with a cache).
    pub k_idx: Option<TensorId>,
    /// I32 `[n_tokens]` cache cells the ubatch writes in V (the same cells as
    /// K; a separate input so that K and V may live on different devices).
    pub v_idx: Option<TensorId>,
    /// The cells of the sliding-window layers' own cache, when they have
    /// one: I32 `[n_tokens]`, the cells written in K.
    pub k_idx_swa: Option<TensorId>,
    /// The same cells, written in V (with a sliding-window cache).
    pub v_idx_swa: Option<TensorId>,
    /// The state rows the recurrent layers read and write (a model with
    /// recurrent layers).
    pub recurrent: Option<RecurrentInputs>,
    /// What pooling reads (a pooled graph).
    pub pooling: PoolingInputs,
}

/// A built graph and where its pieces are.
pub struct ModelGraph {
    /// The graph of one ubatch, `logits` (or without them the
    /// embeddings) marked as its output.
    pub graph: Graph,
    /// Its input leafs, which the caller fills before each compute.
    pub inputs: GraphInputs,
    /// F32 `[n_vocab, n_outputs]`; None for an encoder and a pooled graph,
    /// which compute no logits.
    pub logits: Option<TensorId>,
    /// F32 `[n_embd, n_outputs]`: the output norm's result, the rows the
    /// logits are computed from (llama.cpp's `result_norm`, its
    /// embeddings; an encoder's last layer), or with pooling `[n_embd,
    /// n_seqs]` (a reranker's `[n_cls_out, n_seqs]`) in the order of
    /// [`pooled_seqs`](super::pooling::pooled_seqs). Not a graph output
    /// when there are logits, unless marked as one.
    pub embeddings: TensorId,
    /// Per layer (k, v) cache tensors.
    pub caches: Vec<(TensorId, TensorId)>,
    /// Last node of each layer (the residual output).
    pub layer_outputs: Vec<TensorId>,
}

impl ModelGraph {
    /// The logits tensor; an error for a graph without one (an encoder's,
    /// or one that pools embeddings).
    pub fn logits_tensor(&self) -> Result<TensorId> {
        self.logits.ok_or_else(|| {
            Error::InvalidArgument(
                "this graph computes no logits (an encoder's, or pooled embeddings)".into(),
            )
        })
    }
}

/// What a model's layers built: the graph so far, its inputs, the last
/// rows (the output norm's result, or an encoder's last layer) and the
/// logits where the head was built.
pub(super) struct Body {
    pub b: GraphBuilder,
    pub inputs: GraphInputs,
    pub hidden: TensorId,
    pub logits: Option<TensorId>,
    pub caches: Vec<(TensorId, TensorId)>,
    pub layer_outputs: Vec<TensorId>,
}
