//! The CPU device: host memory, a team of threads (a rayon pool).

use std::any::Any;
use std::sync::{Arc, Weak};

use ggraph_core::backend::{
    Buffer, BufferType, BufferUsage, Device, DeviceCaps, DeviceKind, HostMemInfo, HostMemory,
    MemoryInfo, MemorySource, Stream,
};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::repack::{CPU_REPACK_BUFFER_TYPE, RepackBufferType, offered};
use crate::stream::{CpuStream, MemoryAccess};
use crate::supports::cpu_supports;
use crate::team::{self, Team, WRITE_TASK_BYTES};

/// Name of the CPU buffer type, `CPU` as in ggml: what [`CpuBuffer`]s
/// report as their buffer type name.
pub const CPU_BUFFER_TYPE: &str = "CPU";

/// The host CPU, as the device named `CPU`. Its kernels run on a team of
/// threads and read and write any host-addressable buffer.
pub struct CpuDevice {
    me: Weak<CpuDevice>,
    threads: usize,
    team: Option<Arc<Team>>,
    buffer_type: Arc<CpuBufferType>,
    /// The layout buffer type, where this processor gets it.
    repack: Option<Arc<RepackBufferType>>,
}

impl CpuDevice {
    /// The CPU with the process's shared team: one thread per core (or
    /// `RAYON_NUM_THREADS`).
    pub fn new() -> Arc<CpuDevice> {
        let team = Team::shared();
        Arc::new_cyclic(|me| CpuDevice {
            me: me.clone(),
            threads: team.as_ref().map_or(1, |t| t.threads()),
            repack: offered().then(|| Arc::new(RepackBufferType::with_team(team.clone()))),
            buffer_type: Arc::new(CpuBufferType { team: team.clone() }),
            team,
        })
    }

    /// The CPU with its own team of `threads` threads.
    pub fn with_threads(threads: usize) -> Result<Arc<CpuDevice>> {
        CpuDevice::with_repack(threads, offered())
    }

    /// The CPU with its own team of `threads` threads, offering its layout
    /// buffer type (`CPU_REPACK`) or not, whatever the processor's default
    /// (without AVX2 the weights are converted back before each product).
    pub fn with_repack(threads: usize, repack: bool) -> Result<Arc<CpuDevice>> {
        let team = Team::new(threads)
            .map_err(|e| Error::backend("CPU", format!("cannot start {threads} threads: {e}")))?;
        let team = Some(Arc::new(team));
        Ok(Arc::new_cyclic(|me| CpuDevice {
            me: me.clone(),
            threads: threads.max(1),
            repack: repack.then(|| Arc::new(RepackBufferType::with_team(team.clone()))),
            buffer_type: Arc::new(CpuBufferType { team: team.clone() }),
            team,
        }))
    }

    /// Threads that share each kernel, the calling thread included; 1 when
    /// the shared pool could not start.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Device for CpuDevice {
    fn name(&self) -> &str {
        "CPU"
    }

    fn description(&self) -> String {
        let repack = if self.repack.is_some() {
            ", weights repacked (CPU_REPACK)"
        } else {
            ""
        };
        #[cfg(target_arch = "x86_64")]
        let amx = if crate::kernels::amx::active() {
            ", AMX tiles"
        } else {
            ""
        };
        #[cfg(not(target_arch = "x86_64"))]
        let amx = "";
        format!(
            "{} ({} threads, {} kernels{amx}{repack})",
            cpu_model_name(),
            self.threads,
            crate::kernels::isa::active().name()
        )
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    fn memory(&self) -> MemoryInfo {
        host_memory_info()
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buffer_type.clone()
    }

    /// `CPU_REPACK` (Q4_0, Q8_0, Q4_K, IQ4_NL and MXFP4 matrices interleaved),
    /// where this processor gets it.
    fn layout_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        self.repack
            .iter()
            .map(|r| r.clone() as Arc<dyn BufferType>)
            .collect()
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }

    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        cpu_supports(graph, node)
    }

    /// Any host-addressable memory (CPU buffers, pinned host buffers of GPU
    /// backends) and its own layout buffer type.
    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        buft.is_host() || buft.name() == CPU_REPACK_BUFFER_TYPE
    }

    fn offload_op(&self, _graph: &Graph, _node: TensorId) -> bool {
        false
    }

    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        let me: Arc<dyn Device> = self
            .me
            .upgrade()
            .ok_or_else(|| Error::backend("CPU", "device dropped"))?;
        Ok(Box::new(CpuStream::new(
            me,
            self.team.clone(),
            Box::new(HostAccess),
        )))
    }
}

/// The CPU's kernels reach any host-addressable buffer (CPU buffers,
/// pinned host buffers of GPU backends).
struct HostAccess;

impl MemoryAccess for HostAccess {
    fn address(&self, buffer: &dyn Buffer) -> Option<*mut u8> {
        buffer.host_ptr()
    }
}

/// Host memory, 64-byte aligned.
#[derive(Debug, Default)]
pub struct CpuBufferType {
    /// The device's team, which shares large writes.
    team: Option<Arc<Team>>,
}

impl BufferType for CpuBufferType {
    fn name(&self) -> &str {
        CPU_BUFFER_TYPE
    }

    fn alignment(&self) -> u64 {
        64
    }

    fn is_host(&self) -> bool {
        true
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(CpuBuffer {
            memory: HostMemory::for_usage(size, CPU_BUFFER_TYPE, usage)?,
            usage,
            team: self.team.clone(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One allocation of host memory.
pub struct CpuBuffer {
    memory: HostMemory,
    usage: BufferUsage,
    team: Option<Arc<Team>>,
}

impl Buffer for CpuBuffer {
    fn buffer_type_name(&self) -> &str {
        CPU_BUFFER_TYPE
    }

    fn size(&self) -> u64 {
        self.memory.len() as u64
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.memory.write_with(offset, data.len() as u64, |dst| {
            team::split_on(self.team.as_deref(), dst, WRITE_TASK_BYTES, |c, out| {
                out.copy_from_slice(&data[c * WRITE_TASK_BYTES..][..out.len()])
            })
        })
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.memory.read(offset, out)
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.memory.fill(offset, len, value)
    }

    fn copy_from(
        &self,
        dst_offset: u64,
        src: &dyn Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<bool> {
        match src.as_any().downcast_ref::<CpuBuffer>() {
            Some(s) => {
                self.memory
                    .copy_from(dst_offset, &s.memory, src_offset, len)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.memory.as_ptr())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Free and total host memory from /proc/meminfo (MemAvailable counts as
/// free); zeros where that file does not exist.
pub fn host_memory_info() -> MemoryInfo {
    let host = HostMemInfo::read();
    MemoryInfo {
        free_bytes: host.map_or(0, |h| h.available_bytes),
        total_bytes: host.map_or(0, |h| h.total_bytes),
        source: MemorySource::Driver,
    }
}

fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}
