//! The tensor graph IR: tensors in an arena, ops with ggml's semantics, a
//! checked builder, and DOT export.

mod alibi;
mod builder;
mod dot;
mod graph;
mod op;
mod order;
mod tensor;

pub use alibi::{AlibiBases, alibi_slope};
pub use builder::{GraphBuilder, can_repeat};
pub use dot::NodeStyle;
pub use graph::{Graph, row_index};
pub use op::{BinaryOp, GluOp, Op, OpKind, RopeMode, RopeParams, SortOrder, UnaryOp};
pub use tensor::{
    Flags, MAX_DIMS, Tensor, TensorData, TensorId, ViewOf, contiguous_strides, shape4, span_bytes,
};
