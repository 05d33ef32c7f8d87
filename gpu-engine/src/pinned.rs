//! Page-locked host memory of a GPU family, with a cap on how much is
//! pinned and a fallback to pageable memory.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ggraph_core::Result;
use ggraph_core::backend::{Buffer, BufferType, BufferUsage, HostMemInfo, HostMemory, check_range};

use crate::buffer::GpuBuffer;
use crate::gpu::Gpu;

/// Default cap on pinned host memory: a quarter of the host's memory, so
/// pinning never starves the system.
fn default_pinned_cap() -> u64 {
    if let Some(v) = std::env::var("GGRAPH_PINNED_MAX")
        .ok()
        .and_then(|v| ggraph_core::util::parse_bytes(&v).ok())
    {
        return v;
    }
    HostMemInfo::read().map_or(4 << 30, |h| h.total_bytes) / 4
}

/// Page-locked host memory for fast transfers, up to a cap; past the cap,
/// or when the driver refuses to pin, buffers fall back to ordinary
/// (pageable) host memory and still work, only slower to copy.
pub struct PinnedBufferType {
    gpu: Arc<Gpu>,
    name: String,
    cap_bytes: u64,
    pinned_bytes: Arc<AtomicU64>,
}

impl PinnedBufferType {
    /// The pinned host memory of `gpu`'s family (`CUDA_Host`), up to
    /// [`default_pinned_cap`].
    pub(crate) fn new(gpu: Arc<Gpu>) -> PinnedBufferType {
        PinnedBufferType {
            name: format!("{}_Host", gpu.runtime().info().family),
            gpu,
            cap_bytes: default_pinned_cap(),
            pinned_bytes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Bytes currently pinned through this buffer type.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned_bytes.load(Ordering::Relaxed)
    }

    /// Most bytes pinned at once: by default a quarter of the host's
    /// memory, or `GGRAPH_PINNED_MAX` (e.g. `8GiB`). Allocations past it get
    /// pageable memory.
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    /// The same buffer type with another cap (for tests and tuning).
    pub fn with_cap(&self, cap_bytes: u64) -> PinnedBufferType {
        PinnedBufferType {
            gpu: self.gpu.clone(),
            name: self.name.clone(),
            cap_bytes,
            pinned_bytes: self.pinned_bytes.clone(),
        }
    }
}

impl BufferType for PinnedBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alignment(&self) -> u64 {
        64
    }

    fn is_host(&self) -> bool {
        true
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        let prev = self.pinned_bytes.fetch_add(size, Ordering::SeqCst);
        if prev.saturating_add(size) <= self.cap_bytes {
            match self.gpu.alloc_pinned(size.max(1)) {
                Ok(ptr) => {
                    return Ok(Arc::new(PinnedBuffer {
                        memory: HostStorage::Pinned {
                            gpu: self.gpu.clone(),
                            ptr,
                            counter: self.pinned_bytes.clone(),
                        },
                        name: self.name.clone(),
                        size,
                        usage,
                    }));
                }
                Err(e) => tracing::warn!(
                    "{}: pinning {size} bytes failed ({e}); using pageable memory",
                    self.name
                ),
            }
        } else {
            tracing::debug!(
                "{}: {size} bytes would pass the pinned cap of {} bytes; using pageable memory",
                self.name,
                self.cap_bytes
            );
        }
        self.pinned_bytes.fetch_sub(size, Ordering::SeqCst);
        Ok(Arc::new(PinnedBuffer {
            memory: HostStorage::Pageable(HostMemory::new(size, &self.name)?),
            name: self.name.clone(),
            size,
            usage,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

enum HostStorage {
    Pinned {
        gpu: Arc<Gpu>,
        ptr: *mut u8,
        counter: Arc<AtomicU64>,
    },
    Pageable(HostMemory),
}

/// A host buffer of a GPU family: pinned when it could be.
pub struct PinnedBuffer {
    memory: HostStorage,
    name: String,
    size: u64,
    usage: BufferUsage,
}

// SAFETY: the pinned pointer is owned by this buffer; concurrent access is
// ordered by the scheduler, as for every buffer.
unsafe impl Send for PinnedBuffer {}
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Whether the memory is page-locked (false after a fallback).
    pub fn is_pinned(&self) -> bool {
        matches!(self.memory, HostStorage::Pinned { .. })
    }

    fn ptr(&self) -> *mut u8 {
        match &self.memory {
            HostStorage::Pinned { ptr, .. } => *ptr,
            HostStorage::Pageable(m) => m.as_ptr(),
        }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let HostStorage::Pinned { gpu, ptr, counter } = &self.memory {
            // SAFETY: allocated by this device's alloc_pinned.
            unsafe { gpu.free_pinned(*ptr) };
            counter.fetch_sub(self.size, Ordering::SeqCst);
        }
    }
}

impl Buffer for PinnedBuffer {
    fn buffer_type_name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range("write", offset, data.len() as u64, self.size)?;
        // SAFETY: the range is inside the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr().add(offset as usize),
                data.len(),
            )
        };
        Ok(())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_range("read", offset, out.len() as u64, self.size)?;
        // SAFETY: the range is inside the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr().add(offset as usize),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        check_range("fill", offset, len, self.size)?;
        // SAFETY: the range is inside the allocation.
        unsafe { std::ptr::write_bytes(self.ptr().add(offset as usize), value, len as usize) };
        Ok(())
    }

    fn copy_from(
        &self,
        dst_offset: u64,
        src: &dyn Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<bool> {
        check_range("copy destination", dst_offset, len, self.size)?;
        if src.host_ptr() == Some(self.ptr()) {
            // the same buffer: ranges may overlap, let the caller stage
            return Ok(false);
        }
        // SAFETY: the destination range was checked; `read` checks the source.
        let out = unsafe {
            std::slice::from_raw_parts_mut(self.ptr().add(dst_offset as usize), len as usize)
        };
        if let Some(g) = src.as_any().downcast_ref::<GpuBuffer>() {
            g.read(src_offset, out)?;
            return Ok(true);
        }
        if src.host_ptr().is_some() {
            src.read(src_offset, out)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.ptr())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
