//! A GPU device over any [`Runtime`]: its buffer type (device memory, one
//! driver allocation per buffer: the graph allocator asks for a few large
//! chunks and subdivides them), a pinned host buffer type with a cap and a
//! fallback to pageable memory, and the op-offload rule.

use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use ggraph_core::backend::{
    Backend, Buffer, BufferType, BufferUsage, Device, DeviceCaps, DeviceKind, HostMemory,
    MemoryInfo, MemorySource, batch_offload_rule, check_range,
};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use super::runtime::{DevPtr, Runtime};
use super::stream::GpuStream;
use super::supports::gpu_supports;

/// Alignment of tensors in device memory (as ggml's CUDA backend).
pub const DEVICE_ALIGNMENT: u64 = 256;

/// Default cap on pinned host memory: a quarter of the host's memory, so
/// pinning never starves the system.
fn default_pinned_cap() -> u64 {
    if let Some(v) = std::env::var("GGRAPH_PINNED_MAX")
        .ok()
        .and_then(|v| ggraph_core::util::parse_bytes(&v).ok())
    {
        return v;
    }
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(4 << 30, |kib| kib * 1024);
    total / 4
}

/// A GPU: a runtime device seen through ggraph's traits.
pub struct GpuDevice {
    me: Weak<GpuDevice>,
    rt: Arc<dyn Runtime>,
    name: String,
    buffer_type: Arc<GpuBufferType>,
    host_buffer_type: Arc<PinnedBufferType>,
    offload_min_batch: AtomicUsize,
}

impl GpuDevice {
    /// The device of `rt`, named `<prefix>:<ordinal>` (e.g. `cuda:0`).
    pub fn new(rt: Arc<dyn Runtime>, prefix: &str) -> Arc<GpuDevice> {
        let name = format!("{prefix}:{}", rt.ordinal());
        let min_batch = std::env::var("GGRAPH_OFFLOAD_MIN_BATCH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(ggraph_core::backend::DEFAULT_OFFLOAD_MIN_BATCH);
        Arc::new_cyclic(|me| GpuDevice {
            me: me.clone(),
            buffer_type: Arc::new(GpuBufferType {
                rt: rt.clone(),
                name: name.clone(),
            }),
            host_buffer_type: Arc::new(PinnedBufferType {
                rt: rt.clone(),
                name: format!("{}_Host", rt.family()),
                cap_bytes: default_pinned_cap(),
                pinned_bytes: Arc::new(AtomicU64::new(0)),
            }),
            rt,
            name,
            offload_min_batch: AtomicUsize::new(min_batch),
        })
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.rt
    }

    /// The batch size from which mul_mat and mul_mat_id with weights in
    /// host memory are offloaded here (32 by default, as ggml; also set by
    /// `GGRAPH_OFFLOAD_MIN_BATCH`).
    pub fn offload_min_batch(&self) -> usize {
        self.offload_min_batch.load(Ordering::Relaxed)
    }

    pub fn set_offload_min_batch(&self, n: usize) {
        self.offload_min_batch.store(n, Ordering::Relaxed);
    }

    /// The pinned host buffer type, with its cap.
    pub fn pinned_buffer_type(&self) -> &Arc<PinnedBufferType> {
        &self.host_buffer_type
    }
}

impl Device for GpuDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        let cc = self
            .rt
            .compute_capability()
            .map(|(a, b)| format!(", compute capability {a}.{b}"))
            .unwrap_or_default();
        format!(
            "{} ({} {}{cc})",
            self.rt.device_name(),
            self.rt.family(),
            self.rt.arch()
        )
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }

    /// From the driver; zeros (and a log line) when the query fails.
    fn memory(&self) -> MemoryInfo {
        let (free_bytes, total_bytes) = self.rt.memory().unwrap_or_else(|e| {
            tracing::warn!("{}: memory query failed: {e}", self.name);
            (0, 0)
        });
        MemoryInfo {
            free_bytes,
            total_bytes,
            source: MemorySource::Driver,
        }
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buffer_type.clone()
    }

    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        Some(self.host_buffer_type.clone())
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_copy: true,
            events: true,
            host_buffer: true,
        }
    }

    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        gpu_supports(graph, node)
    }

    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        batch_offload_rule(graph, node, self.offload_min_batch())
    }

    fn new_backend(&self) -> Result<Box<dyn Backend>> {
        let me: Arc<dyn Device> = self
            .me
            .upgrade()
            .ok_or_else(|| Error::backend(&self.name, "device dropped"))?;
        Ok(Box::new(GpuStream::new(self.rt.clone(), me)?))
    }
}

/// Device memory of one GPU.
pub struct GpuBufferType {
    rt: Arc<dyn Runtime>,
    name: String,
}

impl BufferType for GpuBufferType {
    fn name(&self) -> &str {
        &self.name
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
        let ptr = self.rt.alloc(size.max(1))?;
        Ok(Arc::new(GpuBuffer {
            rt: self.rt.clone(),
            name: self.name.clone(),
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
    rt: Arc<dyn Runtime>,
    name: String,
    ptr: DevPtr,
    size: u64,
    usage: BufferUsage,
}

impl GpuBuffer {
    /// Device address of the first byte.
    pub fn device_ptr(&self) -> DevPtr {
        self.ptr
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.rt
    }

    /// Whether this buffer lives on the device of `rt`.
    pub fn is_on(&self, rt: &dyn Runtime) -> bool {
        self.rt.family() == rt.family() && self.rt.ordinal() == rt.ordinal()
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by this runtime in GpuBufferType::alloc; no
        // graph can reach the buffer once its last Arc is gone.
        unsafe { self.rt.free(self.ptr) };
    }
}

impl Buffer for GpuBuffer {
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
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the range is inside this allocation.
        unsafe {
            self.rt
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
            self.rt
                .dtoh(out.as_mut_ptr(), self.ptr + offset, out.len(), None)
        }
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        check_range("fill", offset, len, self.size)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range is inside this allocation.
        unsafe { self.rt.memset(self.ptr + offset, value, len as usize, None) }
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
                if s.is_on(self.rt.as_ref()) {
                    self.rt.dtod(
                        self.ptr + dst_offset,
                        s.ptr + src_offset,
                        len as usize,
                        None,
                    )?;
                    return Ok(true);
                }
                if s.rt.family() == self.rt.family() {
                    return self.rt.peer_copy(
                        self.ptr + dst_offset,
                        s.rt.as_ref(),
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
                self.rt.htod(
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

/// Page-locked host memory for fast transfers, up to a cap; past the cap,
/// or when the driver refuses to pin, buffers fall back to ordinary
/// (pageable) host memory and still work, only slower to copy.
pub struct PinnedBufferType {
    rt: Arc<dyn Runtime>,
    name: String,
    cap_bytes: u64,
    pinned_bytes: Arc<AtomicU64>,
}

impl PinnedBufferType {
    /// Bytes currently pinned through this buffer type.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned_bytes.load(Ordering::Relaxed)
    }

    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    /// The same buffer type with another cap (for tests and tuning).
    pub fn with_cap(&self, cap_bytes: u64) -> PinnedBufferType {
        PinnedBufferType {
            rt: self.rt.clone(),
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
            match self.rt.alloc_pinned(size.max(1)) {
                Ok(ptr) => {
                    return Ok(Arc::new(PinnedBuffer {
                        memory: HostStorage::Pinned {
                            rt: self.rt.clone(),
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
        rt: Arc<dyn Runtime>,
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
        if let HostStorage::Pinned { rt, ptr, counter } = &self.memory {
            // SAFETY: allocated by this runtime's alloc_pinned.
            unsafe { rt.free_pinned(*ptr) };
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
