//! The `ggraph` facade: the core re-exported, every compiled-in backend in
//! one registry, and the pieces the command-line tools share.

pub use ggraph_core as core;
pub use ggraph_core::*;

pub mod args;
pub mod options;
pub mod runner;
pub mod sample;

use ggraph_core::backend::Registry;

/// A registry with every backend compiled into this build: CPU (with any
/// simulated devices from `GGRAPH_SIM_DEVICES`), CUDA, HIP and wgpu. A
/// backend without hardware lists no devices.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(Box::new(ggraph_cpu::CpuRegistration::new()));
    r.register(Box::new(ggraph_cuda::Registration));
    r.register(Box::new(ggraph_hip::Registration));
    r.register(Box::new(ggraph_wgpu::Registration));
    r
}
