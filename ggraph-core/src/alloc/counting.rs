//! A buffer type wrapper that counts device allocations and bytes.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::error::Result;
use crate::ir::Tensor;

/// Wraps a buffer type and counts what it allocates; behaves otherwise
/// exactly like the wrapped type (same name, so placement is unchanged).
pub struct CountingBufferType {
    inner: Arc<dyn BufferType>,
    allocations: AtomicU64,
    bytes: AtomicU64,
}

impl CountingBufferType {
    /// Wraps `inner` with both counters at 0.
    pub fn new(inner: Arc<dyn BufferType>) -> Arc<CountingBufferType> {
        Arc::new(CountingBufferType {
            inner,
            allocations: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        })
    }

    /// Device allocations made so far.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }

    /// Bytes allocated so far (freed buffers included).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl BufferType for CountingBufferType {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn alignment(&self) -> u64 {
        self.inner.alignment()
    }

    fn max_size(&self) -> u64 {
        self.inner.max_size()
    }

    fn alloc_size(&self, tensor: &Tensor) -> u64 {
        self.inner.alloc_size(tensor)
    }

    fn lays_out(&self, dtype: crate::dtype::DType, shape: &[usize]) -> bool {
        self.inner.lays_out(dtype, shape)
    }

    fn is_host(&self) -> bool {
        self.inner.is_host()
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        let b = self.inner.alloc(size, usage)?;
        self.allocations.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(size, Ordering::Relaxed);
        Ok(b)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
