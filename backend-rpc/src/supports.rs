//! What a server computes exactly as ggraph defines it. The protocol has
//! no way to ask, and a server dies on an op its backend asserts
//! against, so the answer is ggml's CPU backend's rules (what the stock
//! server runs without a GPU), narrowed to where its results follow
//! ggraph's definitions.

use ggraph_core::DType;
use ggraph_core::ir::{GluOp, Graph, Op, TensorId};

use crate::encode::encode;
use crate::op_table::OpTable;

/// Whether a server of this version computes `node` as ggraph defines it.
pub(crate) fn supports(table: &OpTable, graph: &Graph, node: TensorId) -> bool {
    let t = graph.tensor(node);
    if encode(table, graph, node).is_none() {
        return false;
    }
    // shapes and strides are u32 on the wire
    let fits = |id: TensorId| {
        let s = graph.tensor(id);
        s.ne.iter().chain(&s.nb).all(|&v| v <= u32::MAX as usize) && s.nbytes() <= u32::MAX as usize
    };
    if !fits(node) || !t.src.iter().all(|&s| fits(s)) {
        return false;
    }
    let src = |i: usize| t.src.get(i).map(|&s| graph.tensor(s));
    let dtype = |i: usize| src(i).map(|s| s.dtype);
    let packed_rows = |i: usize| src(i).is_some_and(|s| s.has_contiguous_rows());
    let contiguous = |i: usize| src(i).is_some_and(|s| s.is_contiguous());
    let f32_in_out = dtype(0) == Some(DType::F32) && t.dtype == DType::F32;
    let float = |d: Option<DType>| d.is_some_and(|d| DType::FLOATS.contains(&d));
    // one source and the result, both contiguous, of one type
    let same_contiguous =
        |i: usize| dtype(i) == Some(t.dtype) && contiguous(i) && t.is_contiguous();
    match &t.op {
        Op::Leaf | Op::Transfer | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => true,
        Op::GetRows => packed_rows(0) && dtype(1) == Some(DType::I32),
        // the pairs ggml's CPU binary ops take; F32 with F16 aborts it
        Op::Binary(_) => {
            let pair_ok = matches!(
                (dtype(0), dtype(1)),
                (
                    Some(DType::F32 | DType::F16 | DType::BF16),
                    Some(DType::F32)
                ) | (Some(DType::F16), Some(DType::F16))
            );
            pair_ok && dtype(0) == Some(t.dtype) && packed_rows(0) && packed_rows(1)
        }
        // F16 scale aborts the server; F16 norms and sums too
        Op::Scale { .. } => {
            matches!(dtype(0), Some(DType::F32 | DType::BF16)) && same_contiguous(0)
        }
        Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows | Op::ArgSort { .. } => {
            dtype(0) == Some(DType::F32) && same_contiguous(0)
        }
        // on strided rows ggml's unary ops read the wrong elements
        Op::Unary(_) => float(dtype(0)) && same_contiguous(0),
        // ggml's CPU swiglu_oai reads F32 only
        Op::Glu {
            op: GluOp::SwigluOai { .. },
            ..
        } => {
            dtype(0) == Some(DType::F32)
                && same_contiguous(0)
                && (t.src.len() == 1 || (dtype(1) == dtype(0) && contiguous(1)))
        }
        Op::Glu { .. } => {
            matches!(dtype(0), Some(DType::F32 | DType::F16))
                && same_contiguous(0)
                && (t.src.len() == 1 || (dtype(1) == dtype(0) && contiguous(1)))
        }
        // ggml's CPU top-k gives the k indices in no particular order
        Op::TopK { k } => *k == 1 && dtype(0) == Some(DType::F32) && contiguous(0),
        Op::MulMat | Op::MulMatId => {
            packed_rows(0)
                && matches!(
                    (dtype(0), dtype(1)),
                    (Some(_), Some(DType::F32))
                        | (Some(DType::F32), Some(DType::F16 | DType::BF16))
                        | (Some(DType::F16), Some(DType::F16))
                        | (Some(DType::BF16), Some(DType::BF16))
                )
                && (t.op != Op::MulMatId || dtype(2) == Some(DType::I32))
        }
        Op::Rope(_) => {
            matches!(dtype(0), Some(DType::F32 | DType::F16))
                && t.dtype == dtype(0).unwrap_or(DType::F32)
                && dtype(1) == Some(DType::I32)
                && t.src.get(2).is_none_or(|_| dtype(2) == Some(DType::F32))
        }
        Op::SoftMax { .. } => {
            let mask = t.mask_and_sinks().0.map(|m| graph.tensor(m).dtype);
            f32_in_out && contiguous(0) && mask.is_none_or(|m| float(Some(m)) && m != DType::BF16)
        }
        // ggml's add_id: F32 rows and I32 ids
        Op::AddId => {
            f32_in_out
                && dtype(1) == Some(DType::F32)
                && dtype(2) == Some(DType::I32)
                && packed_rows(0)
                && packed_rows(1)
        }
        Op::Cpy | Op::Cont => {
            let (from, to) = (dtype(0), t.dtype);
            let to_quantized = !DType::FLOATS.contains(&to) && to != DType::I32;
            match from {
                Some(f) if f == to => true,
                Some(f) if float(Some(f)) && DType::FLOATS.contains(&to) => true,
                // quantising rows of F32, and back
                Some(DType::F32) if to_quantized => packed_rows(0),
                Some(f) if to == DType::F32 && !float(Some(f)) && f != DType::I32 => packed_rows(0),
                _ => false,
            }
        }
        Op::SetRows => {
            // ggml's CPU set_rows reads F32 values only
            dtype(1) == Some(DType::F32) && dtype(2) == Some(DType::I32) && packed_rows(1)
        }
        Op::Concat { .. } => dtype(0) == dtype(1) && t.dtype == dtype(0).unwrap_or(t.dtype),
        // ggml's ssm_scan asserts contiguous F32 sources and I32 ids
        Op::SsmScan => {
            (0..6).all(|i| dtype(i) == Some(DType::F32) && contiguous(i))
                && dtype(6) == Some(DType::I32)
        }
        // ggml's gated_delta_net asserts F32 sources, q/k/v with packed
        // rows, the gate, beta and the state contiguous
        Op::GatedDeltaNet => {
            (0..6).all(|i| dtype(i) == Some(DType::F32))
                && (0..3).all(packed_rows)
                && (3..6).all(contiguous)
        }
        // ggml's CPU ssm_conv reads packed F32 rows
        Op::SsmConv => {
            dtype(0) == Some(DType::F32)
                && dtype(1) == Some(DType::F32)
                && contiguous(0)
                && contiguous(1)
        }
        Op::FlashAttnExt { .. } => {
            let mask = t.mask_and_sinks().0.map(|m| graph.tensor(m).dtype);
            dtype(0) == Some(DType::F32)
                && packed_rows(0)
                && packed_rows(1)
                && packed_rows(2)
                && mask.is_none_or(|m| m == DType::F16)
        }
    }
}
