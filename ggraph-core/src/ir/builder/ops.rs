//! The compute ops, each checking its operands' shapes and types.

use smallvec::SmallVec;

use super::GraphBuilder;
use super::checks::{can_repeat, check_convertible, check_mask, divides};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::op::{BinaryOp, GluOp, Op, RopeMode, RopeParams, SortOrder, UnaryOp};
use crate::ir::tensor::{MAX_DIMS, TensorId};

impl GraphBuilder {
    /// Rows of `a` picked by the I32 indices `idx` (ggml's `get_rows`, the
    /// embedding lookup): a [n, rows, b1, b2], idx [m, b1, b2] → [n, m, b1, b2]
    /// in F32 (I32 for an I32 source). Errors with [`Error::Type`] if `idx` is
    /// not I32 and [`Error::Shape`] if the batch dims disagree or a quantised
    /// `a` has strided rows.
    pub fn get_rows(&mut self, a: TensorId, idx: TensorId) -> Result<TensorId> {
        const OP: &str = "get_rows";
        let i = self.i32(OP, "indices", idx)?.clone();
        let src = self.graph.get(a)?;
        if src.ne[2] != i.ne[1] || src.ne[3] != i.ne[2] || i.ne[3] != 1 {
            return Err(Error::shape(
                OP,
                format!(
                    "source {} and indices {} disagree: need src.ne[2] == idx.ne[1], src.ne[3] == idx.ne[2], idx.ne[3] == 1",
                    src.shape_str(),
                    i.shape_str()
                ),
            ));
        }
        if src.dtype.is_quantized() && !src.has_contiguous_rows() {
            return Err(Error::shape(OP, "quantised source rows must be packed"));
        }
        let dtype = if src.dtype == DType::I32 {
            DType::I32
        } else {
            DType::F32
        };
        let ne = [src.ne[0], i.ne[0], i.ne[1], i.ne[2]];
        self.node(Op::GetRows, dtype, ne, &[a, idx])
    }

    /// `a (op) b` with `b` repeated to `a`'s shape; the result has `a`'s
    /// shape and type.
    pub fn binary(&mut self, op: BinaryOp, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = match op {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
        };
        let ta = self.float(name, "a", a)?;
        let tb = self.float(name, "b", b)?;
        if !can_repeat(tb.ne, ta.ne) {
            return Err(Error::shape(
                name,
                format!(
                    "b {} does not repeat to a {} (each dim of b must divide a's)",
                    tb.shape_str(),
                    ta.shape_str()
                ),
            ));
        }
        let (dtype, ne) = (ta.dtype, ta.ne);
        self.node(Op::Binary(op), dtype, ne, &[a, b])
    }

    /// `a + b`, with `b` repeated to `a`'s shape (see [`GraphBuilder::binary`]).
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Add, a, b)
    }

    /// `a - b`, with `b` repeated to `a`'s shape (see [`GraphBuilder::binary`]).
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Sub, a, b)
    }

    /// `a * b` elementwise, with `b` repeated to `a`'s shape (see
    /// [`GraphBuilder::binary`]); the matrix product is [`GraphBuilder::mul_mat`].
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// `a / b`, with `b` repeated to `a`'s shape (see [`GraphBuilder::binary`]).
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// `a * s`.
    pub fn scale(&mut self, a: TensorId, s: f32) -> Result<TensorId> {
        self.scale_bias(a, s, 0.0)
    }

    /// `a * s + bias`.
    pub fn scale_bias(&mut self, a: TensorId, s: f32, bias: f32) -> Result<TensorId> {
        let t = self.float("scale", "a", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::Scale { scale: s, bias }, dtype, ne, &[a])
    }

    /// `op` applied to every element of `a`; same shape and type. Errors with
    /// [`Error::Type`] unless `a` is F32, F16 or BF16.
    pub fn unary(&mut self, op: UnaryOp, a: TensorId) -> Result<TensorId> {
        let t = self.float("unary", "a", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::Unary(op), dtype, ne, &[a])
    }

    /// `a * sigmoid(a)` elementwise ([`UnaryOp::Silu`]).
    pub fn silu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Silu, a)
    }

    /// GELU, tanh approximation, elementwise ([`UnaryOp::Gelu`]).
    pub fn gelu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Gelu, a)
    }

    /// act(x) * y where each row of `a` is [x | y] (or [y | x] if swapped).
    pub fn glu(&mut self, op: GluOp, a: TensorId, swapped: bool) -> Result<TensorId> {
        const OP: &str = "glu";
        let t = self.float(OP, "a", a)?;
        if t.ne[0] % 2 != 0 {
            return Err(Error::shape(
                OP,
                format!("rows of {} split in halves; ne[0] is odd", t.shape_str()),
            ));
        }
        let mut ne = t.ne;
        ne[0] /= 2;
        let dtype = t.dtype;
        self.node(Op::Glu { op, swapped }, dtype, ne, &[a])
    }

    /// act(a) * b with `a` and `b` of the same shape.
    pub fn glu_split(&mut self, op: GluOp, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "glu_split";
        let ta = self.float(OP, "a", a)?;
        let tb = self.float(OP, "b", b)?;
        if ta.ne != tb.ne {
            return Err(Error::shape(
                OP,
                format!("a {} and b {} differ", ta.shape_str(), tb.shape_str()),
            ));
        }
        let (dtype, ne) = (ta.dtype, ta.ne);
        self.node(Op::Glu { op, swapped: false }, dtype, ne, &[a, b])
    }

    /// silu(x) * y where each row of `a` is [x | y]; the result has half of
    /// `a`'s `ne[0]` (see [`GraphBuilder::glu`]).
    pub fn swiglu(&mut self, a: TensorId) -> Result<TensorId> {
        self.glu(GluOp::Swiglu, a, false)
    }

    /// gpt-oss's clamped SwiGLU of gate `a` and value `b`, of the same
    /// shape, with llama.cpp's constants ([`GluOp::SWIGLU_OAI`]).
    pub fn swiglu_oai(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.glu_split(GluOp::SWIGLU_OAI, a, b)
    }

    /// silu(a) * b, `a` and `b` of the same shape (see
    /// [`GraphBuilder::glu_split`]).
    pub fn swiglu_split(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.glu_split(GluOp::Swiglu, a, b)
    }

    /// a [k, m, a2, a3] (weights, any type) times b [k, n, b2, b3]
    /// (activations, float) → F32 [m, n, b2, b3]; a repeats over dims 2, 3.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "mul_mat";
        let ta = self.graph.get(a)?;
        let tb = self.float(OP, "b", b)?;
        if ta.dtype == DType::I32 {
            return Err(Error::dtype(OP, "a", ta.dtype, "a float or quantised type"));
        }
        if ta.ne[0] != tb.ne[0] {
            return Err(Error::shape(
                OP,
                format!(
                    "a {} and b {} differ in ne[0] (the shared dimension)",
                    ta.shape_str(),
                    tb.shape_str()
                ),
            ));
        }
        if !divides(ta.ne[2], tb.ne[2]) || !divides(ta.ne[3], tb.ne[3]) {
            return Err(Error::shape(
                OP,
                format!(
                    "a {} does not broadcast over b {} in dims 2 and 3",
                    ta.shape_str(),
                    tb.shape_str()
                ),
            ));
        }
        if ta.is_transposed() {
            return Err(Error::shape(OP, "a must not be transposed"));
        }
        if ta.dtype.is_quantized() && !ta.has_contiguous_rows() {
            return Err(Error::shape(OP, "quantised a must have packed rows"));
        }
        let ne = [ta.ne[1], tb.ne[1], tb.ne[2], tb.ne[3]];
        self.node(Op::MulMat, DType::F32, ne, &[a, b])
    }

    /// Expert matmul: experts [k, m, n_expert], b [k, n_b, n_tokens],
    /// ids I32 [n_used, n_tokens] → F32 [m, n_used, n_tokens].
    pub fn mul_mat_id(
        &mut self,
        experts: TensorId,
        b: TensorId,
        ids: TensorId,
    ) -> Result<TensorId> {
        const OP: &str = "mul_mat_id";
        let ti = self.i32(OP, "ids", ids)?.clone();
        let ta = self.graph.get(experts)?;
        let tb = self.float(OP, "b", b)?;
        if ta.dtype == DType::I32 {
            return Err(Error::dtype(
                OP,
                "experts",
                ta.dtype,
                "a float or quantised type",
            ));
        }
        if ta.ne[0] != tb.ne[0] || ta.ne[3] != 1 || tb.ne[3] != 1 {
            return Err(Error::shape(
                OP,
                format!(
                    "experts {} and b {} need equal ne[0] and ne[3] == 1",
                    ta.shape_str(),
                    tb.shape_str()
                ),
            ));
        }
        if ti.ne[1] != tb.ne[2] || ti.ne[2] != 1 || ti.ne[3] != 1 || !divides(tb.ne[1], ti.ne[0]) {
            return Err(Error::shape(
                OP,
                format!(
                    "ids {} and b {}: need ids.ne[1] == b.ne[2] (tokens) and b.ne[1] dividing ids.ne[0]",
                    ti.shape_str(),
                    tb.shape_str()
                ),
            ));
        }
        if ta.dtype.is_quantized() && !ta.has_contiguous_rows() {
            return Err(Error::shape(OP, "quantised experts must have packed rows"));
        }
        let ne = [ta.ne[1], ti.ne[0], tb.ne[2], 1];
        self.node(Op::MulMatId, DType::F32, ne, &[experts, b, ids])
    }

    /// Each row divided by its root mean square, `x / sqrt(mean(x²) + eps)`
    /// (ggml's `rms_norm`; the weight is a separate `mul`). Same shape and
    /// type as `a`, which must be F32, F16 or BF16.
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        let t = self.float("rms_norm", "a", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::RmsNorm { eps }, dtype, ne, &[a])
    }

    /// Each row normalised to mean 0 and variance 1, `(x - mean) / sqrt(var +
    /// eps)` (ggml's `norm`, layer norm without weight and bias). Same shape
    /// and type as `a`, which must be F32, F16 or BF16.
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        let t = self.float("norm", "a", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::Norm { eps }, dtype, ne, &[a])
    }

    /// Plain rope with base 10000.
    pub fn rope(
        &mut self,
        a: TensorId,
        pos: TensorId,
        n_dims: usize,
        mode: RopeMode,
    ) -> Result<TensorId> {
        self.rope_ext(a, pos, None, RopeParams::new(n_dims, mode))
    }

    /// Rotary embedding: a [head_dim, n_head, n_tokens, x], pos I32
    /// `[n_tokens]`, optional F32 frequency divisors `[n_dims / 2]`.
    pub fn rope_ext(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        params: RopeParams,
    ) -> Result<TensorId> {
        const OP: &str = "rope";
        let tp = self.i32(OP, "positions", pos)?.clone();
        let ta = self.float(OP, "a", a)?;
        if tp.ne[0] != ta.ne[2] || tp.nelements() != tp.ne[0] {
            return Err(Error::shape(
                OP,
                format!(
                    "positions {} must be a vector of a.ne[2] = {} entries",
                    tp.shape_str(),
                    ta.ne[2]
                ),
            ));
        }
        if params.n_dims == 0 || params.n_dims % 2 != 0 || params.n_dims > ta.ne[0] {
            return Err(Error::shape(
                OP,
                format!(
                    "n_dims {} must be even, positive and at most ne[0] = {}",
                    params.n_dims, ta.ne[0]
                ),
            ));
        }
        let (dtype, ne) = (ta.dtype, ta.ne);
        let mut src: SmallVec<[TensorId; 4]> = SmallVec::from_slice(&[a, pos]);
        if let Some(ff) = freq_factors {
            let tf = self.graph.get(ff)?;
            if tf.dtype != DType::F32 {
                return Err(Error::dtype(OP, "freq_factors", tf.dtype, "F32"));
            }
            if tf.ne[0] < params.n_dims / 2 {
                return Err(Error::shape(
                    OP,
                    format!(
                        "freq_factors has {} entries, n_dims / 2 = {} needed",
                        tf.ne[0],
                        params.n_dims / 2
                    ),
                ));
            }
            src.push(ff);
        }
        self.node(Op::Rope(params), dtype, ne, &src)
    }

    /// softmax along rows.
    pub fn soft_max(&mut self, a: TensorId) -> Result<TensorId> {
        self.soft_max_ext(a, None, 1.0, 0.0)
    }

    /// softmax(a * scale + mask * slope) along rows, with ALiBi slopes
    /// when max_bias > 0.
    pub fn soft_max_ext(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        self.soft_max_with(a, mask, None, scale, max_bias)
    }

    /// [`GraphBuilder::soft_max_ext`] with attention sinks (ggml's
    /// `soft_max_add_sinks`, gpt-oss): F32 `[a.ne[2]]`, one logit per head
    /// that joins each row's maximum and sum but takes no probability.
    pub fn soft_max_ext_sinks(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        sinks: TensorId,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        self.soft_max_with(a, mask, Some(sinks), scale, max_bias)
    }

    fn soft_max_with(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        const OP: &str = "soft_max";
        let ta = self.float(OP, "a", a)?.clone();
        let mut src: SmallVec<[TensorId; 4]> = SmallVec::from_slice(&[a]);
        if let Some(m) = mask {
            let tm = self.graph.get(m)?;
            if !matches!(tm.dtype, DType::F32 | DType::F16) {
                return Err(Error::dtype(OP, "mask", tm.dtype, "F32 or F16"));
            }
            check_mask(OP, tm, ta.ne[0], ta.ne[1], ta.ne[2], ta.ne[3])?;
            src.push(m);
        }
        if max_bias > 0.0 && mask.is_none() {
            return Err(Error::InvalidArgument(
                "soft_max: max_bias (ALiBi) needs a mask".into(),
            ));
        }
        if let Some(s) = sinks {
            self.check_sinks(OP, s, ta.ne[2])?;
            src.push(s);
        }
        let op = Op::SoftMax {
            scale,
            max_bias,
            sinks: sinks.is_some(),
        };
        self.node(op, ta.dtype, ta.ne, &src)
    }

    /// Attention sinks: F32, one packed value per head.
    fn check_sinks(&self, op: &'static str, sinks: TensorId, heads: usize) -> Result<()> {
        let t = self.graph.get(sinks)?;
        if t.dtype != DType::F32 {
            return Err(Error::dtype(op, "sinks", t.dtype, "F32"));
        }
        if t.ne != [heads, 1, 1, 1] || !t.is_contiguous() {
            return Err(Error::shape(
                op,
                format!(
                    "sinks {} must be one packed value per head: [{heads}]",
                    t.shape_str()
                ),
            ));
        }
        Ok(())
    }

    /// Writes `a`'s values into `b` (converting type); the result is a
    /// view of `b` to order later reads after the write.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        const OP: &str = "cpy";
        let ta = self.graph.get(a)?;
        let tb = self.graph.get(b)?;
        if ta.nelements() != tb.nelements() {
            return Err(Error::shape(
                OP,
                format!(
                    "a {} and b {} hold different numbers of elements",
                    ta.shape_str(),
                    tb.shape_str()
                ),
            ));
        }
        check_convertible(OP, ta, tb.dtype)?;
        if tb.dtype.is_quantized() && !tb.has_contiguous_rows() {
            return Err(Error::shape(
                OP,
                "a quantised destination needs packed rows",
            ));
        }
        if tb.dtype.is_quantized() && ta.ne[0] != tb.ne[0] {
            return Err(Error::shape(
                OP,
                "copying into a quantised tensor needs equal row lengths",
            ));
        }
        let (ne, nb) = (tb.ne, tb.nb);
        let id = self.view_node(Op::Cpy, b, ne, nb, 0);
        self.graph.tensor_mut(id).src = SmallVec::from_slice(&[a, b]);
        Ok(id)
    }

    /// A contiguous copy of `a`.
    pub fn cont(&mut self, a: TensorId) -> Result<TensorId> {
        let dtype = self.graph.get(a)?.dtype;
        self.cast(a, dtype)
    }

    /// A contiguous copy of `a` converted to `dtype`.
    pub fn cast(&mut self, a: TensorId, dtype: DType) -> Result<TensorId> {
        const OP: &str = "cont";
        let ta = self.graph.get(a)?;
        check_convertible(OP, ta, dtype)?;
        Self::check_row_blocks(OP, dtype, ta.ne[0])?;
        let ne = ta.ne;
        self.node(Op::Cont, dtype, ne, &[a])
    }

    /// Writes row `r` of `src` to row `idx[r]` of `dst` (converting type);
    /// the result is a view of `dst`.
    pub fn set_rows(&mut self, dst: TensorId, src: TensorId, idx: TensorId) -> Result<TensorId> {
        const OP: &str = "set_rows";
        let ti = self.i32(OP, "indices", idx)?.clone();
        let ts = self.float(OP, "src", src)?.clone();
        let td = self.graph.get(dst)?;
        if td.ne[0] != ts.ne[0] || td.ne[2] != ts.ne[2] || td.ne[3] != ts.ne[3] {
            return Err(Error::shape(
                OP,
                format!(
                    "dst {} and src {} must agree in dims 0, 2 and 3",
                    td.shape_str(),
                    ts.shape_str()
                ),
            ));
        }
        if ts.ne[1] != ti.ne[0]
            || !divides(ti.ne[1], ts.ne[2])
            || !divides(ti.ne[2], ts.ne[3])
            || ti.ne[3] != 1
        {
            return Err(Error::shape(
                OP,
                format!(
                    "indices {} do not fit src {}: need idx.ne[0] == src.ne[1] and idx dims 1, 2 dividing src dims 2, 3",
                    ti.shape_str(),
                    ts.shape_str()
                ),
            ));
        }
        if td.dtype == DType::I32 {
            return Err(Error::dtype(
                OP,
                "dst",
                td.dtype,
                "a float or quantised type",
            ));
        }
        if td.dtype.is_quantized() && !td.has_contiguous_rows() {
            return Err(Error::shape(
                OP,
                "a quantised destination needs packed rows",
            ));
        }
        let (ne, nb) = (td.ne, td.nb);
        let id = self.view_node(Op::SetRows, dst, ne, nb, 0);
        self.graph.tensor_mut(id).src = SmallVec::from_slice(&[dst, src, idx]);
        Ok(id)
    }

    /// `a` and `b` joined along `dim`.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        const OP: &str = "concat";
        let ta = self.graph.get(a)?;
        let tb = self.graph.get(b)?;
        if dim >= MAX_DIMS {
            return Err(Error::shape(OP, format!("dim {dim} is not below 4")));
        }
        if ta.dtype != tb.dtype || ta.dtype.is_quantized() {
            return Err(Error::dtype(
                OP,
                "b",
                tb.dtype,
                format!("the same non-quantised type as a ({})", ta.dtype),
            ));
        }
        for i in 0..MAX_DIMS {
            if i != dim && ta.ne[i] != tb.ne[i] {
                return Err(Error::shape(
                    OP,
                    format!(
                        "a {} and b {} differ outside dim {dim}",
                        ta.shape_str(),
                        tb.shape_str()
                    ),
                ));
            }
        }
        let mut ne = ta.ne;
        ne[dim] += tb.ne[dim];
        let dtype = ta.dtype;
        self.node(Op::Concat { dim }, dtype, ne, &[a, b])
    }

    /// ggml's `ssm_conv(sx, c)`: a short causal convolution of each
    /// channel. sx F32 [d_conv - 1 + n_t, d_inner, n_s] (per channel the
    /// carried state, then the tokens), c F32 [d_conv, d_inner] →
    /// F32 [d_inner, n_t, n_s] (see [`Op::SsmConv`]).
    pub fn ssm_conv(&mut self, sx: TensorId, c: TensorId) -> Result<TensorId> {
        const OP: &str = "ssm_conv";
        let tx = self.graph.get(sx)?;
        let tc = self.graph.get(c)?;
        for (name, t) in [("sx", tx), ("c", tc)] {
            if t.dtype != DType::F32 {
                return Err(Error::dtype(OP, name, t.dtype, "F32"));
            }
        }
        let (d_conv, d_inner) = (tc.ne[0], tc.ne[1]);
        if tc.ne[2] != 1 || tc.ne[3] != 1 || tx.ne[3] != 1 {
            return Err(Error::shape(
                OP,
                format!(
                    "c {} must be a matrix and sx {} at most 3-D",
                    tc.shape_str(),
                    tx.shape_str()
                ),
            ));
        }
        if d_conv == 0 || tx.ne[1] != d_inner || tx.ne[0] < d_conv {
            return Err(Error::shape(
                OP,
                format!(
                    "sx {} must be [d_conv - 1 + n_t, d_inner, n_s] with n_t >= 1 for c {} \
                     ([d_conv, d_inner])",
                    tx.shape_str(),
                    tc.shape_str()
                ),
            ));
        }
        let ne = [d_inner, tx.ne[0] + 1 - d_conv, tx.ne[2], 1];
        self.node(Op::SsmConv, DType::F32, ne, &[sx, c])
    }

    /// ggml's `ssm_scan(s, x, dt, A, B, C, ids)` with one state snapshot:
    /// the selective scan of Mamba's layers (see [`Op::SsmScan`] for the
    /// shapes). The result is F32 of one dimension: y
    /// [head_dim, n_head, n_t, n_s], then the final states
    /// [d_state, head_dim, n_head, n_s].
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_scan(
        &mut self,
        s: TensorId,
        x: TensorId,
        dt: TensorId,
        a: TensorId,
        b: TensorId,
        c: TensorId,
        ids: TensorId,
    ) -> Result<TensorId> {
        const OP: &str = "ssm_scan";
        let ts = self.graph.get(s)?;
        let tx = self.graph.get(x)?;
        let tdt = self.graph.get(dt)?;
        let ta = self.graph.get(a)?;
        let tb = self.graph.get(b)?;
        let tc = self.graph.get(c)?;
        let tids = self.i32(OP, "ids", ids)?;
        for (name, t) in [
            ("s", ts),
            ("x", tx),
            ("dt", tdt),
            ("A", ta),
            ("B", tb),
            ("C", tc),
        ] {
            if t.dtype != DType::F32 {
                return Err(Error::dtype(OP, name, t.dtype, "F32"));
            }
        }
        let d_state = ts.ne[0];
        let [head_dim, n_head, n_t, n_s] = tx.ne;
        let n_group = tb.ne[1];
        let shape = |what: String| Err(Error::shape(OP, what));
        if ts.ne[1] != head_dim || ts.ne[2] != n_head || ts.ne[3] == 0 {
            return shape(format!(
                "s {} must be [d_state, head_dim, n_head, n_rs] for x {}",
                ts.shape_str(),
                tx.shape_str()
            ));
        }
        if tdt.ne != [n_head, n_t, n_s, 1] {
            return shape(format!(
                "dt {} must be [n_head, n_t, n_s] for x {}",
                tdt.shape_str(),
                tx.shape_str()
            ));
        }
        if !(ta.ne[0] == 1 || ta.ne[0] == d_state) || ta.ne[1] != n_head || ta.ne[2] * ta.ne[3] != 1
        {
            return shape(format!(
                "A {} must be [1, n_head] or [d_state, n_head] (d_state {d_state}, n_head {n_head})",
                ta.shape_str()
            ));
        }
        if tb.ne != tc.ne
            || tb.ne[0] != d_state
            || tb.ne[2] != n_t
            || tb.ne[3] != n_s
            || n_group == 0
            || n_head % n_group != 0
        {
            return shape(format!(
                "B {} and C {} must both be [d_state, n_group, n_t, n_s] with n_head {n_head} a \
                 multiple of n_group",
                tb.shape_str(),
                tc.shape_str()
            ));
        }
        if tids.ne != [n_s, 1, 1, 1] {
            return shape(format!("ids {} must be [n_s] ({n_s})", tids.shape_str()));
        }
        let n = head_dim * n_head * n_t * n_s + d_state * head_dim * n_head * n_s;
        self.node(
            Op::SsmScan,
            DType::F32,
            [n, 1, 1, 1],
            &[s, x, dt, a, b, c, ids],
        )
    }

    /// ggml's `gated_delta_net(q, k, v, g, beta, state)` with one state
    /// snapshot: Gated DeltaNet's recurrence (see [`Op::GatedDeltaNet`]
    /// for the shapes). The result is F32 of one dimension: the outputs
    /// [S, H, n_t, n_s], then the final states [S, S, H, n_s].
    pub fn gated_delta_net(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        g: TensorId,
        beta: TensorId,
        state: TensorId,
    ) -> Result<TensorId> {
        const OP: &str = "gated_delta_net";
        let named = [
            ("q", q),
            ("k", k),
            ("v", v),
            ("g", g),
            ("beta", beta),
            ("state", state),
        ];
        for (name, id) in named {
            let t = self.graph.get(id)?;
            if t.dtype != DType::F32 {
                return Err(Error::dtype(OP, name, t.dtype, "F32"));
            }
            let packed = match name {
                "q" | "k" | "v" => t.has_contiguous_rows(),
                _ => t.is_contiguous(),
            };
            if !packed {
                return Err(Error::shape(
                    OP,
                    format!("{name} {} must have packed rows", t.shape_str()),
                ));
            }
        }
        let (tq, tk, tv) = (self.graph.get(q)?, self.graph.get(k)?, self.graph.get(v)?);
        let (tg, tb, ts) = (
            self.graph.get(g)?,
            self.graph.get(beta)?,
            self.graph.get(state)?,
        );
        let [s_v, h, n_t, n_s] = tv.ne;
        let shape = |what: String| Err(Error::shape(OP, what));
        if tq.ne != tk.ne
            || tq.ne[0] != s_v
            || tq.ne[2] != n_t
            || tq.ne[1] == 0
            || h % tq.ne[1] != 0
            || tq.ne[3] == 0
            || n_s % tq.ne[3] != 0
        {
            return shape(format!(
                "q {} and k {} must both be [S, H_k, n_t, n_s_k] for v {} (H a multiple of H_k, \
                 n_s of n_s_k)",
                tq.shape_str(),
                tk.shape_str(),
                tv.shape_str()
            ));
        }
        if !(tg.ne[0] == 1 || tg.ne[0] == s_v) || tg.ne[1..] != tv.ne[1..] {
            return shape(format!(
                "g {} must be [1, H, n_t, n_s] or [S, H, n_t, n_s] for v {}",
                tg.shape_str(),
                tv.shape_str()
            ));
        }
        if tb.ne != [1, h, n_t, n_s] {
            return shape(format!(
                "beta {} must be [1, H, n_t, n_s] for v {}",
                tb.shape_str(),
                tv.shape_str()
            ));
        }
        if ts.ne != [s_v, s_v, h, n_s] {
            return shape(format!(
                "state {} must be [S, S, H, n_s] for v {}",
                ts.shape_str(),
                tv.shape_str()
            ));
        }
        let n = s_v * h * n_t * n_s + s_v * s_v * h * n_s;
        self.node(
            Op::GatedDeltaNet,
            DType::F32,
            [n, 1, 1, 1],
            &[q, k, v, g, beta, state],
        )
    }

    /// Sum of each row: [n, a, b, c] → [1, a, b, c].
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        let t = self.float("sum_rows", "a", a)?;
        let ne = [1, t.ne[1], t.ne[2], t.ne[3]];
        let dtype = t.dtype;
        self.node(Op::SumRows, dtype, ne, &[a])
    }

    /// Indices that sort each row (I32).
    pub fn argsort(&mut self, a: TensorId, order: SortOrder) -> Result<TensorId> {
        let t = self.float("argsort", "a", a)?;
        let ne = t.ne;
        self.node(Op::ArgSort { order }, DType::I32, ne, &[a])
    }

    /// Indices of the `k` largest values of each row, largest first (I32).
    pub fn top_k(&mut self, a: TensorId, k: usize) -> Result<TensorId> {
        const OP: &str = "top_k";
        let t = self.float(OP, "a", a)?;
        if k > t.ne[0] {
            return Err(Error::shape(
                OP,
                format!("k = {k} exceeds the row length {}", t.ne[0]),
            ));
        }
        let ne = [k, t.ne[1], t.ne[2], t.ne[3]];
        self.node(Op::TopK { k }, DType::I32, ne, &[a])
    }

    /// Fused attention: q [d, n_q, n_head, n_seq] (float), k [d, n_kv,
    /// n_head_kv, n_seq], v [dv, n_kv, n_head_kv, n_seq] (float or Q8_0 /
    /// Q4_0), optional mask [n_kv, >= n_q, m2, m3] (F32 or F16) →
    /// F32 [dv, n_head, n_q, n_seq]. softcap 0 disables capping.
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        softcap: f32,
    ) -> Result<TensorId> {
        let scores = Scores {
            scale,
            max_bias,
            softcap,
        };
        self.flash_attn_with(q, k, v, mask, None, scores)
    }

    /// [`GraphBuilder::flash_attn_ext`] with attention sinks (ggml's
    /// `flash_attn_ext_add_sinks`, gpt-oss): F32 `[n_head]`, one logit per
    /// head that joins the softmax's maximum and sum but adds no value.
    pub fn flash_attn_ext_sinks(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        sinks: TensorId,
        scale: f32,
    ) -> Result<TensorId> {
        let scores = Scores {
            scale,
            max_bias: 0.0,
            softcap: 0.0,
        };
        self.flash_attn_with(q, k, v, mask, Some(sinks), scores)
    }

    fn flash_attn_with(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scores: Scores,
    ) -> Result<TensorId> {
        const OP: &str = "flash_attn_ext";
        let Scores {
            scale,
            max_bias,
            softcap,
        } = scores;
        let tq = self.float(OP, "q", q)?.clone();
        let tk = self.graph.get(k)?.clone();
        let tv = self.graph.get(v)?.clone();
        for (name, t) in [("k", &tk), ("v", &tv)] {
            if !(t.dtype.is_float() || matches!(t.dtype, DType::Q8_0 | DType::Q4_0)) {
                return Err(Error::dtype(
                    OP,
                    name,
                    t.dtype,
                    "F32, F16, BF16, Q8_0 or Q4_0",
                ));
            }
            if t.dtype.is_quantized() && !t.has_contiguous_rows() {
                return Err(Error::shape(
                    OP,
                    format!("quantised {name} needs packed rows"),
                ));
            }
        }
        if tq.ne[0] != tk.ne[0] || tk.ne[1] != tv.ne[1] || tk.ne[2] != tv.ne[2] {
            return Err(Error::shape(
                OP,
                format!(
                    "q {}, k {}, v {}: need q.ne[0] == k.ne[0], k and v equal in dims 1 and 2",
                    tq.shape_str(),
                    tk.shape_str(),
                    tv.shape_str()
                ),
            ));
        }
        if !divides(tk.ne[2], tq.ne[2]) || tq.ne[3] != tk.ne[3] || tq.ne[3] != tv.ne[3] {
            return Err(Error::shape(
                OP,
                format!(
                    "q heads {} must be a multiple of kv heads {}, and q, k, v share ne[3]",
                    tq.ne[2], tk.ne[2]
                ),
            ));
        }
        let mut src: SmallVec<[TensorId; 4]> = SmallVec::from_slice(&[q, k, v]);
        if let Some(m) = mask {
            let tm = self.graph.get(m)?;
            if !matches!(tm.dtype, DType::F32 | DType::F16) {
                return Err(Error::dtype(OP, "mask", tm.dtype, "F32 or F16"));
            }
            check_mask(OP, tm, tk.ne[1], tq.ne[1], tq.ne[2], tq.ne[3])?;
            src.push(m);
        }
        if max_bias > 0.0 && mask.is_none() {
            return Err(Error::InvalidArgument(
                "flash_attn_ext: max_bias (ALiBi) needs a mask".into(),
            ));
        }
        if let Some(s) = sinks {
            self.check_sinks(OP, s, tq.ne[2])?;
            src.push(s);
        }
        let ne = [tv.ne[0], tq.ne[2], tq.ne[1], tq.ne[3]];
        self.node(
            Op::FlashAttnExt {
                scale,
                max_bias,
                softcap,
                sinks: sinks.is_some(),
            },
            DType::F32,
            ne,
            &src,
        )
    }

    /// `a[:, e, t] + b[:, ids[e, t]]` (ggml's `add_id`: a bias per selected
    /// expert): a F32 [n, n_used, n_tokens], b F32 [n, n_expert], ids I32
    /// [n_used, n_tokens]. An id outside b's rows is an error when the
    /// graph runs.
    pub fn add_id(&mut self, a: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        const OP: &str = "add_id";
        let ta = self.graph.get(a)?.clone();
        let tb = self.graph.get(b)?.clone();
        let ti = self.i32(OP, "ids", ids)?.clone();
        for (name, t) in [("a", &ta), ("b", &tb)] {
            if t.dtype != DType::F32 {
                return Err(Error::dtype(OP, name, t.dtype, "F32"));
            }
        }
        if tb.ne[0] != ta.ne[0]
            || tb.ne[2] * tb.ne[3] != 1
            || ti.ne[0] != ta.ne[1]
            || ti.ne[1] != ta.ne[2]
            || ta.ne[3] * ti.ne[2] * ti.ne[3] != 1
        {
            return Err(Error::shape(
                OP,
                format!(
                    "a {}, b {}, ids {}: need a [n, n_used, n_tokens], b [n, n_expert], ids [n_used, n_tokens]",
                    ta.shape_str(),
                    tb.shape_str(),
                    ti.shape_str()
                ),
            ));
        }
        if !ta.has_contiguous_rows() || !tb.has_contiguous_rows() {
            return Err(Error::shape(OP, "a and b need packed rows"));
        }
        self.node(Op::AddId, DType::F32, ta.ne, &[a, b, ids])
    }
}

/// How attention scores are formed: `scale`, ALiBi's `max_bias` and the
/// soft cap (see [`Op::FlashAttnExt`]).
#[derive(Clone, Copy)]
struct Scores {
    scale: f32,
    max_bias: f32,
    softcap: f32,
}
