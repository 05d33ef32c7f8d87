//! What the CPU kernels compute: every op the builder accepts, in every
//! type combination the builder allows. Written out explicitly so that a
//! new op or type is refused until a kernel exists for it.

use ggraph_core::DType;
use ggraph_core::ir::{Graph, Op, TensorId};

pub fn cpu_supports(graph: &Graph, node: TensorId) -> bool {
    let t = graph.tensor(node);
    let src = |i: usize| graph.tensor(t.src[i]).dtype;
    let float = |d: DType| d.is_float();
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => true,
        Op::GetRows => src(1) == DType::I32,
        Op::Binary(_) => float(src(0)) && float(src(1)) && float(t.dtype),
        Op::Scale { .. } | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows => {
            float(src(0))
        }
        Op::Glu { .. } => t.src.iter().all(|s| float(graph.tensor(*s).dtype)),
        Op::MulMat => src(0) != DType::I32 && float(src(1)),
        Op::MulMatId => src(0) != DType::I32 && float(src(1)) && src(2) == DType::I32,
        Op::Rope(_) => float(src(0)) && src(1) == DType::I32,
        Op::SoftMax { .. } => float(src(0)),
        Op::Cpy | Op::Cont | Op::SetRows | Op::Concat { .. } => true,
        Op::ArgSort { .. } | Op::TopK { .. } => float(src(0)),
        Op::FlashAttnExt { .. } => true,
        Op::AddId => true,
        Op::SsmConv | Op::SsmScan | Op::GatedDeltaNet => true,
    }
}
