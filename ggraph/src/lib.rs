//! The `ggraph` facade: the core and the model crate re-exported, every
//! compiled-in backend in one registry, and the pieces the command-line
//! tools share.
//!
//! `ggraph::ir`, `ggraph::sched`, `ggraph::backend`... are ggraph-core's;
//! `ggraph::model` is ggraph-model, with its decode loop also at
//! `ggraph::context`, `ggraph::kv` and `ggraph::batch`.

pub use ggraph_core as core;
pub use ggraph_core::*;
pub use ggraph_model as model;
pub use ggraph_model::{batch, context, kv};
pub use ggraph_rpc as rpc;

pub mod logs;
pub mod options;
pub mod progress;
pub mod runner;
pub mod tool;
pub mod values;

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
