//! What an architecture is ([`ArchSpec`]: its variations of the decoder,
//! as data) and the numbers of one model of it ([`ModelConfig`]), with
//! the weights such a model has.

use std::fmt;

use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GluOp, RopeMode, RopeParams};

use super::pooling_type::Pooling;
use crate::gguf::{ArrayValues, GgufHeader, meta_error};

/// How a layer's feed-forward network is made (when it is not a mixture
/// of experts: a model with experts always routes them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FfnKind {
    /// `ffn_gate` and `ffn_up`, the gate's activation times up, `ffn_down`.
    Split(GluOp),
    /// Gate and up in one matrix `ffn_up` of twice the width (first half
    /// the gate), then `ffn_down` (phi3).
    Fused(GluOp),
    /// No gate: `ffn_up`, GELU, `ffn_down` (BERT's).
    Ungated,
}

/// How a mixture of experts' router picks a token's experts and weighs
/// their outputs (llama.cpp's `llama_expert_gating_func_type` with its
/// `norm_w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertRouting {
    /// Softmax over every expert's logit, the top `expert_used_count`
    /// probabilities, renormalised to sum to one (qwen3moe, qwen35moe,
    /// granite's experts).
    SoftmaxThenTopK,
    /// The top `expert_used_count` logits, softmax over those only
    /// (gpt-oss's `SOFTMAX_WEIGHT`).
    TopKThenSoftmax,
}

/// The block of an architecture's recurrent layers (the layers a GGUF
/// gives no KV heads), whose state the context keeps per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecurrentBlock {
    /// LFM2's gated short convolution: `shortconv.in_proj` gives B, C and
    /// x; the last `l_cache - 1` values of B*x per channel are the state.
    ShortConv,
    /// Mamba-2's selective scan: `ssm_in` gives z, x, B, C and dt; x, B
    /// and C go through a short convolution (its last `d_conv - 1`
    /// inputs are the first state), then the scan (its state the second),
    /// gated by z and RMS-normed per group.
    Mamba2,
    /// Gated DeltaNet (Qwen3.5's linear attention): `attn_qkv` gives q, k
    /// and v through a short convolution (its last `d_conv - 1` inputs the
    /// first state), q and k L2-normed, the delta rule's recurrence (its
    /// state matrix per head the second), gated RMS norm by `attn_gate`.
    GatedDeltaNet,
}

impl RecurrentBlock {
    /// Whether a file marks this block's layers by giving them no KV
    /// heads (LFM2, Granite); Qwen3.5's files list them instead
    /// (`full_attention_interval`, `attention.recurrent_layers`) and give
    /// every layer the same KV heads.
    pub fn marked_by_kv_heads(self) -> bool {
        !matches!(self, RecurrentBlock::GatedDeltaNet)
    }
}

/// One architecture as data: how its decoder layers differ from llama's,
/// and the hyperparameters only it reads. The graph builder
/// (`arch/decoder.rs`) and the weight list ([`ModelConfig::weights`])
/// follow it, so placement, estimates and loading need no special cases.
pub struct ArchSpec {
    /// `general.architecture`, the prefix of its hyperparameter keys.
    pub name: &'static str,
    /// The rotary embedding's layout.
    pub rope: RopeMode,
    /// Q and K each RMS-normalised per head before the rope (qwen3,
    /// gemma3).
    pub qk_norm: bool,
    /// Its models carry Q, K and V in one matrix `attn_qkv` (a file may
    /// still hold them apart, or fused for another architecture: the
    /// file decides, [`ModelConfig::fused_qkv`]).
    pub fused_qkv: bool,
    /// Its models carry Q, K and V biases (qwen2).
    pub qkv_bias: bool,
    /// RMS norms after the attention and after the FFN, before each
    /// residual add (gemma2, gemma3).
    pub post_norms: bool,
    /// How a dense layer's feed-forward network is made (its GLU and
    /// whether gate and up share one matrix).
    pub ffn: FfnKind,
    /// Token embeddings scaled by sqrt(n_embd) (gemma).
    pub embed_scale: bool,
    /// The logits always come from the token embeddings (gemma2); else
    /// from `output.weight`, or the token embeddings when it is absent.
    pub tied_output: bool,
    /// The block of the layers whose `attention.head_count_kv` entry is
    /// 0 (None: every layer attends, and a 0 is an error).
    pub recurrent: Option<RecurrentBlock>,
    /// The name of the final norm's weight (`output_norm`; LFM2's
    /// converter writes `token_embd_norm`).
    pub output_norm: &'static str,
    /// Attention's output gated: Q's projection is twice as wide, each
    /// head's gate after its query, and sigmoid(gate) multiplies the
    /// attention before `attn_output` (Qwen3.5).
    pub gated_attention: bool,
    /// The name of the norm before the FFN (`ffn_norm`; Qwen3.5's is
    /// `post_attention_norm`).
    pub ffn_norm: &'static str,
    /// One learned logit per attention head (`attn_sinks`) joins each
    /// softmax's maximum and sum with no value row (gpt-oss).
    pub attention_sinks: bool,
    /// Its models carry a bias on the attention's output projection
    /// (gpt-oss; a file of another architecture may still hold one).
    pub output_bias: bool,
    /// How the experts' router weighs them (in a model with experts).
    pub routing: ExpertRouting,
    /// The router and every expert's three products carry biases
    /// (`ffn_gate_inp.bias`, `ffn_{gate,up,down}_exps.bias`; gpt-oss).
    pub moe_biases: bool,
    /// The output positions' rows are picked after the last layer, not
    /// before its FFN (gpt-oss, Qwen3.5, Gemma 4): the last FFN runs on
    /// every token, as in llama.cpp, whose products' summing order can
    /// follow the batch.
    pub outputs_after_layers: bool,
    /// V RMS-normalised per head without a weight, and taken from K's
    /// projection (before K's norm) where a layer has no `attn_v` (Gemma
    /// 4).
    pub value_norm: bool,
    /// A mixture-of-experts layer keeps its dense FFN beside the experts,
    /// each branch with its own norms, the router reading the unweighted
    /// norm of the layer's input scaled by `ffn_gate_inp.scale` (Gemma 4).
    pub experts_beside_dense: bool,
    /// The rope's frequency factors (`rope_freqs.weight`) apply to the
    /// full-attention layers only, the sliding-window ones rotating plainly
    /// (Gemma 4's proportional rope).
    pub freq_factors_full_only: bool,
    /// Each layer's output may be scaled by a learned scalar
    /// (`layer_output_scale.weight`, Gemma 4).
    pub layer_output_scale: bool,
    /// Its files give each layer an input of its own
    /// (`embedding_length_per_layer_input`, 0 for none: Gemma 4).
    pub per_layer_inputs: bool,
    /// Its layers are an encoder's (`arch/encoder.rs`: BERT's post-norm
    /// layers, LayerNorms with biases, learned positions), not the
    /// decoder's; the model has no output head.
    pub encoder: bool,
    /// Its graph computes embeddings, never logits (an embedding model):
    /// a context of it always computes embeddings.
    pub embeddings_only: bool,
    /// A context keeps no memory between batches (llama.cpp's memory
    /// "none"): every batch is one ubatch that attends only to itself.
    pub keeps_no_memory: bool,
    /// Q is multiplied by the attention scale before attention, which
    /// then scales its scores by 1 (gemma's; the same in exact arithmetic,
    /// but flash attention rounds the scaled Q to F16).
    pub prescaled_q: bool,
    /// The sliding window reaches `n_swa / 2` positions both ways
    /// (llama.cpp's symmetric window: gemma-embedding); else `n_swa - 1`
    /// back.
    pub swa_symmetric: bool,
    /// Reads the hyperparameters only this architecture has, after the
    /// common ones (`arch/hparams.rs`).
    pub read: fn(&GgufHeader, &mut ModelConfig) -> Result<()>,
    /// Sets this architecture's defaults on a new model's numbers
    /// (random models, `make-model`).
    pub defaults: fn(&mut ModelConfig),
}

/// `ArchSpec::read` of an architecture with no keys of its own.
fn no_keys_of_its_own(_: &GgufHeader, _: &mut ModelConfig) -> Result<()> {
    Ok(())
}

fn no_defaults(_: &mut ModelConfig) {}

impl ArchSpec {
    /// The plain pre-norm decoder each architecture varies (llama's
    /// choices, with no name): a spec names what it changes and takes the
    /// rest with `..ArchSpec::BASE`.
    pub const BASE: ArchSpec = ArchSpec {
        name: "",
        rope: RopeMode::Normal,
        qk_norm: false,
        fused_qkv: false,
        qkv_bias: false,
        post_norms: false,
        ffn: FfnKind::Split(GluOp::Swiglu),
        embed_scale: false,
        tied_output: false,
        recurrent: None,
        output_norm: "output_norm",
        gated_attention: false,
        ffn_norm: "ffn_norm",
        attention_sinks: false,
        output_bias: false,
        routing: ExpertRouting::SoftmaxThenTopK,
        moe_biases: false,
        outputs_after_layers: false,
        value_norm: false,
        experts_beside_dense: false,
        freq_factors_full_only: false,
        layer_output_scale: false,
        per_layer_inputs: false,
        encoder: false,
        embeddings_only: false,
        keeps_no_memory: false,
        prescaled_q: false,
        swa_symmetric: false,
        read: no_keys_of_its_own,
        defaults: no_defaults,
    };
}

impl fmt::Debug for ArchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for ArchSpec {
    fn eq(&self, other: &ArchSpec) -> bool {
        self.name == other.name
    }
}

/// Whether a model of the architecture has a weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// The loader refuses a file without it.
    Required,
    /// Its models carry it (random models have it); a file may not.
    Usual,
    /// Read when present.
    Optional,
}

/// A weight an architecture may read: GGUF name and ggml shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightDecl {
    /// The tensor's GGUF name, as llama.cpp names it (`blk.3.attn_q.weight`).
    pub name: String,
    /// ggml dimensions in elements, innermost first (`ne[0]`, `ne[1]`, ...).
    pub shape: Vec<usize>,
    /// Whether a file must, usually does or may hold it.
    pub presence: Presence,
}

/// The hyperparameters of a model of some architecture.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The architecture, which says how the layers are built.
    pub arch: &'static ArchSpec,
    /// Tokens in the vocabulary: rows of `token_embd`, width of the logits.
    pub n_vocab: usize,
    /// Width of the hidden state, in elements (`{arch}.embedding_length`).
    pub n_embd: usize,
    /// Decoder layers (`{arch}.block_count`).
    pub n_layer: usize,
    /// Query heads (`{arch}.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`{arch}.attention.head_count_kv`); equal to `n_head`
    /// without grouped-query attention, and a divisor of it.
    pub n_head_kv: usize,
    /// Width of a dense layer's FFN (`{arch}.feed_forward_length`); 0 when
    /// the header has none.
    pub n_ff: usize,
    /// Per-head dimension (n_embd / n_head unless the model says otherwise).
    pub head_dim: usize,
    /// The rope's frequency base (`{arch}.rope.freq_base`; 10000 by default).
    pub rope_freq_base: f32,
    /// The rope's position scale, 1 / `{arch}.rope.scaling.factor` (1: none).
    pub rope_freq_scale: f32,
    /// Rotated dimensions per head (fewer than head_dim: partial rotary).
    pub n_rot: usize,
    /// The RMS norms' epsilon (`{arch}.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// Experts per MoE layer (0 for a dense model).
    pub n_expert: usize,
    /// Experts each token is routed to (`{arch}.expert_used_count`; 0 for a
    /// dense model).
    pub n_expert_used: usize,
    /// Expert FFN width.
    pub n_ff_expert: usize,
    /// Q, K and V come from one matrix `attn_qkv`.
    pub fused_qkv: bool,
    /// The window of the sliding-window layers, in positions: a token
    /// sees the cells less than `n_swa` positions before it (0: none).
    pub n_swa: usize,
    /// Per layer: whether it attends over the sliding window only.
    pub swa_layers: Vec<bool>,
    /// The frequency base of the sliding-window layers' rope.
    pub rope_freq_base_swa: f32,
    /// The position scale of the sliding-window layers' rope.
    pub rope_freq_scale_swa: f32,
    /// Attention scores capped as `c * tanh(s / c)` (0: not capped).
    pub attn_softcap: f32,
    /// Logits capped the same way (0: not capped).
    pub final_softcap: f32,
    /// The factor on the attention scores (1 / sqrt(head_dim) for most).
    pub attention_scale: f32,
    /// The context the rope was trained for (`rope.scaling.
    /// original_context_length`, else `context_length`; 0: unknown; 4096
    /// for a new model): past it, a LongRoPE model's long frequency
    /// factors apply.
    pub n_ctx_orig: usize,
    /// The magnitude of the rope's cos and sin (`rope.scaling.attn_factor`,
    /// LongRoPE models; 1 for the rest).
    pub rope_attn_factor: f32,
    /// YaRN's mix of extrapolated angles (`rope.scaling.type` "yarn": 1,
    /// else 0), over the context `n_ctx_orig` with ggml's default betas.
    pub rope_ext_factor: f32,
    /// Per layer: whether it is one of the architecture's recurrent
    /// layers ([`ArchSpec::recurrent`]) rather than an attention layer.
    pub recurrent_layers: Vec<bool>,
    /// The short convolution's width in tokens, its state one less
    /// (`{arch}.shortconv.l_cache`; 0 without short convolutions).
    pub shortconv_l_cache: usize,
    /// Mamba-2's convolution width (`{arch}.ssm.conv_kernel`).
    pub ssm_d_conv: usize,
    /// Mamba-2's inner width (`{arch}.ssm.inner_size`).
    pub ssm_d_inner: usize,
    /// Mamba-2's state size per head dimension (`{arch}.ssm.state_size`).
    pub ssm_d_state: usize,
    /// Mamba-2's heads (`{arch}.ssm.time_step_rank`).
    pub ssm_n_head: usize,
    /// Mamba-2's groups of heads sharing B and C (`{arch}.ssm.group_count`).
    pub ssm_n_group: usize,
    /// The token embeddings' factor (`{arch}.embedding_scale`; 0: none).
    pub embedding_scale: f32,
    /// The factor on each block's output before its residual add
    /// (`{arch}.residual_scale`; 0: none).
    pub residual_scale: f32,
    /// The logits are divided by this (`{arch}.logit_scale`; 0: none).
    pub logit_scale: f32,
    /// Whether attention rotates Q and K (granite's NoPE models do not).
    pub use_rope: bool,
    /// The multi-section rope's sections, in rotated pairs
    /// (`{arch}.rope.dimension_sections`; all 0: none).
    pub rope_sections: [u32; 4],
    /// Layers the file holds past the model's (`blk.{n_layer}` on): a
    /// multi-token prediction head (`nextn_predict_layers`), which the
    /// main pass never runs. Their tensors are accepted and not loaded.
    pub n_layer_extra: usize,
    /// The shared expert's output scaled by sigmoid(`ffn_gate_inp_shexp`
    /// · x), a gate per token (Qwen3.5's MoE).
    pub shexp_gate: bool,
    /// Width of the shared expert's FFN beside the routed ones
    /// (`{arch}.expert_shared_feed_forward_length`; 0: none).
    pub n_ff_shexp: usize,
    /// The sliding-window layers' heads where they differ from the full
    /// layers' (Gemma 4: `attention.key_length_swa`, its own KV heads and
    /// rotated dimensions); None: the same.
    pub swa_heads: Option<HeadShape>,
    /// Per layer, the dense FFN's width where it differs between layers
    /// (`feed_forward_length` as an array); empty: `n_ff` for every layer.
    pub n_ff_layers: Vec<usize>,
    /// The last layers that keep no KV of their own but read an earlier
    /// layer's cache ([`ModelConfig::kv_source`]; `attention.
    /// shared_kv_layers`, Gemma 4).
    pub n_kv_shared: usize,
    /// Width of each layer's per-layer input (`embedding_length_per_layer_input`,
    /// Gemma 4's per-layer embeddings; 0: none).
    pub n_embd_per_layer: usize,
    /// Whether a token attends only to earlier positions
    /// (`{arch}.attention.causal`, true unless the file says not).
    pub causal: bool,
    /// How embeddings are pooled by default (`{arch}.pooling_type`).
    pub pooling: Pooling,
    /// Scores a reranker's classifier gives a pair (the count of
    /// `{arch}.classifier.output_labels`; 1 without).
    pub n_cls_out: usize,
    /// The LayerNorms' epsilon (`{arch}.attention.layer_norm_epsilon`),
    /// for an encoder's layers.
    pub norm_eps: f32,
    /// The context the model was trained for (`{arch}.context_length`):
    /// the rows of learned position embeddings.
    pub n_ctx_train: usize,
    /// Rows of the token-type embeddings (`{arch}.token_type_count`; 0:
    /// none).
    pub n_token_types: usize,
    /// How a dense layer's FFN is made: the architecture's, unless its
    /// file says otherwise (jina-bert-v2's gate within `ffn_up`).
    pub ffn: FfnKind,
    /// ALiBi's maximum bias (`f_max_alibi_bias`: the heads' slopes, and
    /// attention's mask holding minus each key's distance; 0: none).
    pub max_alibi_bias: f32,
    /// Width between sentence-transformers' two dense projections after
    /// pooling (`dense_2` to it, `dense_3` back: `{arch}.dense_2_feat_out`;
    /// 0: none).
    pub n_dense: usize,
}

/// The heads of a kind of attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadShape {
    /// Per-head dimension of K, V and Q.
    pub head_dim: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Rotated dimensions per head.
    pub n_rot: usize,
}

impl ModelConfig {
    /// A model of `arch` with head_dim = n_embd / n_head, rope base 10000
    /// and the architecture's defaults.
    pub fn new(
        arch: &'static ArchSpec,
        n_vocab: usize,
        n_embd: usize,
        n_layer: usize,
        n_head: usize,
        n_head_kv: usize,
        n_ff: usize,
    ) -> ModelConfig {
        let head_dim = n_embd / n_head.max(1);
        let mut c = ModelConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            head_dim,
            rope_freq_base: 10000.0,
            rope_freq_scale: 1.0,
            n_rot: head_dim,
            rms_eps: 1e-5,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_expert: n_ff,
            fused_qkv: arch.fused_qkv,
            n_swa: 0,
            swa_layers: vec![false; n_layer],
            rope_freq_base_swa: 10000.0,
            rope_freq_scale_swa: 1.0,
            attn_softcap: 0.0,
            final_softcap: 0.0,
            attention_scale: 1.0 / (head_dim.max(1) as f32).sqrt(),
            n_ctx_orig: 4096,
            rope_attn_factor: 1.0,
            rope_ext_factor: 0.0,
            recurrent_layers: vec![false; n_layer],
            shortconv_l_cache: 0,
            ssm_d_conv: 0,
            ssm_d_inner: 0,
            ssm_d_state: 0,
            ssm_n_head: 0,
            ssm_n_group: 0,
            embedding_scale: 0.0,
            residual_scale: 0.0,
            logit_scale: 0.0,
            use_rope: true,
            rope_sections: [0; 4],
            n_layer_extra: 0,
            shexp_gate: false,
            n_ff_shexp: 0,
            swa_heads: None,
            n_ff_layers: Vec::new(),
            n_kv_shared: 0,
            n_embd_per_layer: 0,
            causal: true,
            pooling: Pooling::None,
            n_cls_out: 1,
            norm_eps: 1e-12,
            n_ctx_train: 4096,
            n_token_types: 0,
            ffn: arch.ffn,
            max_alibi_bias: 0.0,
            n_dense: 0,
        };
        (arch.defaults)(&mut c);
        c
    }

    /// Sets head_dim (and with it the rotated dimensions and the
    /// attention scale that follow from it).
    pub fn with_head_dim(mut self, head_dim: usize) -> ModelConfig {
        self.head_dim = head_dim;
        self.n_rot = head_dim;
        self.attention_scale = 1.0 / (head_dim.max(1) as f32).sqrt();
        self
    }

    /// Makes every `n_pattern`-th layer global and the others attend over
    /// a window of `n_swa` positions (llama.cpp's `set_swa_pattern`:
    /// with pattern 2, layers 0, 2, ... slide; 0 makes every layer slide).
    pub fn set_swa_pattern(&mut self, n_swa: usize, n_pattern: usize) {
        self.n_swa = n_swa;
        self.swa_layers = (0..self.n_layer)
            .map(|il| n_pattern == 0 || il % n_pattern < n_pattern - 1)
            .collect();
    }

    /// Reads the sliding-window layers as llama.cpp does: the window
    /// `n_swa`, then `attention.sliding_window_pattern` either as one flag
    /// per layer or as a period (`default_pattern` when absent).
    pub fn read_swa_pattern(
        &mut self,
        h: &GgufHeader,
        n_swa: usize,
        default_pattern: usize,
    ) -> Result<()> {
        let key = h.arch_key("attention.sliding_window_pattern")?;
        if let Some(a) = h.opt_array(&key)? {
            let flags = match a.values() {
                Some(ArrayValues::Bool(v)) => v.clone(),
                _ => {
                    return Err(meta_error(format!(
                        "'{key}' must be a period or one bool per layer"
                    )));
                }
            };
            if flags.len() != self.n_layer {
                return Err(meta_error(format!(
                    "'{key}' has {} flags for {} layers",
                    flags.len(),
                    self.n_layer
                )));
            }
            self.n_swa = n_swa;
            self.swa_layers = flags;
            return Ok(());
        }
        let n_pattern = h.opt_u32(&key)?.map_or(default_pattern, |p| p as usize);
        self.set_swa_pattern(n_swa, n_pattern);
        Ok(())
    }

    /// K (and V) row width of a full-attention layer: head_dim * n_head_kv.
    pub fn n_embd_kv(&self) -> usize {
        self.head_dim * self.n_head_kv
    }

    /// The heads of layer `il`: the sliding-window layers' own where they
    /// have them.
    pub fn heads(&self, il: usize) -> HeadShape {
        match self.swa_heads {
            Some(h) if self.is_swa(il) => h,
            _ => HeadShape {
                head_dim: self.head_dim,
                n_head_kv: self.n_head_kv,
                n_rot: self.n_rot,
            },
        }
    }

    /// K (and V) row width of layer `il`.
    pub fn n_embd_kv_of(&self, il: usize) -> usize {
        let h = self.heads(il);
        h.head_dim * h.n_head_kv
    }

    /// The dense FFN width of layer `il`.
    pub fn n_ff_of(&self, il: usize) -> usize {
        self.n_ff_layers.get(il).copied().unwrap_or(self.n_ff)
    }

    /// The layer whose KV cache layer `il` attends over: its own, or for
    /// one of the last [`ModelConfig::n_kv_shared`] layers, the last layer
    /// with a cache (a full-attention layer) or the one before it (a
    /// sliding-window layer), as llama.cpp maps them.
    pub fn kv_source(&self, il: usize) -> usize {
        let n_kv = self.n_layer - self.n_kv_shared.min(self.n_layer);
        match il < n_kv {
            true => il,
            false if self.is_swa(il) => n_kv.saturating_sub(2),
            false => n_kv.saturating_sub(1),
        }
    }

    /// Whether layer `il` writes K and V to a cache of its own.
    pub fn has_kv(&self, il: usize) -> bool {
        !self.is_recurrent(il) && self.kv_source(il) == il
    }

    /// Whether the layers route tokens to experts (`n_expert > 0`) rather
    /// than through one dense FFN.
    pub fn is_moe(&self) -> bool {
        self.n_expert > 0
    }

    /// Whether layer `il` attends over the sliding window only.
    pub fn is_swa(&self, il: usize) -> bool {
        self.n_swa > 0 && self.swa_layers.get(il).copied().unwrap_or(false)
    }

    /// Whether layer `il` is a recurrent layer (no attention, state per
    /// sequence).
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.recurrent_layers.get(il).copied().unwrap_or(false)
    }

    /// Whether any layer keeps recurrent state.
    pub fn has_recurrent(&self) -> bool {
        self.recurrent_layers.iter().any(|&r| r)
    }

    /// Values of a recurrent layer's first state per sequence (the
    /// convolution's last inputs; llama.cpp's `n_embd_r`).
    pub fn n_embd_r(&self) -> usize {
        match self.arch.recurrent {
            Some(RecurrentBlock::ShortConv) => {
                self.n_embd * self.shortconv_l_cache.saturating_sub(1)
            }
            Some(RecurrentBlock::Mamba2 | RecurrentBlock::GatedDeltaNet) => {
                self.ssm_d_conv.saturating_sub(1) * self.ssm_conv_channels()
            }
            None => 0,
        }
    }

    /// Channels of Mamba-2's convolution: x, then B and C of every group.
    pub fn ssm_conv_channels(&self) -> usize {
        self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state
    }

    /// Values of a recurrent layer's second state per sequence (the scan's
    /// state; llama.cpp's `n_embd_s`; 0 for a short convolution).
    pub fn n_embd_s(&self) -> usize {
        match self.arch.recurrent {
            Some(RecurrentBlock::Mamba2) => self.ssm_d_state * self.ssm_d_inner,
            // a head's state is (d_inner / heads)^2, and the head size is
            // the state size
            Some(RecurrentBlock::GatedDeltaNet) => self.ssm_d_state * self.ssm_d_inner,
            _ => 0,
        }
    }

    /// Whether any layer attends over a sliding window.
    pub fn has_swa(&self) -> bool {
        (0..self.n_layer).any(|il| self.is_swa(il))
    }

    /// The rope of layer `il`'s Q and K (and of the cache's K shift).
    pub fn rope(&self, il: usize) -> RopeParams {
        let (base, scale) = if self.is_swa(il) {
            (self.rope_freq_base_swa, self.rope_freq_scale_swa)
        } else {
            (self.rope_freq_base, self.rope_freq_scale)
        };
        let mut rope = RopeParams::new(self.heads(il).n_rot, self.arch.rope)
            .freq_base(base)
            .freq_scale(scale);
        rope.attn_factor = self.rope_attn_factor;
        if self.rope_ext_factor != 0.0 {
            rope.ext_factor = self.rope_ext_factor;
            rope.n_ctx_orig = self.n_ctx_orig;
            rope.attn_factor = self.yarn_attn_factor() * self.rope_attn_factor;
        }
        rope
    }

    /// The rope's magnitude factor under YaRN, as llama.cpp's context sets
    /// it (`yarn_attn_factor`, f32): YaRN's mscale for the model's scale
    /// factor, divided back out because ggml's rope multiplies it in
    /// again, so about 1.
    fn yarn_attn_factor(&self) -> f32 {
        let factor = 1.0 / self.rope_freq_scale;
        let mscale = if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        };
        mscale * (1.0 / (1.0 + 0.1 * factor.ln()))
    }

    /// Checks that the numbers fit together.
    pub fn validate(&self) -> Result<()> {
        let arch = self.arch.name;
        let bad = |m: String| Err(Error::InvalidArgument(format!("{arch} config: {m}")));
        if self.n_head == 0 || self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
            return bad(format!(
                "n_head {} must be a positive multiple of n_head_kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        // an encoder's attention output is as wide as its input
        if self.arch.encoder && self.n_head * self.head_dim != self.n_embd {
            return bad(format!(
                "n_head {} x head_dim {} must be n_embd {}",
                self.n_head, self.head_dim, self.n_embd
            ));
        }
        if self.use_rope && (self.n_rot > self.head_dim || self.n_rot % 2 != 0) {
            return bad(format!(
                "n_rot {} must be even and at most head_dim {}",
                self.n_rot, self.head_dim
            ));
        }
        if let Some(h) = self.swa_heads
            && (h.head_dim == 0
                || h.n_head_kv == 0
                || self.n_head % h.n_head_kv != 0
                || h.n_rot > h.head_dim
                || h.n_rot % 2 != 0)
        {
            return bad(format!(
                "the sliding-window layers' head_dim {}, n_head_kv {} (dividing n_head {}) and \
                 n_rot {} (even, at most head_dim) do not fit",
                h.head_dim, h.n_head_kv, self.n_head, h.n_rot
            ));
        }
        if !self.n_ff_layers.is_empty() && self.n_ff_layers.len() != self.n_layer {
            return bad(format!(
                "{} FFN widths for {} layers",
                self.n_ff_layers.len(),
                self.n_layer
            ));
        }
        if self.n_kv_shared > 0 {
            let n_kv = self.n_layer.saturating_sub(self.n_kv_shared);
            // llama.cpp's mapping: the last layer with a cache is a full
            // one and the one before it slides
            if n_kv < 2 || self.is_swa(n_kv - 1) || (self.has_swa() && !self.is_swa(n_kv - 2)) {
                return bad(format!(
                    "{} layers share an earlier layer's cache: the layers before them must \
                     end with a sliding-window layer, then a full one",
                    self.n_kv_shared
                ));
            }
        }
        if self.n_embd == 0 || self.n_vocab == 0 || self.head_dim == 0 {
            return bad("n_embd, n_vocab and head_dim must be positive".into());
        }
        if self.is_moe() && (self.n_expert_used == 0 || self.n_expert_used > self.n_expert) {
            return bad(format!(
                "n_expert_used {} must be in 1..={}",
                self.n_expert_used, self.n_expert
            ));
        }
        if self.is_moe() && self.n_ff_expert == 0 {
            return bad("n_ff_expert must be positive".into());
        }
        if self.recurrent_layers.len() != self.n_layer {
            return bad(format!(
                "{} recurrent-layer flags for {} layers",
                self.recurrent_layers.len(),
                self.n_layer
            ));
        }
        if self.has_recurrent() {
            match self.arch.recurrent {
                None => return bad("the architecture has no recurrent layers".into()),
                Some(RecurrentBlock::ShortConv) if self.shortconv_l_cache < 2 => {
                    return bad(format!(
                        "shortconv.l_cache {} must be at least 2",
                        self.shortconv_l_cache
                    ));
                }
                Some(RecurrentBlock::GatedDeltaNet) => {
                    let (inner, heads, groups, s) = (
                        self.ssm_d_inner,
                        self.ssm_n_head,
                        self.ssm_n_group,
                        self.ssm_d_state,
                    );
                    if self.ssm_d_conv < 2
                        || s == 0
                        || heads == 0
                        || groups == 0
                        || heads % groups != 0
                        || inner != heads * s
                    {
                        return bad(format!(
                            "ssm: conv_kernel {} (at least 2), time_step_rank {heads} value heads \
                             of state_size {s} (inner_size {inner} = heads x state), group_count \
                             {groups} key heads dividing them",
                            self.ssm_d_conv
                        ));
                    }
                }
                Some(RecurrentBlock::Mamba2) => {
                    let (inner, heads, groups) =
                        (self.ssm_d_inner, self.ssm_n_head, self.ssm_n_group);
                    if self.ssm_d_conv < 2
                        || self.ssm_d_state == 0
                        || heads == 0
                        || groups == 0
                        || inner % heads != 0
                        || inner % groups != 0
                        || heads % groups != 0
                    {
                        return bad(format!(
                            "ssm: conv_kernel {} (at least 2), state_size {}, inner_size {inner} \
                             must divide into time_step_rank {heads} heads and group_count \
                             {groups} groups (dividing the heads), all positive",
                            self.ssm_d_conv, self.ssm_d_state
                        ));
                    }
                }
                Some(_) => {}
            }
        }
        if self.swa_layers.len() != self.n_layer {
            return bad(format!(
                "{} sliding-window flags for {} layers",
                self.swa_layers.len(),
                self.n_layer
            ));
        }
        for (what, x) in [
            ("attn_softcap", self.attn_softcap),
            ("final_softcap", self.final_softcap),
        ] {
            if !(x.is_finite() && x >= 0.0) {
                return bad(format!("{what} {x} must be finite and not negative"));
            }
        }
        if !(0.0..=1.0).contains(&self.rope_ext_factor) {
            return bad(format!(
                "YaRN's extrapolation mix {} must be in 0..=1",
                self.rope_ext_factor
            ));
        }
        if !(self.rope_attn_factor.is_finite() && self.rope_attn_factor > 0.0) {
            return bad(format!(
                "rope attention factor {} must be positive",
                self.rope_attn_factor
            ));
        }
        if !(self.attention_scale.is_finite() && self.attention_scale > 0.0) {
            return bad(format!(
                "attention scale {} must be positive",
                self.attention_scale
            ));
        }
        Ok(())
    }

    /// Every weight a model of this configuration may have, in GGUF
    /// order: name, ggml shape and whether it must be there.
    pub fn weights(&self) -> Vec<WeightDecl> {
        use Presence::*;
        if self.arch.encoder {
            return self.encoder_weights();
        }
        let a = self.arch;
        let e = self.n_embd;
        let mut w = Vec::new();
        let mut add = |name: String, shape: Vec<usize>, presence: Presence| {
            w.push(WeightDecl {
                name,
                shape,
                presence,
            })
        };
        let bias = if a.qkv_bias { Usual } else { Optional };
        add("token_embd.weight".into(), vec![e, self.n_vocab], Required);
        // the full layers' proportional rope (Gemma 4) needs its factors
        let full_layers = (0..self.n_layer).any(|il| !self.is_swa(il));
        let freqs = match a.freq_factors_full_only && full_layers {
            true => Required,
            false => Optional,
        };
        add("rope_freqs.weight".into(), vec![self.n_rot / 2], freqs);
        // LongRoPE (phi-3.5): per-pair factors inside and past n_ctx_orig
        add(
            "rope_factors_long.weight".into(),
            vec![self.n_rot / 2],
            Optional,
        );
        add(
            "rope_factors_short.weight".into(),
            vec![self.n_rot / 2],
            Optional,
        );
        let (per_layer, n_layer) = (self.n_embd_per_layer, self.n_layer);
        if per_layer > 0 {
            add(
                "per_layer_token_embd.weight".into(),
                vec![per_layer * n_layer, self.n_vocab],
                Required,
            );
            add(
                "per_layer_model_proj.weight".into(),
                vec![e, per_layer * n_layer],
                Required,
            );
            add(
                "per_layer_proj_norm.weight".into(),
                vec![per_layer],
                Required,
            );
        }
        for i in 0..self.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}");
            let hd = self.heads(i).head_dim;
            let (q, kv) = (self.n_head * hd, self.n_embd_kv_of(i));
            // a layer that reads another's cache may still hold K and V
            let own_kv = if self.has_kv(i) { Required } else { Optional };
            let v_presence = if a.value_norm { Optional } else { own_kv };
            add(p("attn_norm.weight"), vec![e], Required);
            if let (true, Some(block)) = (self.is_recurrent(i), a.recurrent) {
                match block {
                    RecurrentBlock::ShortConv => {
                        add(
                            p("shortconv.conv.weight"),
                            vec![self.shortconv_l_cache, e],
                            Required,
                        );
                        add(p("shortconv.in_proj.weight"), vec![e, 3 * e], Required);
                        add(p("shortconv.out_proj.weight"), vec![e, e], Required);
                    }
                    RecurrentBlock::GatedDeltaNet => {
                        let (inner, heads) = (self.ssm_d_inner, self.ssm_n_head);
                        let channels = self.ssm_conv_channels();
                        add(p("attn_qkv.weight"), vec![e, channels], Required);
                        add(p("attn_gate.weight"), vec![e, inner], Required);
                        add(
                            p("ssm_conv1d.weight"),
                            vec![self.ssm_d_conv, channels],
                            Required,
                        );
                        add(p("ssm_dt.bias"), vec![heads], Required);
                        add(p("ssm_a"), vec![heads], Required);
                        add(p("ssm_beta.weight"), vec![e, heads], Required);
                        add(p("ssm_alpha.weight"), vec![e, heads], Required);
                        add(p("ssm_norm.weight"), vec![self.ssm_d_state], Required);
                        add(p("ssm_out.weight"), vec![inner, e], Required);
                    }
                    RecurrentBlock::Mamba2 => {
                        let (inner, heads, groups) =
                            (self.ssm_d_inner, self.ssm_n_head, self.ssm_n_group);
                        let channels = self.ssm_conv_channels();
                        let d_in_proj = inner + channels + heads;
                        add(p("ssm_in.weight"), vec![e, d_in_proj], Required);
                        add(
                            p("ssm_conv1d.weight"),
                            vec![self.ssm_d_conv, channels],
                            Required,
                        );
                        add(p("ssm_conv1d.bias"), vec![channels], Usual);
                        add(p("ssm_dt.bias"), vec![heads], Required);
                        add(p("ssm_a"), vec![1, heads], Required);
                        add(p("ssm_d"), vec![1, heads], Required);
                        add(p("ssm_norm.weight"), vec![inner / groups, groups], Required);
                        add(p("ssm_out.weight"), vec![inner, e], Required);
                    }
                }
            } else if self.fused_qkv {
                add(p("attn_qkv.weight"), vec![e, q + 2 * kv], Required);
                add(p("attn_qkv.bias"), vec![q + 2 * kv], bias);
            } else {
                let q_rows = if a.gated_attention { 2 * q } else { q };
                add(p("attn_q.weight"), vec![e, q_rows], Required);
                add(p("attn_k.weight"), vec![e, kv], own_kv);
                add(p("attn_v.weight"), vec![e, kv], v_presence);
                add(p("attn_q.bias"), vec![q], bias);
                add(p("attn_k.bias"), vec![kv], bias);
                add(p("attn_v.bias"), vec![kv], bias);
            }
            if a.qk_norm && !self.is_recurrent(i) {
                add(p("attn_q_norm.weight"), vec![hd], Required);
                add(p("attn_k_norm.weight"), vec![hd], own_kv);
            }
            if !self.is_recurrent(i) {
                add(p("attn_output.weight"), vec![q, e], Required);
                let out_bias = if a.output_bias { Required } else { Optional };
                add(p("attn_output.bias"), vec![e], out_bias);
                if a.attention_sinks {
                    add(p("attn_sinks.weight"), vec![self.n_head], Required);
                }
            }
            if a.post_norms {
                add(p("post_attention_norm.weight"), vec![e], Required);
            }
            add(p(&format!("{}.weight", a.ffn_norm)), vec![e], Required);
            let dense = !self.is_moe() || a.experts_beside_dense;
            if self.is_moe() {
                let (f, x) = (self.n_ff_expert, self.n_expert);
                add(p("ffn_gate_inp.weight"), vec![e, x], Required);
                let mut apart = Required;
                if a.experts_beside_dense {
                    add(p("ffn_gate_inp.scale"), vec![e], Required);
                    for norm in ["pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"] {
                        add(p(&format!("{norm}.weight")), vec![e], Required);
                    }
                    // gate and up in one matrix, the gate's rows first (or apart)
                    add(p("ffn_gate_up_exps.weight"), vec![e, 2 * f, x], Usual);
                    add(p("ffn_down_exps.scale"), vec![x], Optional);
                    apart = Optional;
                }
                add(p("ffn_gate_exps.weight"), vec![e, f, x], apart);
                add(p("ffn_up_exps.weight"), vec![e, f, x], apart);
                add(p("ffn_down_exps.weight"), vec![f, e, x], Required);
                if a.moe_biases {
                    add(p("ffn_gate_inp.bias"), vec![x], Required);
                    add(p("ffn_gate_exps.bias"), vec![f, x], Required);
                    add(p("ffn_up_exps.bias"), vec![f, x], Required);
                    add(p("ffn_down_exps.bias"), vec![e, x], Required);
                }
                if self.n_ff_shexp > 0 {
                    let f = self.n_ff_shexp;
                    add(p("ffn_gate_shexp.weight"), vec![e, f], Required);
                    add(p("ffn_up_shexp.weight"), vec![e, f], Required);
                    add(p("ffn_down_shexp.weight"), vec![f, e], Required);
                    if self.shexp_gate {
                        add(p("ffn_gate_inp_shexp.weight"), vec![e], Required);
                    }
                }
            }
            if dense {
                let f = self.n_ff_of(i);
                match self.ffn {
                    FfnKind::Split(_) => {
                        add(p("ffn_gate.weight"), vec![e, f], Required);
                        add(p("ffn_up.weight"), vec![e, f], Required);
                    }
                    FfnKind::Fused(_) => add(p("ffn_up.weight"), vec![e, 2 * f], Required),
                    FfnKind::Ungated => add(p("ffn_up.weight"), vec![e, f], Required),
                }
                add(p("ffn_down.weight"), vec![f, e], Required);
            }
            if a.post_norms {
                add(p("post_ffw_norm.weight"), vec![e], Required);
            }
            if per_layer > 0 {
                add(p("inp_gate.weight"), vec![e, per_layer], Required);
                add(p("proj.weight"), vec![per_layer, e], Required);
                add(p("post_norm.weight"), vec![e], Required);
            }
            if a.layer_output_scale {
                add(p("layer_output_scale.weight"), vec![1], Optional);
            }
        }
        add(format!("{}.weight", a.output_norm), vec![e], Required);
        if !a.tied_output {
            // an embedding model's file may keep its output matrix unused
            let output = if a.embeddings_only { Optional } else { Usual };
            add("output.weight".into(), vec![e, self.n_vocab], output);
            add("output.bias".into(), vec![self.n_vocab], Optional);
        }
        w.extend(self.classifier_weights());
        w
    }

    /// Whether an encoder adds learned position embeddings (neither a
    /// rope nor ALiBi places its tokens).
    pub fn learned_positions(&self) -> bool {
        !self.use_rope && self.max_alibi_bias == 0.0
    }

    /// The weights of an encoder (`arch/encoder.rs`): embeddings of
    /// tokens, token types and (without rope) positions with their
    /// LayerNorm, then per layer Q, K, V (or one matrix of the three) and
    /// the output, the FFN (gated or not), and the LayerNorms after
    /// attention and after the FFN.
    fn encoder_weights(&self) -> Vec<WeightDecl> {
        use Presence::*;
        let e = self.n_embd;
        let mut w = Vec::new();
        let mut add = |name: String, shape: Vec<usize>, presence: Presence| {
            w.push(WeightDecl {
                name,
                shape,
                presence,
            })
        };
        add("token_embd.weight".into(), vec![e, self.n_vocab], Required);
        let types = self.n_token_types;
        add("token_types.weight".into(), vec![e, types], Usual);
        // learned positions, unless the layers rotate them or ALiBi
        // biases their scores
        if self.learned_positions() {
            let n_pos = self.n_ctx_train;
            add("position_embd.weight".into(), vec![e, n_pos], Required);
        }
        add("token_embd_norm.weight".into(), vec![e], Required);
        add("token_embd_norm.bias".into(), vec![e], Required);
        // biases where BERT's have them; the others' files may hold some
        let bias = match self.ffn {
            FfnKind::Ungated => Usual,
            _ => Optional,
        };
        for i in 0..self.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}");
            let (q, kv) = (self.n_head * self.head_dim, self.n_embd_kv());
            if self.fused_qkv {
                add(p("attn_qkv.weight"), vec![e, q + 2 * kv], Required);
                add(p("attn_qkv.bias"), vec![q + 2 * kv], Optional);
            } else {
                for (name, rows) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
                    add(p(&format!("{name}.weight")), vec![e, rows], Required);
                    add(p(&format!("{name}.bias")), vec![rows], bias);
                }
            }
            add(p("attn_output.weight"), vec![q, e], Required);
            add(p("attn_output.bias"), vec![e], bias);
            add(p("attn_output_norm.weight"), vec![e], Required);
            add(p("attn_output_norm.bias"), vec![e], Required);
            // jina-bert-v2's norms of Q and K, and a second norm after
            // attention
            for norm in ["attn_q_norm", "attn_k_norm", "attn_norm_2"] {
                add(p(&format!("{norm}.weight")), vec![e], Optional);
                add(p(&format!("{norm}.bias")), vec![e], Optional);
            }
            let f = self.n_ff_of(i);
            let up = match self.ffn {
                FfnKind::Fused(_) => 2 * f,
                _ => f,
            };
            add(p("ffn_up.weight"), vec![e, up], Required);
            add(p("ffn_up.bias"), vec![up], bias);
            if matches!(self.ffn, FfnKind::Split(_)) {
                add(p("ffn_gate.weight"), vec![e, f], Required);
            }
            add(p("ffn_down.weight"), vec![f, e], Required);
            add(p("ffn_down.bias"), vec![e], bias);
            add(p("layer_output_norm.weight"), vec![e], Required);
            add(p("layer_output_norm.bias"), vec![e], Required);
        }
        w.extend(self.classifier_weights());
        w
    }

    /// A reranker's classifier head (rank pooling, `arch/pooling.rs`):
    /// `cls` with its bias and norm, then `cls.output`, each where the
    /// file has it; and sentence-transformers' dense projections after
    /// pooling (`dense_2`, `dense_3`), where the model has them.
    fn classifier_weights(&self) -> Vec<WeightDecl> {
        let (e, n_out, d) = (self.n_embd, self.n_cls_out, self.n_dense);
        let mut heads = vec![
            ("cls.weight", vec![e, e], Presence::Optional),
            ("cls.bias", vec![e], Presence::Optional),
            ("cls.norm.weight", vec![e], Presence::Optional),
            ("cls.output.weight", vec![e, n_out], Presence::Optional),
            ("cls.output.bias", vec![n_out], Presence::Optional),
        ];
        if d > 0 {
            heads.push(("dense_2.weight", vec![e, d], Presence::Required));
            heads.push(("dense_3.weight", vec![d, e], Presence::Required));
        }
        heads
            .into_iter()
            .map(|(name, shape, presence)| WeightDecl {
                name: name.into(),
                shape,
                presence,
            })
            .collect()
    }

    /// The weights a model of this configuration carries (required and
    /// usual), as a random model has them: GGUF name and ggml shape.
    pub fn weight_shapes(&self) -> Vec<(String, Vec<usize>)> {
        self.weights()
            .into_iter()
            .filter(|w| w.presence != Presence::Optional)
            .map(|w| (w.name, w.shape))
            .collect()
    }

    /// Whether weight `name` stays F32 in every file: the MoE router,
    /// biases (the experts' are tables of rows, one per expert), the
    /// small convolution kernels, and an encoder's position and
    /// token-type embeddings, which llama.cpp's converter writes and its
    /// quantizer leaves in F32 (its `ssm_conv` takes F32 only).
    pub fn stays_f32(name: &str) -> bool {
        name.ends_with("ffn_gate_inp.weight")
            || name == "position_embd.weight"
            || name == "token_types.weight"
            || Self::is_table(name)
    }

    /// Whether weight `name` is a table of rows picked or added whole,
    /// not a matrix a product reads: a recurrent block's parameters
    /// ([`ModelConfig::is_block_parameter`]) or a bias (the experts' are
    /// one row per expert). Its rows are never split across devices.
    pub fn is_table(name: &str) -> bool {
        name.ends_with(".bias") || name.ends_with(".scale") || Self::is_block_parameter(name)
    }

    /// The range a random model draws weight `name` of `shape` from:
    /// vectors (norms, biases) and norm tables near 1, matrices within
    /// 1.5 / sqrt(rows' length), token embeddings within 1, and Mamba's A
    /// negative (it is -exp(A_log): a positive one makes the scan grow
    /// without bound).
    pub fn random_range(name: &str, shape: &[usize]) -> (f32, f32) {
        if name.ends_with(".ssm_a") {
            (-1.5, -0.5)
        } else if shape.len() == 1 || name.ends_with("ssm_norm.weight") {
            (0.8, 1.2)
        } else if name.starts_with("token_embd") {
            (-1.0, 1.0)
        } else {
            let a = 1.5 / (shape[0].max(1) as f32).sqrt();
            (-a, a)
        }
    }

    /// Whether weight `name` is a recurrent block's table of per-channel
    /// or per-head parameters (a convolution's kernel, Mamba's A, D and
    /// group norm), not a matrix a product reads: its rows are never
    /// split, and it stays F32 (the ops take F32 only).
    pub fn is_block_parameter(name: &str) -> bool {
        [
            "shortconv.conv.weight",
            "ssm_conv1d.weight",
            ".ssm_a",
            ".ssm_d",
            "ssm_norm.weight",
        ]
        .iter()
        .any(|s| name.ends_with(s))
    }

    /// Whether tensor `name` belongs to a layer past the model's
    /// ([`ModelConfig::n_layer_extra`]), which nothing reads.
    pub fn is_extra_layer_tensor(&self, name: &str) -> bool {
        Self::layer_of(name)
            .is_some_and(|il| il >= self.n_layer && il < self.n_layer + self.n_layer_extra)
    }

    /// The layer a weight belongs to (None for embedding and output).
    pub fn layer_of(name: &str) -> Option<usize> {
        name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
    }
}
