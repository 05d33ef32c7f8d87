//! WGSL kernels: one module per op family, each generating its shaders and
//! recording its dispatches; [`encode`] picks the module for a node.
//!
//! Every kernel binds a uniform block of parameters (binding 0) and one
//! storage binding per tensor (bindings 1..): the destination first, then
//! the sources. Tensors are bound at an offset that respects the adapter's
//! alignment; the remaining byte offset, the shape and the byte strides of
//! each tensor travel in the parameters (see `args`), so one pipeline
//! serves every layout: views, broadcasts and permutations included.
//!
//! Layers inside: `wgsl` (shader text helpers), `quantize` and `args`
//! (parameters and bindings) at the bottom, then `pipeline` (building) and
//! `recorder` (submitting), then the op modules, then this file.

mod args;
mod attention;
mod copy;
mod delta_net;
mod elementwise;
mod matmul;
mod norm;
mod pipeline;
mod quantize;
mod recorder;
mod rope;
mod sort;
mod ssm;
pub(crate) use delta_net::MAX_DELTA_STATE;
pub(crate) use ssm::MAX_SSM_STATE;
pub(crate) mod wgsl;

use ggraph_core::ir::{Graph, Op, TensorId};
use ggraph_core::{DType, Result};

pub(crate) use recorder::Recorder;

/// Records the kernels that compute `node`.
pub(crate) fn encode(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let t = graph.tensor(node);
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => Ok(()),
        Op::GetRows => copy::get_rows(rec, graph, node),
        Op::Binary(op) => elementwise::binary(rec, graph, node, *op),
        Op::Scale { scale, bias } => elementwise::scale(rec, graph, node, *scale, *bias),
        Op::Unary(u) => elementwise::unary(rec, graph, node, *u),
        Op::Glu { op, swapped } => elementwise::glu(rec, graph, node, *op, *swapped),
        Op::MulMat => matmul::mul_mat(rec, graph, node),
        Op::MulMatId => matmul::mul_mat_id(rec, graph, node),
        Op::RmsNorm { eps } => norm::rows(rec, graph, node, norm::RowOp::RmsNorm(*eps)),
        Op::Norm { eps } => norm::rows(rec, graph, node, norm::RowOp::Norm(*eps)),
        Op::SumRows => norm::rows(rec, graph, node, norm::RowOp::SumRows),
        Op::SoftMax {
            scale, max_bias, ..
        } => norm::soft_max(rec, graph, node, *scale, *max_bias),
        Op::AddId => elementwise::add_id(rec, graph, node),
        Op::Rope(p) => rope::rope(rec, graph, node, p),
        Op::Cpy | Op::Cont => copy::copy(rec, graph, node),
        Op::SetRows => copy::set_rows(rec, graph, node),
        Op::Concat { dim } => copy::concat(rec, graph, node, *dim),
        Op::ArgSort { order } => sort::argsort(rec, graph, node, Some(*order), None),
        Op::TopK { k } => sort::argsort(rec, graph, node, None, Some(*k)),
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
            ..
        } => attention::flash_attn_ext(rec, graph, node, *scale, *max_bias, *softcap),
        Op::SsmConv => ssm::ssm_conv(rec, graph, node),
        Op::SsmScan => ssm::ssm_scan(rec, graph, node),
        Op::GatedDeltaNet => delta_net::gated_delta_net(rec, graph, node),
    }
}

/// Whether copies and set_rows can write values of `dtype`: a quantised
/// type needs its quantiser on the device.
pub(crate) fn writes(dtype: DType) -> bool {
    !dtype.is_quantized() || quantize::quant_block(dtype).is_some()
}

/// Longest row argsort and top_k take.
pub(crate) fn max_sort_row() -> usize {
    sort::MAX_SORT_ROW
}

/// Largest value dimension flash attention takes.
pub(crate) fn attention_max_dv() -> usize {
    attention::MAX_DV
}
