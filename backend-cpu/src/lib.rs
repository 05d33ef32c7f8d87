//! ggraph CPU backend: kernels for every op of the IR, parallel over a
//! team of threads (a rayon pool, see `team`), and
//! simulated devices (`sim:N`) that stand in for discrete GPUs in placement
//! and multi-device tests.
//!
//! [`CpuRegistration`] adds the CPU (and any simulated devices) to a
//! registry; [`CpuDevice`] can also be used on its own, as below. The CPU
//! is the host every schedule falls back to: it computes on any
//! host-addressable buffer, including the pinned host buffers of GPU
//! backends.
//!
//! # Example
//!
//! One matrix product on the CPU, every tensor in one buffer (ggml's
//! `ggml_mul_mat`: `w` is `[k, m]` and `x` is `[k, n]`, the result `[m, n]`):
//!
//! ```
//! use ggraph_core::backend::Device;
//! use ggraph_core::ir::GraphBuilder;
//! use ggraph_core::{DType, exec};
//! use ggraph_cpu::CpuDevice;
//!
//! let mut b = GraphBuilder::new();
//! let w = b.weight("w", DType::F32, &[3, 2])?;
//! let x = b.input("x", DType::F32, &[3, 1])?;
//! let y = b.mul_mat(w, x)?;
//! b.set_output(y)?;
//! let mut graph = b.build();
//!
//! let cpu = CpuDevice::new();
//! let _buffer = exec::alloc_one_buffer(&mut graph, &cpu.buffer_type())?;
//! graph.write_f32(w, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! graph.write_f32(x, &[1.0, 1.0, 1.0])?;
//! exec::compute_on(cpu.as_ref(), &graph)?;
//! assert_eq!(graph.read_f32(y)?, [6.0, 15.0]);
//! # Ok::<(), ggraph_core::Error>(())
//! ```

#![warn(missing_docs)]

mod device;
mod kernels;
pub mod profile;
mod repack;
mod sim;
mod stream;
mod supports;
mod team;

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};

pub use device::{CPU_BUFFER_TYPE, CpuBuffer, CpuBufferType, CpuDevice, host_memory_info};
pub use repack::{CPU_REPACK_BUFFER_TYPE, RepackBuffer, RepackBufferType};
pub use sim::{SimBuffer, SimBufferType, SimConfig, SimDevice};

/// The instruction set of the CPU's kernels, by the name
/// `GGRAPH_CPU_ISA` takes (`portable`, `avx2`, `avx512` or `avx512vnni`):
/// the best this processor runs, or the lower one `GGRAPH_CPU_ISA` names.
pub fn instruction_set() -> &'static str {
    kernels::isa::active().name()
}

/// Every instruction set this processor runs, lowest first, by the names
/// `GGRAPH_CPU_ISA` takes: the levels a test or a comparison can force.
pub fn instruction_sets() -> Vec<&'static str> {
    kernels::isa::all_supported()
        .into_iter()
        .map(|isa| isa.name())
        .collect()
}

/// The CPU backend family: the CPU and any simulated devices asked for.
pub struct CpuRegistration {
    cpu: Arc<CpuDevice>,
    sims: Vec<Arc<SimDevice>>,
}

impl CpuRegistration {
    /// The CPU, plus simulated devices from `GGRAPH_SIM_DEVICES` (a comma
    /// separated list of memory sizes such as `2GiB,512MiB`). A list with
    /// an entry that is not a size gives none (with a warning), rather
    /// than shifting the indices of the others; tools refuse it first
    /// ([`sim_configs_from_env`]).
    pub fn new() -> CpuRegistration {
        let sims = sim_configs_from_env().unwrap_or_else(|e| {
            tracing::warn!("{e}: no simulated devices");
            Vec::new()
        });
        CpuRegistration::with_sims(sims)
    }

    /// The CPU plus simulated devices `sim:0`, `sim:1`, ... as configured.
    pub fn with_sims(configs: Vec<SimConfig>) -> CpuRegistration {
        CpuRegistration {
            cpu: CpuDevice::new(),
            sims: configs
                .into_iter()
                .enumerate()
                .map(|(i, c)| SimDevice::new(i, c))
                .collect(),
        }
    }
}

/// The simulated GPUs `GGRAPH_SIM_DEVICES` asks for (none when unset or
/// empty), or an error naming the entry that is not a memory size.
pub fn sim_configs_from_env() -> Result<Vec<SimConfig>, String> {
    let Ok(list) = std::env::var("GGRAPH_SIM_DEVICES") else {
        return Ok(Vec::new());
    };
    if list.trim().is_empty() {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(|entry| {
            ggraph_core::util::parse_bytes(entry.trim())
                .map(SimConfig::gpu)
                .map_err(|_| {
                    format!(
                        "GGRAPH_SIM_DEVICES={list}: '{}' is not a memory size (such as 2GiB or 512MiB)",
                        entry.trim()
                    )
                })
        })
        .collect()
}

impl Default for CpuRegistration {
    fn default() -> Self {
        CpuRegistration::new()
    }
}

impl BackendRegistration for CpuRegistration {
    fn name(&self) -> &str {
        "CPU"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        let mut d: Vec<Arc<dyn Device>> = vec![self.cpu.clone()];
        d.extend(self.sims.iter().map(|s| s.clone() as Arc<dyn Device>));
        d
    }
}
