//! ggraph wgpu backend: WGSL compute kernels on any Vulkan, Metal or DX12
//! adapter, including Mesa's lavapipe (a Vulkan driver on the CPU), so that
//! it runs for real on machines without a GPU.
//!
//! # Devices
//!
//! One ggraph device per wgpu adapter, named `wgpu:0`, `wgpu:1`, ... in the
//! order wgpu lists them. The OpenGL fallback is skipped unless the crate's
//! `gl` feature is on. `WGPU_BACKEND` (e.g. `vulkan`) narrows the search as
//! in every wgpu program. A machine without an adapter lists no device.
//!
//! [`WgpuDevice::open`] opens one more logical device on an adapter (for
//! multi-device tests on one GPU); every device, and its buffer type, gets
//! a name no other device of the process has, because two wgpu devices can
//! never share buffers even on the same adapter.
//!
//! # Memory
//!
//! wgpu has no portable free-memory query. A device reports, in this order:
//! 1. `GGRAPH_WGPU_MEMORY` (e.g. `2GiB`) if set: a declared budget minus what
//!    ggraph has allocated on the device ([`MemorySource::DeclaredBudget`]);
//!    allocations beyond it fail;
//! 2. on Vulkan with `VK_EXT_memory_budget`: the driver's budget and usage of
//!    the device-local heaps ([`MemorySource::Driver`]);
//! 3. on Vulkan without it: the size of the largest device-local heap as the
//!    budget, minus what ggraph allocated ([`MemorySource::DeclaredBudget`]);
//! 4. elsewhere: the adapter's largest buffer size as the budget, minus what
//!    ggraph allocated ([`MemorySource::DeclaredBudget`]).
//!
//! [`WgpuDevice::memory_report`] says which one a device uses.
//!
//! # Kernels
//!
//! Every op of the IR has a WGSL kernel (see `kernels/`): f32, f16 and
//! bf16 everywhere (16-bit values are read and written as halves of 32-bit
//! words, so no shader-f16 support is needed), and the quantised types read
//! directly in the kernels (mul_mat, mul_mat_id, get_rows, flash attention
//! and copies dequantise on the device; copies into quantised tensors
//! quantise on the device). Pipelines are built once per (kernel, types,
//! specialisation) and cached per device. An index outside its tensor
//! (get_rows, set_rows, mul_mat_id) is reported by the next synchronize.
//!
//! `supports_op` refuses, so that the scheduler places them elsewhere:
//! tensors larger than one storage binding (lavapipe: 128 MiB), except the
//! 2-d weights of mul_mat and sources of get_rows, which are read in
//! windows of rows; argsort and top_k of rows longer than 16384 values;
//! flash attention with value rows longer than 512; layouts whose offsets
//! or strides split an element's word (f32 at an offset that is not a
//! multiple of 4, ...); tensors of 2^31 elements or more.
//!
//! # Layout
//!
//! Each module imports only from those before it in this list:
//! `options`, `memory`, `pipeline_cache`, `context` (none from the crate);
//! `gpu` (the handle every buffer, stream and kernel of a device shares);
//! `buffer`; `kernels`; `supports`; `stream`; `device`; `registry`.
//!
//! # Example
//!
//! Lists the adapters and the registry's devices, then runs a matrix
//! product on the first device if there is one. On a machine without an
//! adapter both lists are empty and nothing runs.
//!
//! ```
//! use ggraph_core::backend::Device;
//! use ggraph_core::ir::GraphBuilder;
//! use ggraph_core::{DType, exec};
//!
//! for a in ggraph_wgpu::adapters() {
//!     println!("adapter {}: {} ({}, {})", a.index, a.name, a.backend, a.device_type);
//! }
//! let devices = ggraph_wgpu::devices();
//! for d in &devices {
//!     let report = d.memory_report();
//!     println!("{}: {} bytes free ({})", d.name(), report.info.free_bytes, report.how);
//! }
//!
//! if let Some(gpu) = devices.first() {
//!     let mut b = GraphBuilder::new();
//!     let w = b.weight("w", DType::F32, &[3, 2])?;
//!     let x = b.input("x", DType::F32, &[3, 1])?;
//!     let y = b.mul_mat(w, x)?;
//!     b.set_output(y)?;
//!     let mut graph = b.build();
//!     let _buffer = exec::alloc_one_buffer(&mut graph, &gpu.buffer_type())?;
//!     graph.write_f32(w, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//!     graph.write_f32(x, &[1.0, 1.0, 1.0])?;
//!     exec::compute_on(gpu.as_ref(), &graph)?;
//!     assert_eq!(graph.read_f32(y)?, [6.0, 15.0]);
//! }
//! # Ok::<(), ggraph_core::Error>(())
//! ```

#![warn(missing_docs)]

mod buffer;
mod context;
mod device;
mod gpu;
mod kernels;
mod memory;
mod options;
mod pipeline_cache;
mod registry;
mod stream;
mod supports;

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};

pub use buffer::{WgpuBuffer, WgpuBufferType};
pub use context::{AdapterSummary, adapters};
pub use device::WgpuDevice;
pub use ggraph_core::backend::MemorySource;
pub use memory::MemoryReport;
pub use options::{MatmulKernel, WgpuOptions};
pub use stream::{WgpuEvent, WgpuStream};

/// The wgpu backend family: one device per adapter, opened the first time
/// the devices are asked for and shared by every registry afterwards.
#[derive(Default)]
pub struct Registration;

impl BackendRegistration for Registration {
    fn name(&self) -> &str {
        "wgpu"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        registry::registry_devices()
            .iter()
            .map(|d| d.clone() as Arc<dyn Device>)
            .collect()
    }
}

/// The devices of the registry (one per adapter), as their own type.
pub fn devices() -> Vec<Arc<WgpuDevice>> {
    registry::registry_devices().to_vec()
}
