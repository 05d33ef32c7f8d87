//! ggraph runs tensor graphs with ggml's op semantics across CPUs, GPUs
//! and remote machines. This facade crate is the one to depend on: the
//! core (graphs, backends, scheduler, allocator) and the model crate
//! (GGUF, architectures, tokenizer, placement, KV cache, decode loop,
//! memory estimates) re-exported, every compiled-in backend in one
//! [`registry`], and the pieces the command-line tools share.
//!
//! `ggraph::ir`, `ggraph::sched`, `ggraph::backend`... are ggraph-core's;
//! `ggraph::model` is ggraph-model, with its decode loop also at
//! `ggraph::context`, `ggraph::kv` and `ggraph::batch`; `ggraph::rpc` is
//! the client of llama.cpp's `ggml-rpc-server`.
//!
//! A graph built, placed on the CPU and run:
//!
//! ```
//! use ggraph::{DType, GraphBuilder, exec};
//! use ggraph::backend::Device;
//! use ggraph_cpu::CpuDevice;
//!
//! let mut b = GraphBuilder::new();
//! let w = b.weight("w", DType::Q8_0, &[64, 16])?; // 16 rows of 64
//! let x = b.input("x", DType::F32, &[64, 4])?; // 4 columns
//! let y = b.mul_mat(w, x)?; // F32 [16, 4]
//! let y = b.silu(y)?;
//! b.set_output(y)?;
//! let mut graph = b.build();
//!
//! let cpu = CpuDevice::new();
//! let _memory = exec::alloc_one_buffer(&mut graph, &cpu.buffer_type())?;
//! graph.write_f32(w, &vec![0.5; 64 * 16])?; // quantised on write
//! graph.write_f32(x, &vec![0.25; 64 * 4])?;
//! exec::compute_on(cpu.as_ref(), &graph)?;
//! let out = graph.read_f32(y)?;
//! let v: f32 = 64.0 * 0.5 * 0.25; // every dot product
//! assert!((out[0] - v / (1.0 + (-v).exp())).abs() < 1e-3);
//! # Ok::<(), ggraph::Error>(())
//! ```
//!
//! Models: `ggraph::model::loaded::Model::load` places a GGUF (or a
//! random-weight model) on devices and `ggraph::context::Context` decodes
//! batches with a KV cache; `ggraph/examples/` has a runner in about 40
//! lines, a backend in one file, placement sweeps and memory plans.

#![warn(missing_docs)]

pub use ggraph_core as core;
pub use ggraph_core::*;
pub use ggraph_model as model;
pub use ggraph_model::{batch, context, kv};
pub use ggraph_rpc as rpc;

pub mod logs;
pub mod options;
pub mod progress;
pub mod runner;
pub mod sampling_args;
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
