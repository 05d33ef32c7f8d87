//! The GPU engine shared by the CUDA and HIP backends (and the host
//! emulator the tests run): devices, buffers, streams, the op dispatch and
//! the kernel source (`kernels/ggraph.cu`, one CUDA C file for CUDA, HIP
//! and the emulator). Each family supplies a thin [`Runtime`] (one driver
//! call per method) and a [`Driver`] (device count and opening); device
//! discovery, the module cache, copies and launches are written once here.
//!
//! Layers, each module importing only from the ones above it in this list:
//! - `runtime` (the trait a family implements), `source` (kernel text),
//!   `kernel_cache` (compiled kernels on disk), `program` (NVRTC / hiprtc
//!   call sequence), `supports` (what the kernels compute);
//! - `kernel_args` (the kernels' side of a launch), `kernel_module`
//!   (module and kernels loaded once per device);
//! - `gpu` (a runtime device with binding, errors, module and peer caches);
//! - `buffer` (device memory), then `pinned` (host memory) and `queue`
//!   (launches on one runtime stream);
//! - `dispatch` (graph node to launches on a queue);
//! - `stream` (the ggraph backend: splits, copies, events);
//! - `device` (the ggraph device), then `discovery` and `emulator`.
//!
//! # Example
//!
//! A family's devices come from [`discovery::devices`] over its
//! [`Driver`] (`ggraph_cuda::devices()` does this for CUDA). The host
//! emulator (the `emulator` feature, on in this crate's own tests) gives a
//! device that runs the same dispatch and kernels without a GPU:
//!
//! ```
//! use ggraph_core::backend::Device;
//! use ggraph_core::ir::GraphBuilder;
//! use ggraph_core::{DType, exec};
//! use ggraph_gpu::emulator::EmuRuntime;
//!
//! // device `emu:0` with 64 MiB of memory, kernels only (no BLAS)
//! let gpu = EmuRuntime::device(0, 64 << 20, false);
//! assert_eq!(gpu.name(), "emu:0");
//!
//! let mut b = GraphBuilder::new();
//! let w = b.weight("w", DType::F32, &[3, 2])?;
//! let x = b.input("x", DType::F32, &[3, 1])?;
//! let y = b.mul_mat(w, x)?;
//! b.set_output(y)?;
//! let mut graph = b.build();
//!
//! // every tensor in one buffer of device memory
//! let _buffer = exec::alloc_one_buffer(&mut graph, &gpu.buffer_type())?;
//! graph.write_f32(w, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! graph.write_f32(x, &[1.0, 1.0, 1.0])?;
//! exec::compute_on(gpu.as_ref(), &graph)?;
//! assert_eq!(graph.read_f32(y)?, [6.0, 15.0]);
//! # Ok::<(), ggraph_core::Error>(())
//! ```

#![warn(missing_docs)]

mod buffer;
mod device;
pub mod discovery;
mod dispatch;
#[cfg(feature = "emulator")]
pub mod emulator;
mod gpu;
mod kernel_args;
pub mod kernel_cache;
mod kernel_module;
mod pinned;
pub mod program;
mod queue;
pub mod runtime;
pub mod source;
mod stream;
mod supports;

pub use buffer::{DEVICE_ALIGNMENT, GpuBuffer, GpuBufferType};
pub use device::GpuDevice;
pub use discovery::Driver;
pub use dispatch::MMV_MAX_COLS;
pub use kernel_args::KTensor;
pub use pinned::{PinnedBuffer, PinnedBufferType};
pub use runtime::{
    Call, CallError, CopyKind, DevPtr, DeviceInfo, Gemm, LaunchSpec, MemCopy, RawEvent,
    RawFunction, RawModule, RawStream, Runtime,
};
pub use stream::{GpuEvent, GpuStream};
pub use supports::{MAX_FA_HEAD, MAX_SORT_ROW, gpu_supports};
