//! The backend boundary: devices, buffer types, buffers, streams, events.
//!
//! The buffer type is the unit of placement: a device says which buffer
//! types it computes on, and tensors live in buffers of some type. Required
//! methods are few; optional capabilities have working defaults and are
//! described as data ([`DeviceCaps`]).

mod host_memory;
mod registry;

use std::any::Any;
use std::fmt;
use std::sync::Arc;

pub use host_memory::HostMemory;
pub use registry::{BackendRegistration, Registry};

use crate::error::{Error, Result};
use crate::ir::{Graph, OpKind, Tensor, TensorId};

/// What sort of processor a device is; the scheduler prefers GPU-class
/// devices when it spreads assignments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu,
    Gpu,
    IntegratedGpu,
    Accelerator,
}

impl DeviceKind {
    /// GPU-class: a discrete or integrated GPU or an accelerator.
    pub fn is_gpu_class(self) -> bool {
        !matches!(self, DeviceKind::Cpu)
    }
}

/// Free and total memory of a device, in bytes, and where the figure came
/// from (a driver query, a declared budget, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub source: MemorySource,
}

/// How a device knows its memory figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemorySource {
    /// The driver reported them (cuMemGetInfo, hipMemGetInfo, sysinfo).
    Driver,
    /// A declared budget minus what ggraph allocated on the device.
    DeclaredBudget,
}

/// Optional capabilities, as data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Copies can be queued on a stream and overlap compute.
    pub async_copy: bool,
    /// Streams can record and wait on events.
    pub events: bool,
    /// The device has a pinned host buffer type for fast transfers.
    pub host_buffer: bool,
}

/// Declared speed figures, used by the cost-model offload policy and by
/// the splitting experiments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevicePerf {
    /// Host↔device copy bandwidth, bytes per second.
    pub link_bytes_per_s: f64,
    /// Sustained matrix throughput, FLOP per second.
    pub flops_per_s: f64,
    /// Device memory bandwidth, bytes per second.
    pub mem_bytes_per_s: f64,
}

/// What a buffer holds; used for accounting and reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferUsage {
    Weights,
    Compute,
    Any,
}

/// A device: one processor with its memory.
pub trait Device: Send + Sync {
    /// Short unique name, e.g. `CPU`, `sim:0`, `wgpu:0`, `cuda:1`.
    fn name(&self) -> &str;

    /// A longer human-readable description.
    fn description(&self) -> String;

    fn kind(&self) -> DeviceKind;

    fn memory(&self) -> MemoryInfo;

    /// The buffer type of the device's own memory.
    fn buffer_type(&self) -> Arc<dyn BufferType>;

    /// A pinned host buffer type for fast transfers, where there is one.
    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        None
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }

    /// Declared speed figures, where known.
    fn perf(&self) -> Option<DevicePerf> {
        None
    }

    /// Whether this device can compute `node` of `graph` (op, types,
    /// layouts). Must answer honestly: the scheduler sends everything a
    /// device refuses elsewhere.
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool;

    /// Whether kernels on this device can read and write memory of this
    /// buffer type directly.
    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        buft.name() == self.buffer_type().name()
    }

    /// The op-offload heuristic: should `node`, whose weight lives in host
    /// memory, run here anyway (paying for the weight copy)? The default
    /// follows ggml: GPU-class devices take mul_mat and mul_mat_id with a
    /// batch of at least 32.
    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        self.kind().is_gpu_class() && batch_offload_rule(graph, node, DEFAULT_OFFLOAD_MIN_BATCH)
    }

    /// A new stream on this device.
    fn new_backend(&self) -> Result<Box<dyn Backend>>;
}

/// ggml's batch size at which a matrix op is worth offloading.
pub const DEFAULT_OFFLOAD_MIN_BATCH: usize = 32;

/// The batch rule of op offload: mul_mat with ne[1] >= min_batch, or
/// mul_mat_id with ne[2] >= min_batch.
pub fn batch_offload_rule(graph: &Graph, node: TensorId, min_batch: usize) -> bool {
    let t = graph.tensor(node);
    match t.op.kind() {
        OpKind::MulMat => t.ne[1] >= min_batch,
        OpKind::MulMatId => t.ne[2] >= min_batch,
        _ => false,
    }
}

impl fmt::Debug for dyn Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.name())
    }
}

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

    /// Whether the CPU can address this memory directly.
    fn is_host(&self) -> bool;

    /// Allocates one buffer. Fails with [`Error::OutOfMemory`] when the
    /// device cannot provide it.
    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>>;

    fn as_any(&self) -> &dyn Any;
}

impl fmt::Debug for dyn BufferType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufferType({})", self.name())
    }
}

/// One allocation of some buffer type. Methods take `&self`: buffers are
/// shared between graphs and streams, and ordering their use is the
/// scheduler's job, as in ggml.
pub trait Buffer: Send + Sync {
    fn buffer_type_name(&self) -> &str;

    fn size(&self) -> u64;

    fn usage(&self) -> BufferUsage;

    fn write(&self, offset: u64, data: &[u8]) -> Result<()>;

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()>;

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()>;

    /// Copies `len` bytes from `src` into this buffer, if this buffer knows
    /// how to reach `src` directly; `Ok(false)` means the caller should
    /// stage through host memory.
    fn copy_from(
        &self,
        _dst_offset: u64,
        _src: &dyn Buffer,
        _src_offset: u64,
        _len: u64,
    ) -> Result<bool> {
        Ok(false)
    }

    /// Start of the memory, for host buffers.
    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn as_any(&self) -> &dyn Any;
}

impl fmt::Debug for dyn Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({}, {} bytes)",
            self.buffer_type_name(),
            self.size()
        )
    }
}

/// Checks that `offset..offset + len` lies in a buffer of `size` bytes.
pub fn check_range(what: &'static str, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds {
            what,
            offset,
            end: offset.saturating_add(len),
            size,
        }),
    }
}

/// Copies bytes between any two buffers: directly when the destination can
/// reach the source, otherwise through host memory.
pub fn copy_between(
    src: &dyn Buffer,
    src_offset: u64,
    dst: &dyn Buffer,
    dst_offset: u64,
    len: u64,
) -> Result<()> {
    check_range("copy source", src_offset, len, src.size())?;
    check_range("copy destination", dst_offset, len, dst.size())?;
    if len == 0 || dst.copy_from(dst_offset, src, src_offset, len)? {
        return Ok(());
    }
    let mut staging = vec![0u8; len as usize];
    src.read(src_offset, &mut staging)?;
    dst.write(dst_offset, &staging)
}

/// A point in a stream's work that others can wait for.
pub trait Event: Send + Sync {
    /// Blocks until the work before the event is done.
    fn synchronize(&self) -> Result<()>;

    fn as_any(&self) -> &dyn Any;
}

/// An event that is already complete (for synchronous backends).
#[derive(Debug, Default)]
pub struct CompletedEvent;

impl Event for CompletedEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A stream on one device: computes splits and moves data, in order.
pub trait Backend: Send {
    fn device(&self) -> Arc<dyn Device>;

    /// Computes `nodes` of `graph` (a split: a contiguous run of the
    /// graph's nodes, all supported by this device), in order. All tensors
    /// involved are bound to memory this device can use.
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()>;

    /// Queues a write to a buffer this device owns (the data is copied
    /// before the call returns).
    fn write_async(&mut self, buffer: &dyn Buffer, offset: u64, data: &[u8]) -> Result<()> {
        buffer.write(offset, data)
    }

    /// Queues a copy between buffers; the default copies synchronously,
    /// staging through host memory when needed.
    fn copy_async(
        &mut self,
        src: &dyn Buffer,
        src_offset: u64,
        dst: &dyn Buffer,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        copy_between(src, src_offset, dst, dst_offset, len)
    }

    /// Waits for everything queued on this stream.
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    /// Marks the current point of the stream.
    fn record_event(&mut self) -> Result<Arc<dyn Event>> {
        self.synchronize()?;
        Ok(Arc::new(CompletedEvent))
    }

    /// Makes later work on this stream wait for `event`.
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        event.synchronize()
    }
}

#[cfg(test)]
mod tests {
    use super::batch_offload_rule;
    use crate::DType;
    use crate::ir::{GraphBuilder, TensorId};

    /// ggml's rule: a mul_mat offloads from 32 columns, a mul_mat_id from
    /// 32 tokens (its dim 2), whatever the experts used per token; other
    /// ops never; the threshold is a parameter.
    #[test]
    fn the_batch_rule_takes_mul_mats_from_32_columns_and_mul_mat_ids_from_32_tokens() {
        let mul_mat = |n: usize| -> (crate::ir::Graph, TensorId, TensorId) {
            let mut b = GraphBuilder::new();
            let w = b.weight("w", DType::Q8_0, &[64, 16]).unwrap();
            let x = b.input("x", DType::F32, &[64, n]).unwrap();
            let y = b.mul_mat(w, x).unwrap();
            let z = b.silu(y).unwrap();
            b.set_output(z).unwrap();
            (b.build(), y, z)
        };
        let mul_mat_id = |tokens: usize| -> (crate::ir::Graph, TensorId) {
            let mut b = GraphBuilder::new();
            let e = b.weight("experts", DType::Q8_0, &[64, 16, 4]).unwrap();
            let x = b.input("x", DType::F32, &[64, 1, tokens]).unwrap();
            let ids = b.input("ids", DType::I32, &[2, tokens]).unwrap();
            let y = b.mul_mat_id(e, x, ids).unwrap();
            b.set_output(y).unwrap();
            (b.build(), y)
        };
        for (n, want) in [(1, false), (31, false), (32, true), (512, true)] {
            let (g, y, z) = mul_mat(n);
            assert_eq!(
                batch_offload_rule(&g, y, 32),
                want,
                "mul_mat of {n} columns"
            );
            assert!(!batch_offload_rule(&g, z, 32), "silu never");
            let (g, y) = mul_mat_id(n);
            assert_eq!(
                batch_offload_rule(&g, y, 32),
                want,
                "mul_mat_id of {n} tokens"
            );
        }
        let (g, y, _) = mul_mat(8);
        assert!(batch_offload_rule(&g, y, 8) && !batch_offload_rule(&g, y, 9));
    }
}
