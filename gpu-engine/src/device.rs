//! A GPU device over any [`Runtime`]: its device and pinned host buffer
//! types, its streams, and the op-offload rule.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use ggraph_core::backend::{
    BufferType, Device, DeviceCaps, DeviceKind, HostMemInfo, MemoryInfo, MemorySource, Stream,
    batch_offload_rule,
};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::buffer::GpuBufferType;
use crate::gpu::Gpu;
use crate::pinned::PinnedBufferType;
use crate::runtime::Runtime;
use crate::stream::GpuStream;
use crate::supports::gpu_supports;

/// A GPU: a runtime device seen through ggraph's traits.
pub struct GpuDevice {
    me: Weak<GpuDevice>,
    gpu: Arc<Gpu>,
    buffer_type: Arc<GpuBufferType>,
    host_buffer_type: Arc<PinnedBufferType>,
    offload_min_batch: AtomicUsize,
}

impl GpuDevice {
    /// The device of `rt`, named `<prefix>:<ordinal>` (e.g. `cuda:0`).
    pub fn new(rt: Arc<dyn Runtime>, prefix: &str) -> Arc<GpuDevice> {
        let gpu = Arc::new(Gpu::new(rt, prefix));
        let min_batch = std::env::var("GGRAPH_OFFLOAD_MIN_BATCH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(ggraph_core::backend::DEFAULT_OFFLOAD_MIN_BATCH);
        Arc::new_cyclic(|me| GpuDevice {
            me: me.clone(),
            buffer_type: Arc::new(GpuBufferType::new(gpu.clone())),
            host_buffer_type: Arc::new(PinnedBufferType::new(gpu.clone())),
            gpu,
            offload_min_batch: AtomicUsize::new(min_batch),
        })
    }

    /// The runtime the device was created over; downcast it (through
    /// [`Runtime::as_any`]) to reach family-specific calls.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        self.gpu.runtime()
    }

    /// The batch size from which mul_mat and mul_mat_id with weights in
    /// host memory are offloaded here (32 by default, as ggml; also set by
    /// `GGRAPH_OFFLOAD_MIN_BATCH`).
    pub fn offload_min_batch(&self) -> usize {
        self.offload_min_batch.load(Ordering::Relaxed)
    }

    /// Changes [`GpuDevice::offload_min_batch`] for this device; takes
    /// effect for graphs scheduled afterwards. `usize::MAX` never
    /// offloads.
    pub fn set_offload_min_batch(&self, n: usize) {
        self.offload_min_batch.store(n, Ordering::Relaxed);
    }

    /// Bytes of F16 weights a product of quantised weights on the BLAS
    /// library (more than eight columns) converts at a time: the scratch
    /// memory it takes beside the activations (64 MiB by default).
    pub fn dequant_slice_bytes(&self) -> usize {
        self.gpu.dequant_slice_bytes()
    }

    /// Changes [`GpuDevice::dequant_slice_bytes`] for products queued
    /// afterwards; at least one row is converted at a time.
    pub fn set_dequant_slice_bytes(&self, bytes: usize) {
        self.gpu.set_dequant_slice_bytes(bytes);
    }

    /// The pinned host buffer type, with its cap.
    pub fn pinned_buffer_type(&self) -> &Arc<PinnedBufferType> {
        &self.host_buffer_type
    }
}

impl Device for GpuDevice {
    fn name(&self) -> &str {
        self.gpu.label()
    }

    fn description(&self) -> String {
        let info = self.gpu.runtime().info();
        let cc = info
            .compute_capability
            .map(|(a, b)| format!(", compute capability {a}.{b}"))
            .unwrap_or_default();
        format!("{} ({} {}{cc})", info.name, info.family, info.arch)
    }

    fn kind(&self) -> DeviceKind {
        if self.gpu.runtime().info().integrated {
            DeviceKind::IntegratedGpu
        } else {
            DeviceKind::Gpu
        }
    }

    /// From the driver; zeros (and a log line) when the query fails. A
    /// device whose free memory is the host's (`DeviceInfo::free_from_host`)
    /// reports what the host has available, as ggml's CUDA backend does,
    /// and the driver's figure where the host's cannot be read.
    fn memory(&self) -> MemoryInfo {
        let (free_bytes, total_bytes) = self.gpu.memory().unwrap_or_else(|e| {
            tracing::warn!("{}: memory query failed: {e}", self.gpu.label());
            (0, 0)
        });
        let from_host = self.gpu.runtime().info().free_from_host && total_bytes > 0;
        let host = from_host
            .then(HostMemInfo::read)
            .flatten()
            .map(|h| h.shared_device_free_bytes())
            .filter(|&free| free > 0);
        match host {
            Some(free) => MemoryInfo {
                free_bytes: free,
                total_bytes,
                source: MemorySource::HostShared,
            },
            None => MemoryInfo {
                free_bytes,
                total_bytes,
                source: MemorySource::Driver,
            },
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

    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        let me: Arc<dyn Device> = self
            .me
            .upgrade()
            .ok_or_else(|| Error::backend(self.gpu.label(), "device dropped"))?;
        Ok(Box::new(GpuStream::new(self.gpu.clone(), me)?))
    }
}
