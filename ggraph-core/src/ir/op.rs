//! Ops and their parameters, with ggml's semantics.
//!
//! Sources are listed per op in the order the builder takes them. Shapes use
//! ggml's convention: ne[0] is the innermost (row) dimension.

use std::fmt;

/// Elementwise binary ops; src1 is broadcast to src0 by repetition
/// (every `ne1[i]` divides `ne0[i]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b` (ggml's `add`).
    Add,
    /// `a - b` (ggml's `sub`).
    Sub,
    /// `a * b`, elementwise (ggml's `mul`; the matrix product is [`Op::MulMat`]).
    Mul,
    /// `a / b` (ggml's `div`).
    Div,
}

/// Elementwise unary ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `x * sigmoid(x)`, also called swish.
    Silu,
    /// The tanh approximation, as ggml's `gelu`.
    Gelu,
    /// `max(x, 0)`.
    Relu,
    /// `-x`.
    Neg,
    /// `e^x`.
    Exp,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// `x * x`.
    Sqr,
    /// Square root; NaN for negative `x`.
    Sqrt,
    /// `ln(1 + e^x)`, and `x` itself above 20 (as ggml's `softplus`).
    Softplus,
}

impl UnaryOp {
    /// Every unary op, in declaration order (for tests and capability tables).
    pub const ALL: [UnaryOp; 10] = [
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::Relu,
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Sqr,
        UnaryOp::Sqrt,
        UnaryOp::Softplus,
    ];

    /// The op on one value, in f64: the definition every backend matches.
    pub fn eval(self, x: f64) -> f64 {
        match self {
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Gelu => {
                const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
                0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh())
            }
            UnaryOp::Relu => x.max(0.0),
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sqr => x * x,
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Softplus if x > 20.0 => x,
            UnaryOp::Softplus => x.exp().ln_1p(),
        }
    }
}

/// Gated linear units: act(a) * b.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GluOp {
    /// silu(a) * b
    Swiglu,
    /// gelu(a) * b
    Geglu,
    /// gpt-oss's clamped SwiGLU (ggml's `swiglu_oai`): with `x = min(a,
    /// limit)`, `x * sigmoid(alpha * x) * (clamp(b, -limit, limit) + 1)`.
    SwigluOai {
        /// The sigmoid's slope (gpt-oss: 1.702).
        alpha: f32,
        /// Where the gate and the value are clamped (gpt-oss: 7).
        limit: f32,
    },
}

impl GluOp {
    /// gpt-oss's [`GluOp::SwigluOai`], with the constants llama.cpp
    /// builds it with.
    pub const SWIGLU_OAI: GluOp = GluOp::SwigluOai {
        alpha: 1.702,
        limit: 7.0,
    };

    /// The unit of gate `a` and value `b`, in f64 (the reference's
    /// precision).
    pub fn eval(self, a: f64, b: f64) -> f64 {
        match self {
            GluOp::Swiglu => UnaryOp::Silu.eval(a) * b,
            GluOp::Geglu => UnaryOp::Gelu.eval(a) * b,
            GluOp::SwigluOai { alpha, limit } => {
                let (alpha, limit) = (alpha as f64, limit as f64);
                // std::min and std::clamp: a NaN stays
                let x = if limit < a { limit } else { a };
                let y = if b < -limit {
                    -limit
                } else if limit < b {
                    limit
                } else {
                    b
                };
                x / (1.0 + (alpha * -x).exp()) * (y + 1.0)
            }
        }
    }
}

/// Rotary embedding layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Rotates adjacent pairs (`x[2i]`, `x[2i+1]`) (ggml mode 0, llama).
    Normal,
    /// Rotates (`x[i]`, `x[i + n_dims/2]`) (ggml mode 2, GPT-NeoX, qwen).
    Neox,
}

impl RopeMode {
    /// ggml's mode number.
    pub fn ggml_mode(self) -> i32 {
        match self {
            RopeMode::Normal => 0,
            RopeMode::Neox => 2,
        }
    }
}

/// Parameters of `rope`, as ggml's `ggml_rope_ext`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Leading dimensions rotated; the rest are copied.
    pub n_dims: usize,
    /// Which elements form the rotated pairs.
    pub mode: RopeMode,
    /// Training context length, for YaRN's correction dims.
    pub n_ctx_orig: usize,
    /// Base of the rotation frequencies: pair `i` turns by
    /// `pos * freq_base^(-2i / n_dims)` (10000 in the original RoPE).
    pub freq_base: f32,
    /// Factor on every angle: 1 / the context extension factor for linear
    /// scaling (position interpolation), 1 for none.
    pub freq_scale: f32,
    /// YaRN extrapolation mix; 0 disables YaRN.
    pub ext_factor: f32,
    /// Magnitude scale of cos and sin.
    pub attn_factor: f32,
    /// YaRN: number of rotations over the training context above which a
    /// pair is fully extrapolated (ggml's default 32).
    pub beta_fast: f32,
    /// YaRN: number of rotations below which a pair is fully interpolated
    /// (ggml's default 1).
    pub beta_slow: f32,
}

impl RopeParams {
    /// Plain rope: base 10000, no scaling.
    pub fn new(n_dims: usize, mode: RopeMode) -> RopeParams {
        RopeParams {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    /// With [`RopeParams::freq_base`] set to `base`.
    pub fn freq_base(mut self, base: f32) -> Self {
        self.freq_base = base;
        self
    }

    /// With [`RopeParams::freq_scale`] set to `scale`.
    pub fn freq_scale(mut self, scale: f32) -> Self {
        self.freq_scale = scale;
        self
    }

    /// YaRN correction range [low, high] in rotated-pair indices, as ggml's
    /// `ggml_rope_yarn_corr_dims`.
    pub fn yarn_corr_dims(&self) -> [f32; 2] {
        let n_dims = self.n_dims as f32;
        let corr_dim = |n_rot: f32| {
            n_dims * (self.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let start = corr_dim(self.beta_fast).floor();
        let end = corr_dim(self.beta_slow).ceil();
        [start.max(0.0), end.min(n_dims - 1.0)]
    }

    /// cos and sin of the rotation for pair `i0/2` at position `pos`,
    /// with an optional per-pair frequency divisor: the definition every
    /// backend follows (ggml's `rope_yarn`).
    pub fn rotation(&self, pos: f64, i0: usize, freq_factor: f64) -> (f64, f64) {
        let theta_scale = (self.freq_base as f64).powf(-2.0 / self.n_dims as f64);
        let theta_extrap = pos * theta_scale.powi((i0 / 2) as i32) / freq_factor;
        let theta_interp = self.freq_scale as f64 * theta_extrap;
        let mut theta = theta_interp;
        let mut mscale = self.attn_factor as f64;
        if self.ext_factor != 0.0 {
            let [low, high] = self.yarn_corr_dims();
            let y = ((i0 / 2) as f64 - low as f64) / (high as f64 - low as f64).max(0.001);
            let ramp_mix = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor as f64;
            theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale as f64).ln();
        }
        (theta.cos() * mscale, theta.sin() * mscale)
    }
}

/// Sort direction of `argsort`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortOrder {
    /// Smallest value first.
    Ascending,
    /// Largest value first.
    Descending,
}

/// What a tensor is computed by, with the op's parameters inline.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// No computation: an input, a weight or another tensor filled by the user.
    Leaf,

    // Views: no computation, they reinterpret their source's memory.
    /// `view(a, ne, nb, offset)`.
    View,
    /// `reshape(a, ne)`: a contiguous tensor seen with another shape.
    Reshape,
    /// `permute(a, axes)`: source dim `i` becomes dim `axes[i]`.
    Permute([usize; 4]),
    /// `transpose(a)`: dims 0 and 1 swapped.
    Transpose,

    /// `get_rows(a, idx)`: rows of a picked by I32 indices.
    /// a [n, rows, b1, b2], idx [m, b1, b2] → [n, m, b1, b2] in F32 (I32 for
    /// an I32 source).
    GetRows,
    /// `a (op) b` with b broadcast over a.
    Binary(BinaryOp),
    /// `a * scale + bias`.
    Scale {
        /// Factor every element is multiplied by.
        scale: f32,
        /// Added after scaling (0 for a plain `scale`).
        bias: f32,
    },
    /// `op(a)`, elementwise; same shape and type as `a`.
    Unary(UnaryOp),
    /// One source: act(first half of each row) * second half (the halves
    /// exchanged when `swapped`). Two sources: act(a) * b.
    Glu {
        /// The activation applied to the gated half.
        op: GluOp,
        /// One-source form only: the activation takes the second half of
        /// each row and the first half is the gate.
        swapped: bool,
    },
    /// `mul_mat(a, b)`: a [k, m, a2, a3] · b [k, n, b2, b3] → [m, n, b2, b3],
    /// a broadcast over dims 2 and 3. Result F32.
    MulMat,
    /// `mul_mat_id(as, b, ids)`: as [k, m, n_expert], b [k, n_b, n_tokens],
    /// ids I32 [n_used, n_tokens] → [m, n_used, n_tokens]; row e of token t
    /// multiplies expert ids[e, t] with b column e % n_b of token t.
    MulMatId,
    /// x / sqrt(mean(x²) + eps) along rows.
    RmsNorm {
        /// Added to the mean square to keep the division finite.
        eps: f32,
    },
    /// (x - mean) / sqrt(var + eps) along rows.
    Norm {
        /// Added to the variance to keep the division finite.
        eps: f32,
    },
    /// `rope(a, pos[, freq_factors])`: a [head_dim, n_head, n_tokens, 1],
    /// pos I32 `[n_tokens]`, freq_factors F32 `[n_dims/2]`.
    Rope(RopeParams),
    /// softmax(a * scale + mask * slope) along rows; mask optional
    /// [ne0, >= ne1, m2, m3] broadcast over dims 2 and 3; slope is the ALiBi
    /// slope of the head (1 when max_bias is 0).
    SoftMax {
        /// Factor on `a` before the mask is added.
        scale: f32,
        /// ALiBi maximum bias; 0 gives every head slope 1 (see
        /// [`alibi_slope`](crate::ir::alibi_slope)).
        max_bias: f32,
        /// Whether the last source is the attention sinks (gpt-oss): F32
        /// `[ne2]`, one logit per head (row `i2`) that joins each row's
        /// maximum and sum of exponentials but takes no probability.
        sinks: bool,
    },
    /// `cpy(a, b)`: a's values written into b (converting type); the result
    /// is a view of b.
    Cpy,
    /// A contiguous copy of a, converting to the result's type (covers
    /// ggml's cont, dup and cast).
    Cont,
    /// `set_rows(dst, src, idx)`: row `r` of src written to row `idx[r]` of dst
    /// (converting type); the result is a view of dst. dst [n, rows, d2, d3],
    /// src [n, m, s2, s3], idx I32 [m, i1, i2], s2 % i1 == 0, s3 % i2 == 0.
    SetRows,
    /// `concat(a, b, dim)`.
    Concat {
        /// The dimension (0 to 3) along which `b` follows `a`.
        dim: usize,
    },
    /// Sum of each row: [n, a, b, c] → [1, a, b, c].
    SumRows,
    /// Indices that sort each row, I32.
    ArgSort {
        /// Whether the first index points at the smallest or the largest value.
        order: SortOrder,
    },
    /// Indices of the k largest values of each row, largest first, I32.
    TopK {
        /// Indices kept per row; the result's `ne[0]`.
        k: usize,
    },
    /// Fused attention (ggml's `flash_attn_ext`): q [d, n_q, n_head, n_seq],
    /// k [d, n_kv, n_head_kv, n_seq], v [dv, n_kv, n_head_kv, n_seq],
    /// optional mask [n_kv, >= n_q, m2, m3] → [dv, n_head, n_q, n_seq].
    /// softmax(q·kᵀ * scale (softcapped) + mask * slope) · v, computed
    /// without materialising the score matrix.
    FlashAttnExt {
        /// Factor on q·kᵀ, usually `1 / sqrt(d)`.
        scale: f32,
        /// ALiBi maximum bias; 0 gives every head slope 1.
        max_bias: f32,
        /// When not 0, scores become `softcap * tanh(score / softcap)`
        /// before the mask is added (Gemma 2); 0 disables capping.
        softcap: f32,
        /// Whether the last source is the attention sinks (gpt-oss): F32
        /// `[n_head]`, one logit per head that joins the softmax's
        /// maximum and sum but adds no value.
        sinks: bool,
    },
    /// `add_id(a, b, ids)`, a bias per selected expert (ggml's): a F32
    /// [n, n_used, n_tokens], b F32 [n, n_expert], ids I32 [n_used,
    /// n_tokens] → `a[:, e, t] + b[:, ids[e, t]]`.
    AddId,
    /// `ssm_conv(sx, c)`, a short causal convolution per channel (ggml's,
    /// for Mamba's and LFM2's convolution layers): sx F32
    /// [d_conv - 1 + n_t, d_inner, n_s] (each channel's row the previous
    /// state, then its tokens), c F32 [d_conv, d_inner] →
    /// F32 [d_inner, n_t, n_s], where
    /// `out[i, t, s] = sum over k < d_conv of sx[t + k, i, s] * c[k, i]`.
    SsmConv,
    /// `ssm_scan(s, x, dt, A, B, C, ids)`, the selective scan of Mamba's
    /// layers (ggml's, with one state snapshot): s F32 [d_state, head_dim,
    /// n_head, n_rs] (the states, sequence `ids[j]` read for batch sequence
    /// `j`), x F32 [head_dim, n_head, n_t, n_s], dt F32 [n_head, n_t, n_s],
    /// A F32 [1, n_head] (Mamba-2: one decay per head) or
    /// [d_state, n_head] (Mamba-1), B and C F32 [d_state, n_group, n_t, n_s]
    /// (`n_head` a multiple of `n_group`; head `h` reads group
    /// `h / (n_head / n_group)`), ids I32 `[n_s]`. Per token, with
    /// `d = softplus(dt)`: `state = state * exp(d * A) + B * x * d` and
    /// `y = sum over d_state of state * C`. The result is F32, one
    /// dimension: y [head_dim, n_head, n_t, n_s] laid out first, then the
    /// final states [d_state, head_dim, n_head, n_s].
    SsmScan,
    /// `gated_delta_net(q, k, v, g, beta, state)`, the recurrence of Gated
    /// DeltaNet layers (ggml's, with one state snapshot): q, k F32
    /// [S, H_k, n_t, n_s_k], v F32 [S, H, n_t, n_s] (`H` a multiple of
    /// `H_k`, head `h` reading q/k head `h % H_k`; `n_s` a multiple of
    /// `n_s_k`), g F32 [1, H, n_t, n_s] (a gate per head) or [S, H, n_t,
    /// n_s] (per channel, KDA), beta F32 [1, H, n_t, n_s], state F32
    /// [S, S, H, n_s] (each head's matrix stored transposed: element
    /// `[j, i]` is `M[i][j]`). Per token: `M *= exp(g)` (row i by
    /// `exp(g[i])` for KDA), `d = (v - Mᵀk) * beta`, `M += k dᵀ`,
    /// `out = Mᵀq / sqrt(S)`. The result is F32, one dimension: the
    /// outputs [S, H, n_t, n_s], then the final states [S, S, H, n_s].
    GatedDeltaNet,
    /// A copy of `src[0]` (same layout) in another device's memory, inserted
    /// by the scheduler where a split reads a tensor from another backend.
    /// Backends never compute it: the scheduler moves the bytes through
    /// the buffers' copy paths before the split runs.
    Transfer,
}

/// The op without its parameters, for capability tables and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// [`Op::Leaf`].
    Leaf,
    /// [`Op::View`].
    View,
    /// [`Op::Reshape`].
    Reshape,
    /// [`Op::Permute`].
    Permute,
    /// [`Op::Transpose`].
    Transpose,
    /// [`Op::GetRows`].
    GetRows,
    /// [`Op::Binary`] with [`BinaryOp::Add`].
    Add,
    /// [`Op::Binary`] with [`BinaryOp::Sub`].
    Sub,
    /// [`Op::Binary`] with [`BinaryOp::Mul`].
    Mul,
    /// [`Op::Binary`] with [`BinaryOp::Div`].
    Div,
    /// [`Op::Scale`].
    Scale,
    /// [`Op::Unary`], any [`UnaryOp`].
    Unary,
    /// [`Op::Glu`], any [`GluOp`].
    Glu,
    /// [`Op::MulMat`].
    MulMat,
    /// [`Op::MulMatId`].
    MulMatId,
    /// [`Op::RmsNorm`].
    RmsNorm,
    /// [`Op::Norm`].
    Norm,
    /// [`Op::Rope`].
    Rope,
    /// [`Op::SoftMax`].
    SoftMax,
    /// [`Op::Cpy`].
    Cpy,
    /// [`Op::Cont`].
    Cont,
    /// [`Op::SetRows`].
    SetRows,
    /// [`Op::Concat`].
    Concat,
    /// [`Op::SumRows`].
    SumRows,
    /// [`Op::ArgSort`].
    ArgSort,
    /// [`Op::TopK`].
    TopK,
    /// [`Op::FlashAttnExt`].
    FlashAttnExt,
    /// [`Op::AddId`].
    AddId,
    /// [`Op::SsmConv`].
    SsmConv,
    /// [`Op::SsmScan`].
    SsmScan,
    /// [`Op::GatedDeltaNet`].
    GatedDeltaNet,
    /// [`Op::Transfer`].
    Transfer,
}

impl OpKind {
    /// ggml's name for the op, as its tools print it.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Leaf => "NONE",
            OpKind::View => "VIEW",
            OpKind::Reshape => "RESHAPE",
            OpKind::Permute => "PERMUTE",
            OpKind::Transpose => "TRANSPOSE",
            OpKind::GetRows => "GET_ROWS",
            OpKind::Add => "ADD",
            OpKind::Sub => "SUB",
            OpKind::Mul => "MUL",
            OpKind::Div => "DIV",
            OpKind::Scale => "SCALE",
            OpKind::Unary => "UNARY",
            OpKind::Glu => "GLU",
            OpKind::MulMat => "MUL_MAT",
            OpKind::MulMatId => "MUL_MAT_ID",
            OpKind::RmsNorm => "RMS_NORM",
            OpKind::Norm => "NORM",
            OpKind::Rope => "ROPE",
            OpKind::SoftMax => "SOFT_MAX",
            OpKind::Cpy => "CPY",
            OpKind::Cont => "CONT",
            OpKind::SetRows => "SET_ROWS",
            OpKind::Concat => "CONCAT",
            OpKind::SumRows => "SUM_ROWS",
            OpKind::ArgSort => "ARGSORT",
            OpKind::TopK => "TOP_K",
            OpKind::FlashAttnExt => "FLASH_ATTN_EXT",
            OpKind::AddId => "ADD_ID",
            OpKind::SsmConv => "SSM_CONV",
            OpKind::SsmScan => "SSM_SCAN",
            OpKind::GatedDeltaNet => "GATED_DELTA_NET",
            OpKind::Transfer => "TRANSFER",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Op {
    /// The op without its parameters; the four binary ops each have their own
    /// kind, the unary and GLU ops share one.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Leaf => OpKind::Leaf,
            Op::View => OpKind::View,
            Op::Reshape => OpKind::Reshape,
            Op::Permute(_) => OpKind::Permute,
            Op::Transpose => OpKind::Transpose,
            Op::GetRows => OpKind::GetRows,
            Op::Binary(BinaryOp::Add) => OpKind::Add,
            Op::Binary(BinaryOp::Sub) => OpKind::Sub,
            Op::Binary(BinaryOp::Mul) => OpKind::Mul,
            Op::Binary(BinaryOp::Div) => OpKind::Div,
            Op::Scale { .. } => OpKind::Scale,
            Op::Unary(_) => OpKind::Unary,
            Op::Glu { .. } => OpKind::Glu,
            Op::MulMat => OpKind::MulMat,
            Op::MulMatId => OpKind::MulMatId,
            Op::RmsNorm { .. } => OpKind::RmsNorm,
            Op::Norm { .. } => OpKind::Norm,
            Op::Rope(_) => OpKind::Rope,
            Op::SoftMax { .. } => OpKind::SoftMax,
            Op::Cpy => OpKind::Cpy,
            Op::Cont => OpKind::Cont,
            Op::SetRows => OpKind::SetRows,
            Op::Concat { .. } => OpKind::Concat,
            Op::SumRows => OpKind::SumRows,
            Op::ArgSort { .. } => OpKind::ArgSort,
            Op::TopK { .. } => OpKind::TopK,
            Op::FlashAttnExt { .. } => OpKind::FlashAttnExt,
            Op::AddId => OpKind::AddId,
            Op::SsmConv => OpKind::SsmConv,
            Op::SsmScan => OpKind::SsmScan,
            Op::GatedDeltaNet => OpKind::GatedDeltaNet,
            Op::Transfer => OpKind::Transfer,
        }
    }

    /// A label for logs and DOT: the op name with its variant.
    pub fn label(&self) -> String {
        match self {
            Op::Unary(u) => format!("UNARY({u:?})"),
            Op::Glu { op, .. } => format!("GLU({op:?})"),
            Op::Rope(p) => format!("ROPE({:?})", p.mode),
            op => op.kind().name().to_string(),
        }
    }

    /// Views, leafs and transfers: nothing for a backend to compute.
    pub fn is_noop(&self) -> bool {
        matches!(
            self,
            Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer
        )
    }

    /// Ops that make a view of their first source.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose
        )
    }

    /// Ops whose result may take the memory of `src[0]` when it has no other
    /// consumer and the same layout (each output element depends only on
    /// input elements at or before its own position in its row).
    pub fn can_run_in_place(&self) -> bool {
        matches!(
            self,
            Op::Binary(_)
                | Op::Scale { .. }
                | Op::Unary(_)
                | Op::RmsNorm { .. }
                | Op::Norm { .. }
                | Op::SoftMax { .. }
                | Op::Rope(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: (f64, f64), want: (f64, f64)) {
        assert!(
            (got.0 - want.0).abs() < 1e-12 && (got.1 - want.1).abs() < 1e-12,
            "{got:?} != {want:?}"
        );
    }

    /// theta = pos * freq_scale * base^(-2i / n_dims) / freq_factor, for
    /// pair i; written out here rather than taken from the code under test.
    #[test]
    fn rope_rotation_is_the_closed_form_angle() {
        let mut p = RopeParams::new(128, RopeMode::Normal);
        p.freq_base = 500000.0;
        p.freq_scale = 0.25;
        for (pos, i0, ff) in [
            (0.0, 0, 1.0),
            (37.0, 10, 2.0),
            (4095.0, 126, 1.0),
            (5.0, 2, 8.0),
        ] {
            let theta = pos * 0.25 * 500000f64.powf(-(i0 as f64) / 128.0) / ff;
            close(p.rotation(pos, i0, ff), (theta.cos(), theta.sin()));
        }
    }

    /// YaRN: pairs below the low correction dim keep the unscaled angle,
    /// pairs above the high one take the interpolated angle, and both are
    /// scaled by attn_factor * (1 + 0.1 ln(1 / freq_scale)).
    #[test]
    fn yarn_extrapolates_low_pairs_and_interpolates_high_ones() {
        let mut p = RopeParams::new(128, RopeMode::Neox);
        p.n_ctx_orig = 4096;
        p.freq_scale = 0.25;
        p.ext_factor = 1.0;
        p.attn_factor = 1.0;
        p.beta_fast = 32.0;
        p.beta_slow = 1.0;
        // 128 ln(4096 / (32 * 2pi)) / (2 ln 10000) = 20.9 -> 20;
        // 128 ln(4096 / (2pi)) / (2 ln 10000) = 45.03 -> 46
        assert_eq!(p.yarn_corr_dims(), [20.0, 46.0]);
        let mscale = 1.0 + 0.1 * 4f64.ln();
        let pos = 1000.0;
        let angle = |i0: usize| pos * 10000f64.powf(-(i0 as f64) / 128.0);
        let (c, s) = p.rotation(pos, 4, 1.0);
        close((c, s), (angle(4).cos() * mscale, angle(4).sin() * mscale));
        let (c, s) = p.rotation(pos, 126, 1.0);
        let t = 0.25 * angle(126);
        close((c, s), (t.cos() * mscale, t.sin() * mscale));
    }
}
