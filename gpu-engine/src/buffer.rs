//! Device memory of a GPU: its buffer type and buffers, one driver
//! allocation per buffer (the graph allocator asks for a few large chunks
//! and subdivides them).

use std::any::Any;
use std::sync::Arc;

use ggraph_core::Result;
use ggraph_core::backend::{Buffer, BufferType, BufferUsage, check_range};

use crate::gpu::Gpu;
use crate::runtime::{DevPtr, Runtime};

/// Alignment of tensors in device memory (as ggml's CUDA backend).
pub const DEVICE_ALIGNMENT: u64 = 256;

/// Device memory of one GPU.
pub struct GpuBufferType {
    gpu: Arc<Gpu>,
}

impl GpuBufferType {
    pub(crate) fn new(gpu: Arc<Gpu>) -> GpuBufferType {
        GpuBufferType { gpu }
    }
}

impl BufferType for GpuBufferType {
    fn name(&self) -> &str {
        self.gpu.label()
    }

    fn alignment(&self) -> u64 {
        DEVICE_ALIGNMENT
    }

    /// Whatever the device holds: memory is queried for placement, never
    /// used as a per-allocation gate (the driver says when it is full).
    fn max_size(&self) -> u64 {
        u64::MAX
    }

    fn is_host(&self) -> bool {
        false
    }

    /// One driver allocation (`cuMemAlloc` / `hipMalloc`) per call.
    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        let ptr = self.gpu.alloc(size.max(1))?;
        Ok(Arc::new(GpuBuffer {
            gpu: self.gpu.clone(),
            ptr,
            size,
            usage,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One allocation of device memory.
pub struct GpuBuffer {
    gpu: Arc<Gpu>,
    ptr: DevPtr,
    size: u64,
    usage: BufferUsage,
}

impl GpuBuffer {
    /// Device address of the first byte.
    pub fn device_ptr(&self) -> DevPtr {
        self.ptr
    }

    /// The runtime of the device the buffer lives on; its
    /// [`device_ptr`](GpuBuffer::device_ptr) is valid only in that
    /// runtime's calls.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        self.gpu.runtime()
    }

    /// Whether this buffer lives on the device of `rt`.
    pub fn is_on(&self, rt: &dyn Runtime) -> bool {
        self.gpu.is_runtime(rt)
    }

    /// The device the buffer lives on.
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by this runtime in GpuBufferType::alloc; no
        // graph can reach the buffer once its last Arc is gone.
        unsafe { self.gpu.free(self.ptr) };
    }
}

impl Buffer for GpuBuffer {
    fn buffer_type_name(&self) -> &str {
        self.gpu.label()
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range("write", offset, data.len() as u64, self.size)?;
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the range is inside this allocation.
        unsafe {
            self.gpu
                .htod(self.ptr + offset, data.as_ptr(), data.len(), None)
        }
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_range("read", offset, out.len() as u64, self.size)?;
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: the range is inside this allocation.
        unsafe {
            self.gpu
                .dtoh(out.as_mut_ptr(), self.ptr + offset, out.len(), None)
        }
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        check_range("fill", offset, len, self.size)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range is inside this allocation.
        unsafe {
            self.gpu
                .memset(self.ptr + offset, value, len as usize, None)
        }
    }

    /// Device to device on one GPU, peer copies between GPUs of one
    /// runtime, and host memory straight in; anything else is staged by
    /// the caller.
    fn copy_from(
        &self,
        dst_offset: u64,
        src: &dyn Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<bool> {
        check_range("copy destination", dst_offset, len, self.size)?;
        check_range("copy source", src_offset, len, src.size())?;
        if len == 0 {
            return Ok(true);
        }
        if let Some(s) = src.as_any().downcast_ref::<GpuBuffer>() {
            // SAFETY: both ranges were checked against their buffers.
            unsafe {
                if s.gpu.is(&self.gpu) {
                    self.gpu.dtod(
                        self.ptr + dst_offset,
                        s.ptr + src_offset,
                        len as usize,
                        None,
                    )?;
                    return Ok(true);
                }
                if s.gpu.same_family(&self.gpu) {
                    return self.gpu.peer_copy(
                        self.ptr + dst_offset,
                        &s.gpu,
                        s.ptr + src_offset,
                        len as usize,
                        None,
                    );
                }
            }
            return Ok(false);
        }
        if let Some(p) = src.host_ptr() {
            // SAFETY: host memory of `src`, range checked above.
            unsafe {
                self.gpu.htod(
                    self.ptr + dst_offset,
                    p.add(src_offset as usize),
                    len as usize,
                    None,
                )?;
            }
            return Ok(true);
        }
        Ok(false)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
