//! What the GPU kernels compute, written out per op so that a new op or
//! type is refused until a kernel exists for it.

use ggraph_core::DType;
use ggraph_core::ir::{Graph, Op, TensorId};

/// Longest row argsort and top_k sort in shared memory.
pub const MAX_SORT_ROW: usize = 4096;
/// Largest head size of flash_attn_ext (32 lanes x 16 values).
pub const MAX_FA_HEAD: usize = 512;
/// Largest grid dimension y and z.
pub const MAX_GRID_YZ: usize = 65535;

pub fn gpu_supports(graph: &Graph, node: TensorId) -> bool {
    let t = graph.tensor(node);
    let src = |i: usize| graph.tensor(t.src[i]);
    let float = |d: DType| d.is_float();
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => true,
        Op::GetRows => src(1).dtype == DType::I32,
        Op::Binary(_) => float(src(0).dtype) && float(src(1).dtype) && float(t.dtype),
        Op::Scale { .. } | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows => {
            float(src(0).dtype) && float(t.dtype)
        }
        Op::Glu { .. } => t.src.iter().all(|s| float(graph.tensor(*s).dtype)) && float(t.dtype),
        Op::MulMat => {
            src(0).dtype != DType::I32
                && float(src(1).dtype)
                && t.ne[2] * t.ne[3] <= MAX_GRID_YZ
                && t.ne[1].div_ceil(64) <= MAX_GRID_YZ
        }
        Op::MulMatId => {
            src(0).dtype != DType::I32
                && float(src(1).dtype)
                && src(2).dtype == DType::I32
                && t.ne[1] <= MAX_GRID_YZ
                && t.ne[2] <= MAX_GRID_YZ
        }
        Op::Rope(p) => float(src(0).dtype) && src(1).dtype == DType::I32 && p.n_dims % 2 == 0,
        Op::SoftMax { .. } => float(src(0).dtype),
        Op::Cpy | Op::Cont | Op::SetRows | Op::Concat { .. } => true,
        Op::ArgSort { .. } | Op::TopK { .. } => float(src(0).dtype) && src(0).ne[0] <= MAX_SORT_ROW,
        Op::FlashAttnExt { .. } => {
            src(0).ne[0] <= MAX_FA_HEAD
                && src(2).ne[0] <= MAX_FA_HEAD
                && t.ne[1] <= MAX_GRID_YZ
                && t.ne[3] <= MAX_GRID_YZ
        }
    }
}
