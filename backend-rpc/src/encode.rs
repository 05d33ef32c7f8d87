//! ggraph's ops as ggml's: the op, its `op_params` and its sources in
//! ggml's order. ggraph's IR has ggml's semantics, so this is mostly a
//! renaming; the exceptions are written out where they occur.

use ggraph_core::ir::{BinaryOp, GluOp, Graph, Op, SortOrder, TensorId, UnaryOp};

use crate::op_table::{GgmlOp, OpTable};

/// ggml's `GGML_PREC_F32`: flash attention accumulates in F32.
const PREC_F32: i32 = 10;

/// One tensor's op in ggml's terms.
pub(crate) struct Encoded {
    /// ggml's op number in the server's version.
    pub op: u32,
    pub params: [i32; 16],
    /// Sources in ggml's slot order (`None`: a slot ggml leaves empty).
    pub srcs: Vec<Option<TensorId>>,
    /// ggml's cast: a copy whose src[1] is the result itself.
    pub self_as_src1: bool,
}

/// The op of `id` in ggml's terms, or `None` if the server's version
/// has no such op.
pub(crate) fn encode(table: &OpTable, graph: &Graph, id: TensorId) -> Option<Encoded> {
    let t = graph.tensor(id);
    let src: Vec<Option<TensorId>> = t.src.iter().copied().map(Some).collect();
    // soft_max's and flash_attn_ext's slots: the mask, then the sinks
    let (mask, sinks) = t.mask_and_sinks();
    let mut params = [0i32; 16];
    let f = |x: f32| x.to_bits() as i32;
    let mut self_as_src1 = false;
    let (op, srcs) = match &t.op {
        // a copy from another device is, here, memory already filled
        Op::Leaf | Op::Transfer => (GgmlOp::None, Vec::new()),
        Op::View => {
            let offset = t.view.map_or(0, |v| v.offset as u64);
            params[0] = offset as u32 as i32;
            params[1] = (offset >> 32) as u32 as i32;
            (GgmlOp::View, src)
        }
        Op::Reshape => (GgmlOp::Reshape, src),
        Op::Permute(axes) => {
            for (p, &a) in params.iter_mut().zip(axes) {
                *p = a as i32;
            }
            (GgmlOp::Permute, src)
        }
        Op::Transpose => (GgmlOp::Transpose, src),
        Op::GetRows => (GgmlOp::GetRows, src),
        Op::Binary(b) => {
            let op = match b {
                BinaryOp::Add => GgmlOp::Add,
                BinaryOp::Sub => GgmlOp::Sub,
                BinaryOp::Mul => GgmlOp::Mul,
                BinaryOp::Div => GgmlOp::Div,
            };
            (op, src)
        }
        Op::Scale { scale, bias } => {
            params[0] = f(*scale);
            params[1] = f(*bias);
            (GgmlOp::Scale, src)
        }
        Op::Unary(UnaryOp::Sqr) => (GgmlOp::Sqr, src),
        Op::Unary(UnaryOp::Sqrt) => (GgmlOp::Sqrt, src),
        Op::Unary(u) => {
            params[0] = table.unary(*u)?;
            (GgmlOp::Unary, src)
        }
        Op::Glu { op, swapped } => {
            params[0] = table.glu(*op)?;
            params[1] = *swapped as i32;
            if let GluOp::SwigluOai { alpha, limit } = op {
                params[2] = f(*alpha);
                params[3] = f(*limit);
            }
            (GgmlOp::Glu, src)
        }
        Op::AddId => (GgmlOp::AddId, src),
        Op::MulMat => (GgmlOp::MulMat, src),
        Op::MulMatId => (GgmlOp::MulMatId, src),
        Op::RmsNorm { eps } => {
            params[0] = f(*eps);
            (GgmlOp::RmsNorm, src)
        }
        Op::Norm { eps } => {
            params[0] = f(*eps);
            (GgmlOp::Norm, src)
        }
        Op::Rope(p) => {
            params[1] = p.n_dims as i32;
            params[2] = p.mode.ggml_mode();
            params[4] = p.n_ctx_orig as i32;
            params[5] = f(p.freq_base);
            params[6] = f(p.freq_scale);
            params[7] = f(p.ext_factor);
            params[8] = f(p.attn_factor);
            params[9] = f(p.beta_fast);
            params[10] = f(p.beta_slow);
            (GgmlOp::Rope, src)
        }
        Op::SoftMax {
            scale, max_bias, ..
        } => {
            params[0] = f(*scale);
            params[1] = f(*max_bias);
            (GgmlOp::SoftMax, vec![src[0], mask, sinks])
        }
        Op::Cpy => (GgmlOp::Cpy, src),
        Op::Cont if graph.tensor(*t.src.first()?).dtype == t.dtype => (GgmlOp::Cont, src),
        Op::Cont => {
            self_as_src1 = true;
            (GgmlOp::Cpy, src)
        }
        // ggraph: (destination, values, indices); ggml: (values, indices,
        // destination), the result a view of the destination
        Op::SetRows => match src[..] {
            [dst, values, idx] => (GgmlOp::SetRows, vec![values, idx, dst]),
            _ => return None,
        },
        Op::Concat { dim } => {
            params[0] = *dim as i32;
            (GgmlOp::Concat, src)
        }
        Op::SumRows => (GgmlOp::SumRows, src),
        Op::ArgSort { order } => {
            params[0] = match order {
                SortOrder::Ascending => 0,
                SortOrder::Descending => 1,
            };
            (GgmlOp::ArgSort, src)
        }
        Op::TopK { .. } => (GgmlOp::TopK, src),
        Op::SsmConv => (GgmlOp::SsmConv, src),
        // one state snapshot (ggml's K)
        Op::SsmScan => {
            params[0] = 1;
            (GgmlOp::SsmScan, src)
        }
        // one state snapshot (ggml's K)
        Op::GatedDeltaNet => {
            params[0] = 1;
            (GgmlOp::GatedDeltaNet, src)
        }
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
            ..
        } => {
            params[0] = f(*scale);
            params[1] = f(*max_bias);
            params[2] = f(*softcap);
            params[3] = PREC_F32;
            (
                GgmlOp::FlashAttnExt,
                vec![src[0], src[1], src[2], mask, sinks],
            )
        }
    };
    Some(Encoded {
        op: table.op(op)?,
        params,
        srcs,
        self_as_src1,
    })
}
