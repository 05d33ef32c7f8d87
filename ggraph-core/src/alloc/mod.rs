//! Memory: planning offsets ([`DynAllocator`]), planning and owning the
//! compute memory of graphs ([`GraphAllocator`]), packing weights into few
//! buffers, matrices split by rows over devices ([`RowSplitBufferType`]),
//! and helpers for accounting and dry runs.

mod counting;
mod dyn_alloc;
mod graph_alloc;
mod liveness;
mod row_split;
mod strategy;
mod virtual_buffer;
mod weights;

pub use counting::CountingBufferType;
pub use dyn_alloc::{Addr, DynAllocator, MAX_CHUNKS};
pub use graph_alloc::{AllocStats, Assign, GraphAllocator, Plan, Slot, plan_graph};
pub use liveness::{Block, Liveness, liveness};
pub use row_split::{
    ROW_SPLIT, RowPart, RowSplitBuffer, RowSplitBufferType, normalise_shares, split_rows,
};
pub use strategy::Strategy;
pub use virtual_buffer::{VirtualBuffer, VirtualBufferType};
pub use weights::{
    PackPlan, PackedWeights, bind_graph_weights, bind_graph_weights_by, pack_weights, plan_packing,
};
