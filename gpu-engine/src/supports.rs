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

/// Whether the kernels decode values of `d` (`load_f`, `deq1`,
/// `dequant_unit` in kernels/ggraph.cu).
fn kernels_read(d: DType) -> bool {
    match d {
        DType::F32 | DType::F16 | DType::BF16 | DType::I32 => true,
        DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::IQ4_NL => true,
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS => true,
        DType::MXFP4 => true,
    }
}

/// Whether the kernels encode values as `d` (`store_scalar`,
/// `quantize_block`): the destinations of cpy, cont and set_rows.
fn kernels_write(d: DType) -> bool {
    match d {
        DType::F32 | DType::F16 | DType::BF16 | DType::I32 => true,
        DType::Q8_0 | DType::Q4_0 | DType::Q4_K | DType::Q6_K => true,
        DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::IQ4_NL => false,
        DType::Q2_K | DType::Q3_K | DType::Q5_K | DType::IQ4_XS | DType::MXFP4 => false,
    }
}

/// Whether the matrix product kernels take weights of type `d`.
fn weight(d: DType) -> bool {
    d != DType::I32 && kernels_read(d)
}

/// Largest d_state ssm_scan takes (`SSM_MAX_STATE` in ggraph.cu).
pub const MAX_SSM_STATE: usize = 256;

/// Largest state size (S) gated_delta_net takes (`DELTA_MAX_STATE` in
/// ggraph.cu).
pub const MAX_DELTA_STATE: usize = 256;

/// Whether the shared kernels compute `node` of `graph`: the
/// `supports_op` of every device of the engine. Refused: types a kernel
/// does not read or write, sort rows longer than [`MAX_SORT_ROW`],
/// attention heads larger than [`MAX_FA_HEAD`], and grids too large to
/// launch.
pub fn gpu_supports(graph: &Graph, node: TensorId) -> bool {
    let t = graph.tensor(node);
    let src = |i: usize| graph.tensor(t.src[i]);
    let float = |d: DType| d.is_float();
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => true,
        Op::GetRows => kernels_read(src(0).dtype) && src(1).dtype == DType::I32,
        Op::Binary(_) => float(src(0).dtype) && float(src(1).dtype) && float(t.dtype),
        Op::Scale { .. } | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows => {
            float(src(0).dtype) && float(t.dtype)
        }
        Op::Glu { .. } => t.src.iter().all(|s| float(graph.tensor(*s).dtype)) && float(t.dtype),
        Op::MulMat => {
            weight(src(0).dtype)
                && float(src(1).dtype)
                && t.ne[2] * t.ne[3] <= MAX_GRID_YZ
                && t.ne[1].div_ceil(64) <= MAX_GRID_YZ
        }
        Op::MulMatId => {
            weight(src(0).dtype)
                && float(src(1).dtype)
                && src(2).dtype == DType::I32
                && t.ne[1] <= MAX_GRID_YZ
                && t.ne[2] <= MAX_GRID_YZ
        }
        Op::Rope(p) => float(src(0).dtype) && src(1).dtype == DType::I32 && p.n_dims % 2 == 0,
        Op::SoftMax { .. } => float(src(0).dtype),
        Op::Cpy | Op::Cont => kernels_read(src(0).dtype) && kernels_write(t.dtype),
        Op::SetRows => kernels_read(src(1).dtype) && kernels_write(t.dtype),
        Op::Concat { .. } => true,
        Op::ArgSort { .. } | Op::TopK { .. } => float(src(0).dtype) && src(0).ne[0] <= MAX_SORT_ROW,
        Op::SsmConv => true,
        // a thread keeps its state row in local memory (ggraph.cu)
        Op::SsmScan => src(0).ne[0] <= MAX_SSM_STATE,
        // a thread keeps a state column in local memory (ggraph.cu)
        Op::GatedDeltaNet => src(2).ne[0] <= MAX_DELTA_STATE,
        Op::AddId => true,
        Op::FlashAttnExt { .. } => {
            src(0).ne[0] <= MAX_FA_HEAD
                && src(2).ne[0] <= MAX_FA_HEAD
                && t.ne[1] <= MAX_GRID_YZ
                && t.ne[3] <= MAX_GRID_YZ
        }
    }
}

#[cfg(test)]
mod tests {
    use ggraph_core::ir::GraphBuilder;

    use super::*;

    #[test]
    fn weights_of_every_type_are_taken_by_the_matrix_products_and_get_rows() {
        for w in DType::FLOATS.into_iter().chain(DType::QUANTIZED) {
            let mut b = GraphBuilder::new();
            let a = b.input("a", w, &[256, 4]).unwrap();
            let x = b.input("x", DType::F32, &[256, 2]).unwrap();
            let idx = b.input("idx", DType::I32, &[2]).unwrap();
            let y = b.mul_mat(a, x).unwrap();
            let r = b.get_rows(a, idx).unwrap();
            let g = b.build();
            assert!(gpu_supports(&g, y), "mul_mat {w}");
            assert!(gpu_supports(&g, r), "get_rows {w}");
        }
    }

    #[test]
    fn copies_into_a_type_the_kernels_cannot_encode_are_refused() {
        for t in DType::QUANTIZED {
            let mut b = GraphBuilder::new();
            let a = b.input("a", DType::F32, &[256, 2]).unwrap();
            let c = b.cast(a, t).unwrap();
            let g = b.build();
            let encodes = matches!(t, DType::Q8_0 | DType::Q4_0 | DType::Q4_K | DType::Q6_K);
            assert_eq!(gpu_supports(&g, c), encodes, "cast F32 -> {t}");
        }
    }
}
