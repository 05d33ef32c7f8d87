//! The handle every buffer, stream and kernel of one wgpu device shares:
//! the logical device and its queue, limits, memory accounting, pipeline
//! cache, status word and error sink.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ggraph_core::{Error, Result};

use crate::memory::{self, Budget, MemoryReport};
use crate::options::WgpuOptions;
use crate::pipeline_cache::PipelineCache;

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
    /// Opens a logical device named `name` on `adapter`, with its queue,
    /// status word and error sink.
    pub fn open(adapter: wgpu::Adapter, options: WgpuOptions, name: String) -> Result<Gpu> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        // subgroup operations let the mul_mat kernels share loaded values
        // between lanes (see kernels/matmul.rs)
        let features = adapter.features() & wgpu::Features::SUBGROUP;
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
        Ok(Gpu {
            name,
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
        })
    }

    /// The memory figures and where they come from.
    pub fn memory_report(&self) -> MemoryReport {
        self.budget
            .report(&self.adapter, self.allocated.load(Ordering::Relaxed))
    }

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
        let kinds: Vec<&str> = [
            (1, "get_rows"),
            (2, "set_rows"),
            (4, "mul_mat_id"),
            (8, "add_id"),
        ]
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
