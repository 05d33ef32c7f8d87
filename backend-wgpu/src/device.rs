//! A wgpu device: one logical device on an adapter (its shared [`Gpu`]
//! handle) as a ggraph device, with its buffer type and streams.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ggraph_core::backend::{BufferType, Device, DeviceCaps, DeviceKind, MemoryInfo, Stream};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::buffer::WgpuBufferType;
use crate::context;
use crate::gpu::Gpu;
use crate::memory::MemoryReport;
use crate::options::WgpuOptions;
use crate::stream::WgpuStream;
use crate::supports;

/// One logical wgpu device, as a ggraph device.
pub struct WgpuDevice {
    gpu: Arc<Gpu>,
    buffer_type: Arc<WgpuBufferType>,
}

impl WgpuDevice {
    /// Opens one more logical device on adapter `index` of
    /// [`adapters`](crate::adapters), with a name of its own. Devices
    /// opened on the same adapter cannot read each other's buffers: data
    /// moves between them through host memory.
    pub fn open(index: usize) -> Result<Arc<WgpuDevice>> {
        WgpuDevice::open_with(index, WgpuOptions::from_env())
    }

    /// [`open`](WgpuDevice::open) with options.
    pub fn open_with(index: usize, options: WgpuOptions) -> Result<Arc<WgpuDevice>> {
        let adapters = context::enumerate();
        let n = adapters.len();
        let adapter = adapters.into_iter().nth(index).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "wgpu adapter {index} does not exist ({n} adapters found)"
            ))
        })?;
        WgpuDevice::open_adapter(adapter, options)
    }

    pub(crate) fn open_registry(adapter: wgpu::Adapter) -> Result<Arc<WgpuDevice>> {
        WgpuDevice::open_adapter(adapter, WgpuOptions::from_env())
    }

    fn open_adapter(adapter: wgpu::Adapter, options: WgpuOptions) -> Result<Arc<WgpuDevice>> {
        let name = format!("wgpu:{}", context::next_ordinal());
        let gpu = Arc::new(Gpu::open(adapter, options, name)?);
        tracing::debug!("opened {}: {}", gpu.name, gpu.info.name);
        Ok(Arc::new(WgpuDevice {
            buffer_type: Arc::new(WgpuBufferType::new(gpu.clone())),
            gpu,
        }))
    }

    /// The adapter's description as wgpu gives it.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.gpu.info
    }

    /// The limits the device was opened with (the adapter's).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.gpu.limits
    }

    /// Largest tensor span a kernel binds at once, in bytes (lavapipe:
    /// 128 MiB). mul_mat and get_rows read larger weights window by
    /// window; other ops on larger tensors are refused by `supports_op`.
    pub fn max_binding_bytes(&self) -> u64 {
        self.gpu.max_binding()
    }

    /// Bytes of buffers ggraph holds on this device.
    pub fn allocated_bytes(&self) -> u64 {
        self.gpu.allocated.load(Ordering::Relaxed)
    }

    /// The memory figures and where they come from.
    pub fn memory_report(&self) -> MemoryReport {
        self.gpu.memory_report()
    }

    /// Pipelines built so far on this device.
    pub fn pipelines_built(&self) -> usize {
        self.gpu.pipelines.len()
    }

    /// The kernels built so far, by name and specialisation (e.g.
    /// `mul_mat_subgroup|Q4_0|tm=4,nc=16`).
    pub fn kernels_built(&self) -> Vec<String> {
        self.gpu.pipelines.keys()
    }
}

impl Device for WgpuDevice {
    fn name(&self) -> &str {
        &self.gpu.name
    }

    fn description(&self) -> String {
        let i = &self.gpu.info;
        let mut s = format!("{} ({:?}, {:?}", i.name, i.backend, i.device_type);
        if !i.driver.is_empty() {
            s.push_str(&format!(", {} {}", i.driver, i.driver_info));
        }
        s.push(')');
        if i.device_type == wgpu::DeviceType::Cpu {
            s.push_str(", a software driver running on the CPU");
        }
        s
    }

    /// GPU-class for every adapter, including software ones such as
    /// lavapipe: their memory is reachable only through copies, exactly as
    /// a discrete GPU's.
    fn kind(&self) -> DeviceKind {
        match self.gpu.info.device_type {
            wgpu::DeviceType::IntegratedGpu => DeviceKind::IntegratedGpu,
            _ => DeviceKind::Gpu,
        }
    }

    fn is_software(&self) -> bool {
        self.gpu.info.device_type == wgpu::DeviceType::Cpu
    }

    fn memory(&self) -> MemoryInfo {
        self.gpu.memory_report().info
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buffer_type.clone()
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_copy: true,
            events: true,
            host_buffer: false,
        }
    }

    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        supports::supports(&self.gpu, graph, node)
    }

    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        Ok(Box::new(WgpuStream::new(self.gpu.clone())))
    }
}
