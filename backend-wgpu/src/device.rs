//! A wgpu device: one logical device on an adapter, with its queue, its
//! pipeline cache and its memory accounting.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ggraph_core::backend::{Backend, BufferType, Device, DeviceCaps, DeviceKind, MemoryInfo};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::buffer::WgpuBufferType;
use crate::context;
use crate::kernels::PipelineCache;
use crate::memory::{self, Budget, MemoryReport};
use crate::stream::WgpuStream;
use crate::supports;

/// What every buffer, stream and kernel of one device shares.
pub(crate) struct Gpu {
    pub name: String,
    pub adapter: wgpu::Adapter,
    pub info: wgpu::AdapterInfo,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// Bytes of buffers ggraph holds on this device.
    pub allocated: AtomicU64,
    pub budget: Budget,
    pub options: WgpuOptions,
    pub pipelines: PipelineCache,
    /// Where kernels flag bad input they met (indices outside their
    /// tensor): word 0 holds a bit per kernel kind, word 1 the last bad
    /// index, word 2 its limit. Read and cleared by synchronize.
    pub status: wgpu::Buffer,
    /// A kernel that can flag the status word ran since it was last read.
    pub status_pending: AtomicBool,
    /// Errors wgpu reported outside any error scope (validation of a
    /// submission, a lost device); returned by the next synchronize.
    errors: Arc<Mutex<Vec<String>>>,
}

impl Gpu {
    /// Whether the subgroup mul_mat kernels run here: subgroup operations
    /// with a fixed subgroup size of 8 (lavapipe and llvmpipe on AVX2).
    pub fn subgroups_of_8(&self) -> bool {
        self.features.contains(wgpu::Features::SUBGROUP)
            && self.info.subgroup_min_size == 8
            && self.info.subgroup_max_size == 8
    }

    /// Alignment of storage bindings (and so of tensors), at least 16 so
    /// that rows of aligned tensors can be read as vec4.
    pub fn storage_align(&self) -> u64 {
        (self.limits.min_storage_buffer_offset_alignment as u64).max(16)
    }

    /// Largest storage binding the kernels use, in bytes (a multiple of
    /// the alignment; byte offsets inside a binding fit in a u32).
    pub fn max_binding(&self) -> u64 {
        let limit = self
            .limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
            .min(1 << 31)
            .min(self.options.max_binding_bytes.unwrap_or(u64::MAX));
        (limit / self.storage_align() * self.storage_align()).max(self.storage_align())
    }

    /// The errors wgpu reported since the last call, as one error.
    pub fn take_errors(&self) -> Result<()> {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.is_empty() {
            return Ok(());
        }
        let msg = errors.join("; ");
        errors.clear();
        Err(Error::backend(&self.name, msg))
    }

    /// Blocks until `index` (or everything submitted, for `None`) is done
    /// on this device; other devices keep running.
    pub fn wait(&self, index: Option<wgpu::SubmissionIndex>) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: None,
            })
            .map_err(|e| Error::backend(&self.name, format!("waiting for the queue: {e}")))?;
        self.take_errors()
    }

    /// Maps `staging` for reading after submission `index` (which copies
    /// into it) and waits until the mapping is done.
    ///
    /// The mapping's callback runs inside whichever thread polls the device
    /// next; when another thread's poll picked it up, it may still be on its
    /// way after our wait returns, so the wait ends on the callback itself.
    pub fn map_for_read(&self, staging: &wgpu::Buffer, index: wgpu::SubmissionIndex) -> Result<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait(Some(index))?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let result = loop {
            match rx.try_recv() {
                Ok(r) => break r,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return Err(Error::backend(
                        &self.name,
                        "a readback's mapping was dropped unanswered",
                    ));
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if std::time::Instant::now() > deadline {
                        return Err(Error::backend(
                            &self.name,
                            "a readback was not mapped 30 s after its queue finished",
                        ));
                    }
                    let _ = self.device.poll(wgpu::PollType::Poll);
                    std::thread::yield_now();
                }
            }
        };
        result.map_err(|e| Error::backend(&self.name, format!("mapping a readback: {e}")))?;
        self.take_errors()
    }

    /// Reads and clears the status word after the queue is idle; an error
    /// names the kernels that met bad indices.
    pub fn check_status(&self) -> Result<()> {
        if !self.status_pending.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ggraph status readback"),
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        enc.copy_buffer_to_buffer(&self.status, 0, &staging, 0, 16);
        enc.clear_buffer(&self.status, 0, None);
        let index = self.queue.submit([enc.finish()]);
        self.map_for_read(&staging, index)?;
        let words: [u32; 4] = {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| Error::backend(&self.name, format!("reading the status word: {e}")))?;
            bytemuck::pod_read_unaligned(&view[..16])
        };
        staging.unmap();
        if words[0] == 0 {
            return Ok(());
        }
        let kinds: Vec<&str> = [(1, "get_rows"), (2, "set_rows"), (4, "mul_mat_id")]
            .iter()
            .filter(|(bit, _)| words[0] & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        Err(Error::InvalidArgument(format!(
            "{}: {} met index {} outside 0..{}; the results of that compute are not valid",
            self.name,
            kinds.join(", "),
            words[1] as i32,
            words[2]
        )))
    }

    /// Runs `f` inside an error scope and turns what it caught into an
    /// error that names `what`.
    pub fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        match v.or(o) {
            None => Ok(out),
            Some(e) => Err(Error::backend(&self.name, format!("{what}: {e}"))),
        }
    }
}

/// The mul_mat kernels (see `kernels/matmul.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulKernel {
    /// Subgroup broadcasts (adapters with 8-lane subgroups, e.g. lavapipe).
    Subgroup,
    /// Shared-memory tiles with 4x4 register blocks.
    Tiled,
    /// One thread per result element.
    Generic,
}

/// How to open a device. The defaults are what the registry uses.
#[derive(Clone, Debug, Default)]
pub struct WgpuOptions {
    /// A declared memory budget: allocations beyond it fail, and memory
    /// queries report it (as `GGRAPH_WGPU_MEMORY` does).
    pub memory_budget_bytes: Option<u64>,
    /// Bind at most this many bytes of a tensor at once (below the
    /// adapter's limit), e.g. to exercise the windowed weight reads.
    pub max_binding_bytes: Option<u64>,
    /// Use this mul_mat kernel wherever it applies instead of choosing
    /// (`GGRAPH_WGPU_MATMUL=subgroup|tiled|generic` sets it for the
    /// registry's devices).
    pub matmul_kernel: Option<MatmulKernel>,
}

impl WgpuOptions {
    fn from_env() -> WgpuOptions {
        let matmul_kernel = match std::env::var("GGRAPH_WGPU_MATMUL").as_deref() {
            Ok("subgroup") => Some(MatmulKernel::Subgroup),
            Ok("tiled") => Some(MatmulKernel::Tiled),
            Ok("generic") => Some(MatmulKernel::Generic),
            _ => None,
        };
        WgpuOptions {
            matmul_kernel,
            ..WgpuOptions::default()
        }
    }
}

/// One logical wgpu device, as a ggraph device.
pub struct WgpuDevice {
    me: Weak<WgpuDevice>,
    pub(crate) gpu: Arc<Gpu>,
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
        let info = adapter.get_info();
        let limits = adapter.limits();
        // subgroup operations let the mul_mat kernels share loaded values
        // between lanes (see kernels/matmul.rs)
        let features = adapter.features() & wgpu::Features::SUBGROUP;
        let name = format!("wgpu:{}", context::next_ordinal());
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some(&name),
            required_features: features,
            required_limits: limits.clone(),
            memory_hints: wgpu::MemoryHints::Performance,
            ..Default::default()
        }))
        .map_err(|e| {
            Error::backend(
                &name,
                format!("cannot open a device on adapter '{}': {e}", info.name),
            )
        })?;
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.to_string());
        }));
        let budget = match options.memory_budget_bytes {
            Some(b) => Budget::Declared(b),
            None => memory::budget_for(&adapter, &limits),
        };
        let status = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ggraph status"),
            size: 16,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let gpu = Arc::new(Gpu {
            name: name.clone(),
            adapter,
            info,
            device,
            queue,
            limits,
            features,
            allocated: AtomicU64::new(0),
            budget,
            options,
            pipelines: PipelineCache::default(),
            status,
            status_pending: AtomicBool::new(false),
            errors,
        });
        tracing::debug!("opened {name}: {}", gpu.info.name);
        Ok(Arc::new_cyclic(|me| WgpuDevice {
            me: me.clone(),
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
        memory::report(&self.gpu)
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

    /// The stream type itself, for callers that want its extra methods.
    pub fn new_stream(&self) -> Result<WgpuStream> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| Error::backend(&self.gpu.name, "device dropped"))?;
        Ok(WgpuStream::new(me))
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

    fn memory(&self) -> MemoryInfo {
        memory::report(&self.gpu).info
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

    fn new_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(self.new_stream()?))
    }
}
