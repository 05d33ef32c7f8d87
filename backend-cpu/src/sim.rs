//! Simulated devices: CPU-computed stand-ins for discrete GPUs, for testing
//! placement, splits and multi-device runs on any machine.
//!
//! A simulated device (`sim:N`) is NOT real hardware. It behaves like a
//! discrete GPU where placement is concerned: it has a declared memory size,
//! its memory is not host-accessible (its kernels refuse host buffers and
//! host code can reach its data only through buffer reads, writes and
//! copies), and allocations beyond its declared size fail with an
//! out-of-memory error. It computes with the CPU kernels.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use ggraph_core::backend::{
    Buffer, BufferType, BufferUsage, Device, DeviceCaps, DeviceKind, DevicePerf, HostMemory,
    MemoryInfo, MemorySource, Stream,
};
use ggraph_core::ir::{Graph, OpKind, TensorId};
use ggraph_core::{Error, Result};

use crate::stream::{CpuStream, MemoryAccess};
use crate::supports::cpu_supports;
use crate::team::Team;

/// What a simulated device declares about itself.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Declared memory; allocations beyond it fail.
    pub memory_bytes: u64,
    /// Largest single buffer (defaults to the memory size).
    pub max_buffer_bytes: Option<u64>,
    /// Declared speeds, for cost models and experiments.
    pub perf: DevicePerf,
    /// Ops this device claims not to support, to exercise fallbacks.
    pub unsupported_ops: Vec<OpKind>,
    /// Batch size from which the default op-offload rule offloads.
    pub offload_min_batch: usize,
}

impl SimConfig {
    /// A simulated GPU with `memory_bytes` of memory and PCIe-4-like
    /// figures.
    pub fn gpu(memory_bytes: u64) -> SimConfig {
        SimConfig {
            memory_bytes,
            max_buffer_bytes: None,
            perf: DevicePerf {
                link_bytes_per_s: 25e9,
                flops_per_s: 20e12,
                mem_bytes_per_s: 900e9,
            },
            unsupported_ops: Vec::new(),
            offload_min_batch: ggraph_core::backend::DEFAULT_OFFLOAD_MIN_BATCH,
        }
    }

    /// Declares `ops` unsupported, replacing any earlier list: the device's
    /// `supports_op` refuses them, so the scheduler must place them
    /// elsewhere.
    pub fn unsupported(mut self, ops: &[OpKind]) -> SimConfig {
        self.unsupported_ops = ops.to_vec();
        self
    }

    /// Caps one buffer at `bytes`: a larger allocation fails with
    /// `Error::OutOfMemory` even when the device has the memory free.
    pub fn max_buffer(mut self, bytes: u64) -> SimConfig {
        self.max_buffer_bytes = Some(bytes);
        self
    }

    /// Replaces the declared speeds, which the device reports through
    /// `Device::perf`; nothing runs faster or slower for it.
    pub fn perf(mut self, perf: DevicePerf) -> SimConfig {
        self.perf = perf;
        self
    }
}

/// A simulated discrete GPU named `sim:N`.
pub struct SimDevice {
    me: Weak<SimDevice>,
    name: String,
    config: SimConfig,
    buffer_type: Arc<SimBufferType>,
}

impl SimDevice {
    /// The device `sim:{index}`, with nothing allocated. Give each device
    /// of a process its own index: its kernels recognise their buffers by
    /// the device's name.
    pub fn new(index: usize, config: SimConfig) -> Arc<SimDevice> {
        let name = format!("sim:{index}");
        let buffer_type = Arc::new(SimBufferType {
            name: name.clone(),
            capacity: config.memory_bytes,
            max_size: config
                .max_buffer_bytes
                .unwrap_or(config.memory_bytes)
                .max(1),
            allocated: Arc::new(AtomicU64::new(0)),
        });
        Arc::new_cyclic(|me| SimDevice {
            me: me.clone(),
            name,
            config,
            buffer_type,
        })
    }

    /// What the device declares, as given to [`SimDevice::new`].
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Bytes currently allocated on the device.
    pub fn allocated_bytes(&self) -> u64 {
        self.buffer_type.allocated.load(Ordering::Relaxed)
    }
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        format!(
            "simulated GPU (not real hardware; CPU-computed), {} declared",
            ggraph_core::util::format_bytes(self.config.memory_bytes)
        )
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }

    fn memory(&self) -> MemoryInfo {
        MemoryInfo {
            free_bytes: self
                .config
                .memory_bytes
                .saturating_sub(self.allocated_bytes()),
            total_bytes: self.config.memory_bytes,
            source: MemorySource::DeclaredBudget,
        }
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buffer_type.clone()
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }

    fn perf(&self) -> Option<DevicePerf> {
        Some(self.config.perf)
    }

    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        let kind = graph.tensor(node).op.kind();
        !self.config.unsupported_ops.contains(&kind) && cpu_supports(graph, node)
    }

    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        ggraph_core::backend::batch_offload_rule(graph, node, self.config.offload_min_batch)
    }

    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        let me: Arc<dyn Device> = self
            .me
            .upgrade()
            .ok_or_else(|| Error::backend(&self.name, "device dropped"))?;
        Ok(Box::new(CpuStream::new(
            me,
            Team::shared(),
            Box::new(SimAccess {
                device: self.name.clone(),
            }),
        )))
    }
}

/// A simulated device's kernels reach its own buffers only, as a discrete
/// GPU's would.
struct SimAccess {
    device: String,
}

impl MemoryAccess for SimAccess {
    fn address(&self, buffer: &dyn Buffer) -> Option<*mut u8> {
        buffer
            .as_any()
            .downcast_ref::<SimBuffer>()
            .filter(|b| b.device == self.device)
            .map(|b| b.device_ptr())
    }
}

/// The memory of a simulated device.
pub struct SimBufferType {
    name: String,
    capacity: u64,
    max_size: u64,
    allocated: Arc<AtomicU64>,
}

impl BufferType for SimBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alignment(&self) -> u64 {
        256
    }

    fn max_size(&self) -> u64 {
        self.max_size
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        // reserve the bytes first, so concurrent allocations cannot both pass
        let prev = self.allocated.fetch_add(size, Ordering::SeqCst);
        if prev + size > self.capacity || size > self.max_size {
            self.allocated.fetch_sub(size, Ordering::SeqCst);
            return Err(Error::OutOfMemory {
                buffer_type: self.name.clone(),
                requested_bytes: size,
                available_bytes: self.capacity.saturating_sub(prev).min(self.max_size),
            });
        }
        match HostMemory::for_usage(size, &self.name, usage) {
            Ok(memory) => Ok(Arc::new(SimBuffer {
                device: self.name.clone(),
                memory,
                usage,
                allocated: self.allocated.clone(),
            })),
            Err(e) => {
                self.allocated.fetch_sub(size, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One allocation on a simulated device.
pub struct SimBuffer {
    device: String,
    memory: HostMemory,
    usage: BufferUsage,
    allocated: Arc<AtomicU64>,
}

impl SimBuffer {
    /// The backing memory, for the device's own kernels only.
    fn device_ptr(&self) -> *mut u8 {
        self.memory.as_ptr()
    }
}

impl Drop for SimBuffer {
    fn drop(&mut self) {
        self.allocated
            .fetch_sub(self.memory.len() as u64, Ordering::SeqCst);
    }
}

impl Buffer for SimBuffer {
    fn buffer_type_name(&self) -> &str {
        &self.device
    }

    fn size(&self) -> u64 {
        self.memory.len() as u64
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.memory.write(offset, data)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.memory.read(offset, out)
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.memory.fill(offset, len, value)
    }

    /// Device-local copies only; anything else is staged by the caller.
    fn copy_from(
        &self,
        dst_offset: u64,
        src: &dyn Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<bool> {
        match src.as_any().downcast_ref::<SimBuffer>() {
            Some(s) if s.device == self.device => {
                self.memory
                    .copy_from(dst_offset, &s.memory, src_offset, len)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
