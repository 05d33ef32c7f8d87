//! Memory a tensor can live in: the `Buffer` trait every backend's
//! allocations implement, and aligned host memory.
//!
//! This is the lowest layer of the boundary: the graph IR points into
//! buffers, so buffers know nothing of graphs, devices or streams.

mod buffer;
mod host_memory;

pub use buffer::{Buffer, BufferUsage, check_range, copy_between};
pub use host_memory::{HOST_ALIGNMENT, HUGE_PAGE_BYTES, HostMemory};
