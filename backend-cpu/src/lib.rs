//! ggraph CPU backend: kernels for every op of the IR, parallel over a
//! team of threads (a rayon pool, see `team`), and
//! simulated devices (`sim:N`) that stand in for discrete GPUs in placement
//! and multi-device tests.

mod device;
mod kernels;
pub mod profile;
mod sim;
mod stream;
mod supports;
mod team;

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};

pub use device::{CPU_BUFFER_TYPE, CpuBuffer, CpuBufferType, CpuDevice, host_memory_info};
pub use sim::{SimBuffer, SimBufferType, SimConfig, SimDevice};

/// The CPU backend family: the CPU and any simulated devices asked for.
pub struct CpuRegistration {
    cpu: Arc<CpuDevice>,
    sims: Vec<Arc<SimDevice>>,
}

impl CpuRegistration {
    /// The CPU, plus simulated devices from `GGRAPH_SIM_DEVICES` (a comma
    /// separated list of memory sizes such as `2GiB,512MiB`).
    pub fn new() -> CpuRegistration {
        let sims = std::env::var("GGRAPH_SIM_DEVICES")
            .ok()
            .map(|v| {
                v.split(',')
                    .filter_map(|s| ggraph_core::util::parse_bytes(s.trim()).ok())
                    .map(SimConfig::gpu)
                    .collect()
            })
            .unwrap_or_default();
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
