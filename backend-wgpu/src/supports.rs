//! What the wgpu kernels compute. Written out explicitly, so that a new op
//! or type is refused (and the scheduler sends it elsewhere) until a
//! kernel exists for it.

use ggraph_core::DType;
use ggraph_core::ir::{Graph, Op, Tensor, TensorId};

use crate::gpu::Gpu;
use crate::kernels::{attention_max_dv, max_sort_row, writes};

/// Element counts the kernels index with 32-bit integers.
const MAX_ELEMENTS: usize = 1 << 31;

/// Bytes the kernels address a type's elements at: words for 32-bit
/// types, halves for 16-bit ones and for the f16 scales of blocks, bytes
/// for MXFP4's blocks of 17 (read a byte at a time).
fn unit(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::I32 => 4,
        DType::MXFP4 => 1,
        _ => 2,
    }
}

/// Whether a tensor's layout is one the kernels can address: offset and
/// strides in whole units, and counts in 32 bits.
fn addressable(graph: &Graph, t: &Tensor) -> bool {
    let u = unit(t.dtype);
    let offset = t.view.map_or(0, |v| v.offset);
    let _ = graph;
    offset % u == 0
        && (0..4).all(|d| t.ne[d] <= 1 || t.nb[d] % u == 0)
        && t.nelements() < MAX_ELEMENTS
        && t.nbytes() < u32::MAX as usize
}

pub(crate) fn supports(gpu: &Gpu, graph: &Graph, node: TensorId) -> bool {
    let t = graph.tensor(node);
    if t.op.is_noop() {
        return true;
    }
    let src = |i: usize| graph.tensor(t.src[i]);
    let float = |d: DType| d.is_float();
    let max_binding = gpu.max_binding() as usize;
    let align = gpu.storage_align() as usize;
    // every tensor the kernel binds fits one binding, except the weights of
    // mul_mat and the source of get_rows, which are read in windows of rows
    // when they are plain matrices
    let windowed = |i: usize| {
        i == 0
            && matches!(t.op, Op::MulMat | Op::GetRows)
            && src(0).ne[2] == 1
            && src(0).ne[3] == 1
            && src(0).nb[1] + src(0).row_bytes() + align <= max_binding
    };
    let fits = std::iter::once((usize::MAX, t))
        .chain(t.src.iter().enumerate().map(|(i, &s)| (i, graph.tensor(s))))
        .all(|(i, x)| {
            // a tensor is bound from the aligned address below its start
            addressable(graph, x) && (x.nbytes() + align <= max_binding || windowed(i))
        });
    if !fits {
        return false;
    }
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => true,
        Op::GetRows => src(1).dtype == DType::I32,
        Op::Binary(_) => float(src(0).dtype) && float(src(1).dtype) && float(t.dtype),
        Op::Scale { .. } | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows => {
            float(src(0).dtype) && float(t.dtype)
        }
        Op::Glu { .. } => t.src.iter().all(|s| float(graph.tensor(*s).dtype)) && float(t.dtype),
        Op::MulMat => src(0).dtype != DType::I32 && float(src(1).dtype),
        Op::AddId => {
            src(0).dtype == DType::F32 && src(1).dtype == DType::F32 && src(2).dtype == DType::I32
        }
        Op::MulMatId => {
            src(0).dtype != DType::I32 && float(src(1).dtype) && src(2).dtype == DType::I32
        }
        Op::Rope(_) => {
            float(src(0).dtype)
                && src(1).dtype == DType::I32
                && t.src
                    .get(2)
                    .is_none_or(|&f| graph.tensor(f).dtype == DType::F32)
        }
        Op::SoftMax { .. } => {
            float(src(0).dtype)
                && t.src
                    .get(1)
                    .is_none_or(|&m| matches!(graph.tensor(m).dtype, DType::F32 | DType::F16))
        }
        Op::Cpy | Op::Cont => writes(t.dtype) || t.dtype == src(0).dtype,
        Op::SetRows => {
            t.dtype != DType::I32
                && writes(t.dtype)
                && float(src(1).dtype)
                && src(2).dtype == DType::I32
        }
        Op::Concat { .. } => !t.dtype.is_quantized(),
        Op::ArgSort { .. } | Op::TopK { .. } => {
            float(src(0).dtype) && src(0).ne[0] <= max_sort_row()
        }
        Op::FlashAttnExt { .. } => src(2).ne[0] <= attention_max_dv(),
        Op::SsmConv => true,
        Op::SsmScan => src(0).ne[0] <= crate::kernels::MAX_SSM_STATE,
        Op::GatedDeltaNet => src(2).ne[0] <= crate::kernels::MAX_DELTA_STATE,
    }
}
