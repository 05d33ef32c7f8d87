//! The shape of one graph build: how attention is computed, the ubatch,
//! and the cache it sees.

use ggraph_core::dtype::DType;

use super::pooling::PoolShape;
use crate::kv::KvLayout;

/// How attention is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// kq = k·q, softmax with mask, v·kq: materialises the score matrix.
    /// With a KV cache, V is stored transposed (as llama.cpp does).
    Standard,
    /// One fused flash_attn_ext per layer; V is stored row-major.
    Flash,
}

/// The shape of one graph build: a ubatch over some visible cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildShape {
    /// Tokens in the ubatch.
    pub n_tokens: usize,
    /// Tokens whose logits are computed (the last layer keeps only these).
    pub n_outputs: usize,
    /// Cells the attention looks at (n_tokens without a cache).
    pub n_kv: usize,
    /// Standard or flash attention (llama.cpp's `flash_attn`).
    pub attention: Attention,
    /// The cache; None attends only to the ubatch's own tokens.
    pub kv: Option<KvLayout>,
    /// The sliding-window layers' own cache and the cells of it they look
    /// at, when they have one (else they share `kv`).
    pub swa: Option<SwaCache>,
    /// The context of one sequence (LongRoPE picks its factors by it).
    pub n_ctx_seq: usize,
    /// Type of the attention mask: F16 (exact for 0 and -inf, half the
    /// bytes) or F32 (as ggml builds it for standard attention).
    pub mask_type: DType,
    /// The recurrent layers' state and the ubatch's sequences, for a
    /// model with recurrent layers.
    pub recurrent: Option<RecurrentShape>,
    /// The embeddings pooled per sequence (and no logits computed); every
    /// token is then an output.
    pub pooled: Option<PoolShape>,
}

/// How a ubatch meets the recurrent layers' state: its tokens are
/// `n_seqs` runs of equal length, one sequence each, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentShape {
    /// Sequences in the ubatch (a divisor of its tokens).
    pub n_seqs: usize,
    /// Rows of each layer's state tensors.
    pub rows: usize,
}

impl BuildShape {
    /// A ubatch that attends only to itself (no cache), every token
    /// producing logits.
    pub fn prompt(n_tokens: usize, attention: Attention) -> BuildShape {
        BuildShape {
            n_tokens,
            n_outputs: n_tokens,
            n_kv: n_tokens,
            attention,
            kv: None,
            swa: None,
            n_ctx_seq: n_tokens,
            mask_type: DType::F16,
            recurrent: None,
            pooled: None,
        }
    }

    /// A ubatch over `n_kv` visible cells of a cache.
    pub fn cached(
        n_tokens: usize,
        n_outputs: usize,
        n_kv: usize,
        attention: Attention,
        kv: KvLayout,
    ) -> BuildShape {
        BuildShape {
            n_tokens,
            n_outputs,
            n_kv,
            attention,
            kv: Some(kv),
            swa: None,
            n_ctx_seq: kv.kv_size,
            mask_type: DType::F16,
            recurrent: None,
            pooled: None,
        }
    }

    /// The same, for a cache shared by sequences of `n_ctx_seq` cells each.
    pub fn with_ctx_per_seq(mut self, n_ctx_seq: usize) -> BuildShape {
        self.n_ctx_seq = n_ctx_seq;
        self
    }

    /// The same, with the sliding-window layers over `n_kv` cells of
    /// their own cache `kv`.
    pub fn with_swa_cache(mut self, n_kv: usize, kv: KvLayout) -> BuildShape {
        self.swa = Some(SwaCache { n_kv, kv });
        self
    }

    /// The same, with the last rows pooled into one per sequence of the
    /// ubatch instead of logits.
    pub fn with_pooling(mut self, pooled: PoolShape) -> BuildShape {
        self.pooled = Some(pooled);
        self
    }

    /// The same, with the ubatch's tokens in `n_seqs` sequences meeting
    /// the recurrent layers' state tensors of `rows` rows.
    pub fn with_recurrent(mut self, n_seqs: usize, rows: usize) -> BuildShape {
        self.recurrent = Some(RecurrentShape { n_seqs, rows });
        self
    }
}

/// The sliding-window layers' cache in one graph build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwaCache {
    /// Cells the attention looks at.
    pub n_kv: usize,
    /// The layout of the sliding-window layers' cache.
    pub kv: KvLayout,
}
