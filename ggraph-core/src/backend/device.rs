//! Devices: what a processor is, its memory figures and capabilities,
//! and the questions the scheduler asks it.

use std::fmt;
use std::sync::Arc;

use super::buffer_type::BufferType;
use super::stream::Stream;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Graph, OpKind, TensorId};

/// What sort of processor a device is; the scheduler prefers GPU-class
/// devices when it spreads assignments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The host processor; a scheduler needs one, since graph inputs start
    /// there.
    Cpu,
    /// A discrete GPU with its own memory.
    Gpu,
    /// A GPU that shares the host's memory.
    IntegratedGpu,
    /// Any other processor that computes ops (an NPU, a remote device).
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
    /// Bytes that can still be allocated.
    pub free_bytes: u64,
    /// Bytes the device has (or is allowed) in all.
    pub total_bytes: u64,
    /// Where the figures come from: the driver, a declared budget, the
    /// host's memory.
    pub source: MemorySource,
}

/// How a device knows its memory figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemorySource {
    /// The driver reported them (cuMemGetInfo, hipMemGetInfo, sysinfo).
    Driver,
    /// A declared budget minus what ggraph allocated on the device.
    DeclaredBudget,
    /// The host's: a GPU that shares the host's memory (integrated, or
    /// with unified memory) can allocate what the host has available
    /// (`HostMemInfo::shared_device_free_bytes`); the total is the
    /// driver's.
    HostShared,
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

/// A device: one processor with its memory.
pub trait Device: Send + Sync {
    /// Short unique name, e.g. `CPU`, `sim:0`, `wgpu:0`, `cuda:1`.
    fn name(&self) -> &str;

    /// A longer human-readable description.
    fn description(&self) -> String;

    /// What sort of processor this is: the scheduler needs a
    /// [`DeviceKind::Cpu`] and prefers GPU-class devices.
    fn kind(&self) -> DeviceKind;

    /// Whether this GPU-class device is a software driver running on the
    /// host processor (Mesa's lavapipe or llvmpipe behind wgpu): slower
    /// than the CPU backend, so tools leave it out of default placement,
    /// as llama.cpp's Vulkan backend skips CPU-type devices, and use it
    /// only when named.
    fn is_software(&self) -> bool {
        false
    }

    /// Free and total memory now, in bytes (ggml's
    /// `ggml_backend_dev_memory`). Placement reads this before loading
    /// weights, so it should be cheap.
    fn memory(&self) -> MemoryInfo;

    /// The buffer type of the device's own memory.
    fn buffer_type(&self) -> Arc<dyn BufferType>;

    /// Buffer types for weights that this device's kernels read faster in
    /// a layout of their own (ggml's "extra" buffer types, such as its
    /// CPU's repacked rows), in order of preference. A loader writes a
    /// weight through one with GGUF's bytes and the buffer converts them;
    /// reads give GGUF's bytes back, so any other device can still copy
    /// the weight. None by default.
    fn layout_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        Vec::new()
    }

    /// The buffer type a weight of `dtype` and `shape` should live in on
    /// this device: the first of [`layout_buffer_types`](Self::layout_buffer_types)
    /// that lays it out, else [`buffer_type`](Self::buffer_type).
    fn weight_buffer_type(&self, dtype: DType, shape: &[usize]) -> Arc<dyn BufferType> {
        self.layout_buffer_types()
            .into_iter()
            .find(|b| b.lays_out(dtype, shape))
            .unwrap_or_else(|| self.buffer_type())
    }

    /// A pinned host buffer type for fast transfers, where there is one.
    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        None
    }

    /// Optional capabilities; the default claims none (synchronous copies,
    /// no events, no pinned host memory).
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
    fn new_stream(&self) -> Result<Box<dyn Stream>>;
}

/// The names of the buffer types `device` keeps weights in: its own memory
/// and its layout buffer types (what a device's share of a model's weights
/// adds up over).
pub fn weight_buffer_type_names(device: &dyn Device) -> Vec<String> {
    std::iter::once(device.buffer_type())
        .chain(device.layout_buffer_types())
        .map(|b| b.name().to_string())
        .collect()
}

/// ggml's batch size at which a matrix op is worth offloading.
pub const DEFAULT_OFFLOAD_MIN_BATCH: usize = 32;

/// The batch rule of op offload: a mul_mat node with `ne[1] >= min_batch`
/// (columns of the activations), or a mul_mat_id node with `ne[2] >=
/// min_batch` (tokens). Every other op is `false`.
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
