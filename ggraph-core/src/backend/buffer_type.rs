//! Buffer types: the unit of placement. A device says which buffer types
//! it computes on, and tensors live in buffers of some type.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::Tensor;
use crate::memory::{Buffer, BufferUsage};

/// A kind of memory a tensor can live in.
pub trait BufferType: Send + Sync {
    /// Unique name; buffer types are compared by name.
    fn name(&self) -> &str;

    /// Alignment of tensor addresses in bytes.
    fn alignment(&self) -> u64;

    /// Largest single buffer, in bytes.
    fn max_size(&self) -> u64 {
        u64::MAX
    }

    /// Bytes a tensor takes in this memory (may include padding).
    fn alloc_size(&self, tensor: &Tensor) -> u64 {
        tensor.nbytes() as u64
    }

    /// Whether this is a layout buffer type that keeps a weight of `dtype`
    /// and `shape` (ggml's order, `shape[0]` the row length) in its own
    /// layout: see [`Device::layout_buffer_types`](super::Device::layout_buffer_types).
    /// Plain memory answers `false`.
    fn lays_out(&self, _dtype: DType, _shape: &[usize]) -> bool {
        false
    }

    /// Whether the CPU can address this memory directly.
    fn is_host(&self) -> bool;

    /// Allocates one buffer of `size` bytes. Fails with
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the device
    /// cannot provide it.
    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>>;

    /// `self`, for a backend to downcast to its own buffer type.
    fn as_any(&self) -> &dyn Any;
}

impl fmt::Debug for dyn BufferType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufferType({})", self.name())
    }
}
