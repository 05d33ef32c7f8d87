//! Memory a tensor can live in: the `Buffer` trait every backend's
//! allocations implement, aligned host memory, and the host's memory
//! figures.
//!
//! This is the lowest layer of the boundary: the graph IR points into
//! buffers, so buffers know nothing of graphs, devices or streams.

mod buffer;
mod host_meminfo;
mod host_memory;

pub use buffer::{Buffer, BufferUsage, check_range, copy_between};
pub use host_meminfo::{HostMemInfo, HugePages};
pub use host_memory::{HOST_ALIGNMENT, HUGE_PAGE_BYTES, HostMemory};
