//! Device memory: the buffer type of a wgpu device and its buffers.
//!
//! A ggraph buffer is one wgpu storage buffer. wgpu copies work in whole
//! 4-byte words, so reads and writes at other offsets move the enclosing
//! words (read-modify-write at the edges). Reads wait for this device's
//! queue only; other devices keep running.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ggraph_core::backend::{Buffer, BufferType, BufferUsage, check_range};
use ggraph_core::ir::Tensor;
use ggraph_core::{Error, Result};

use crate::gpu::Gpu;

/// Largest piece one write or read stages at a time.
const STAGING_CHUNK: u64 = 32 << 20;

fn align4(x: u64) -> u64 {
    x.div_ceil(4) * 4
}

/// The memory of one wgpu device. Its name is the device's (`wgpu:N`),
/// unique in the process.
pub struct WgpuBufferType {
    gpu: Arc<Gpu>,
}

impl WgpuBufferType {
    pub(crate) fn new(gpu: Arc<Gpu>) -> WgpuBufferType {
        WgpuBufferType { gpu }
    }
}

impl BufferType for WgpuBufferType {
    fn name(&self) -> &str {
        &self.gpu.name
    }

    /// The adapter's storage-binding offset alignment (at least 16 bytes),
    /// so that a tensor can be bound where it starts.
    fn alignment(&self) -> u64 {
        self.gpu.storage_align()
    }

    fn max_size(&self) -> u64 {
        // wgpu buffers are allocated in whole words
        self.gpu.limits.max_buffer_size / 4 * 4
    }

    /// Tensors take whole 4-byte words.
    fn alloc_size(&self, tensor: &Tensor) -> u64 {
        align4(tensor.nbytes() as u64)
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(WgpuBuffer::new(self.gpu.clone(), size, usage)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One wgpu storage buffer.
pub struct WgpuBuffer {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) raw: wgpu::Buffer,
    size: u64,
    usage: BufferUsage,
}

impl WgpuBuffer {
    pub(crate) fn new(gpu: Arc<Gpu>, size: u64, usage: BufferUsage) -> Result<WgpuBuffer> {
        let raw_size = align4(size.max(4));
        let oom = |available: u64| Error::OutOfMemory {
            buffer_type: gpu.name.clone(),
            requested_bytes: size,
            available_bytes: available,
        };
        let max = gpu.limits.max_buffer_size;
        if raw_size > max {
            return Err(oom(max));
        }
        if let Some(limit) = gpu.budget.enforced_limit() {
            let used = gpu.allocated.load(Ordering::Relaxed);
            if used.saturating_add(raw_size) > limit {
                return Err(oom(limit.saturating_sub(used)));
            }
        }
        let raw = gpu
            .scoped("allocating a buffer", || {
                gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: raw_size,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .map_err(|_| oom(0))?;
        gpu.allocated.fetch_add(raw_size, Ordering::Relaxed);
        Ok(WgpuBuffer {
            gpu,
            raw,
            size,
            usage,
        })
    }

    /// The device this buffer belongs to.
    pub fn device_name(&self) -> &str {
        &self.gpu.name
    }

    pub(crate) fn same_device(&self, gpu: &Arc<Gpu>) -> bool {
        Arc::ptr_eq(&self.gpu, gpu)
    }

    /// Bytes the wgpu buffer really has (whole words).
    pub(crate) fn raw_size(&self) -> u64 {
        self.raw.size()
    }

    /// Reads whole words `offset..offset + len` (both multiples of 4).
    fn read_words(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let gpu = &self.gpu;
        let mut done = 0u64;
        let len = out.len() as u64;
        while done < len {
            let n = (len - done).min(STAGING_CHUNK);
            let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("ggraph readback"),
                size: n,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            enc.copy_buffer_to_buffer(&self.raw, offset + done, &staging, 0, n);
            let index = gpu.queue.submit([enc.finish()]);
            gpu.map_for_read(&staging, index)?;
            {
                let view = staging
                    .get_mapped_range(..)
                    .map_err(|e| Error::backend(&gpu.name, format!("reading back: {e}")))?;
                out[done as usize..(done + n) as usize].copy_from_slice(&view);
            }
            staging.unmap();
            done += n;
        }
        Ok(())
    }

    /// Queues a write of whole words (offset and length multiples of 4).
    fn write_words(&self, offset: u64, data: &[u8]) {
        for (i, chunk) in data.chunks(STAGING_CHUNK as usize).enumerate() {
            self.gpu
                .queue
                .write_buffer(&self.raw, offset + i as u64 * STAGING_CHUNK, chunk);
        }
    }

    /// Writes bytes at any offset: the words at unaligned edges are read
    /// first and merged.
    fn write_any(&self, offset: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let start = offset / 4 * 4;
        let end = align4(offset + len);
        if start == offset && end == offset + len {
            self.write_words(offset, data);
            return self.gpu.take_errors();
        }
        let mut words = vec![0u8; (end - start) as usize];
        // the first and last words keep their bytes outside the range
        self.read_words(start, &mut words[..4])?;
        if end - start > 4 {
            let last = words.len() - 4;
            self.read_words(end - 4, &mut words[last..])?;
        }
        let at = (offset - start) as usize;
        words[at..at + data.len()].copy_from_slice(data);
        self.write_words(start, &words);
        self.gpu.take_errors()
    }

    /// Queues a device-side copy from `src` (a buffer of the same device).
    fn copy_on_device(&self, dst_offset: u64, src: &WgpuBuffer, src_offset: u64, len: u64) {
        let gpu = &self.gpu;
        let mut enc = gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        if src.raw == self.raw {
            // wgpu copies never read and write one buffer: go through a temporary
            let tmp = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("ggraph copy"),
                size: len,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            enc.copy_buffer_to_buffer(&src.raw, src_offset, &tmp, 0, len);
            enc.copy_buffer_to_buffer(&tmp, 0, &self.raw, dst_offset, len);
        } else {
            enc.copy_buffer_to_buffer(&src.raw, src_offset, &self.raw, dst_offset, len);
        }
        gpu.queue.submit([enc.finish()]);
    }

    /// Copies from any buffer into this one, queued on this device where
    /// the source allows; `Ok(false)` when the caller must stage through
    /// host memory (another device's buffer, or unaligned ranges between
    /// device buffers).
    pub(crate) fn copy_in(
        &self,
        dst_offset: u64,
        src: &dyn Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<bool> {
        check_range("copy source", src_offset, len, src.size())?;
        check_range("copy destination", dst_offset, len, self.size)?;
        if len == 0 {
            return Ok(true);
        }
        if let Some(s) = src.as_any().downcast_ref::<WgpuBuffer>() {
            let aligned = dst_offset % 4 == 0 && src_offset % 4 == 0 && len % 4 == 0;
            if s.same_device(&self.gpu) && aligned {
                self.copy_on_device(dst_offset, s, src_offset, len);
                self.gpu.take_errors()?;
                return Ok(true);
            }
            return Ok(false);
        }
        if let Some(ptr) = src.host_ptr() {
            // SAFETY: host buffers expose `size()` bytes at `host_ptr()`, and
            // the range was checked against the source's size above.
            let bytes = unsafe {
                std::slice::from_raw_parts(ptr.add(src_offset as usize) as *const u8, len as usize)
            };
            self.write_any(dst_offset, bytes)?;
            return Ok(true);
        }
        Ok(false)
    }
}

impl Drop for WgpuBuffer {
    fn drop(&mut self) {
        self.gpu
            .allocated
            .fetch_sub(self.raw.size(), Ordering::Relaxed);
    }
}

impl Buffer for WgpuBuffer {
    fn buffer_type_name(&self) -> &str {
        &self.gpu.name
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range("write", offset, data.len() as u64, self.size)?;
        self.write_any(offset, data)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_range("read", offset, out.len() as u64, self.size)?;
        if out.is_empty() {
            return Ok(());
        }
        let start = offset / 4 * 4;
        let end = align4(offset + out.len() as u64);
        if start == offset && end == offset + out.len() as u64 {
            return self.read_words(offset, out);
        }
        let mut words = vec![0u8; (end - start) as usize];
        self.read_words(start, &mut words)?;
        let at = (offset - start) as usize;
        out.copy_from_slice(&words[at..at + out.len()]);
        Ok(())
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        check_range("fill", offset, len, self.size)?;
        if len == 0 {
            return Ok(());
        }
        if value == 0 && offset % 4 == 0 && len % 4 == 0 {
            let mut enc = self
                .gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            enc.clear_buffer(&self.raw, offset, Some(len));
            self.gpu.queue.submit([enc.finish()]);
            return self.gpu.take_errors();
        }
        let chunk = vec![value; len.min(STAGING_CHUNK) as usize];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(STAGING_CHUNK);
            self.write_any(offset + done, &chunk[..n as usize])?;
            done += n;
        }
        Ok(())
    }

    /// Device-side copies from buffers of the same device, and direct
    /// uploads from host buffers.
    fn copy_from(
        &self,
        dst_offset: u64,
        src: &dyn Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<bool> {
        self.copy_in(dst_offset, src, src_offset, len)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
