//! ggraph CUDA backend: the GPU engine of `ggraph-gpu` (devices, buffers,
//! streams, dispatch and the one kernel source) over CUDA, through cudarc
//! with the driver, NVRTC and cuBLAS loaded at run time: the crate builds
//! without CUDA installed, and where there is no driver it lists no
//! devices and never panics.
//!
//! cudarc's bindings panic when a library or symbol is missing, so every
//! entry is guarded: the presence checks of `libraries` before the first
//! call into a library, only long-standing driver symbols, and device
//! discovery inside `catch_unwind` (in the engine) as a last resort.
//!
//! Layers, each module importing only from the ones above it:
//! `libraries` (which libraries exist) and `status` (result codes);
//! `nvrtc` (kernel compilation) and `cublas` (matrix products);
//! `runtime` (one device: the engine's `Runtime`); `driver` (discovery).
//!
//! # Example
//!
//! Listing the GPUs runs anywhere: without a driver or a GPU the list is
//! empty.
//!
//! ```
//! use ggraph_core::backend::{Device, Registry};
//!
//! for gpu in ggraph_cuda::devices() {
//!     let memory = gpu.memory();
//!     println!(
//!         "{}: {}, {} of {} bytes free",
//!         gpu.name(),
//!         gpu.description(),
//!         memory.free_bytes,
//!         memory.total_bytes
//!     );
//! }
//!
//! // As one family of a registry, beside the other backends compiled in:
//! let mut registry = Registry::new();
//! registry.register(Box::new(ggraph_cuda::Registration));
//! assert!(registry.devices().iter().all(|d| d.name().starts_with("cuda:")));
//! ```

#![warn(missing_docs)]

mod cublas;
mod driver;
mod libraries;
mod nvrtc;
mod runtime;
mod status;

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};
use ggraph_gpu::GpuDevice;

pub use libraries::{cublas_present, driver_present, nvrtc_present};
pub use runtime::CudaRuntime;

/// Compiles the kernel source with NVRTC for `target` (`sm_90` gives a
/// cubin, `compute_80` PTX), as a device of that architecture would at its
/// first kernel: no driver or GPU needed, only NVRTC. The error carries
/// NVRTC's log.
pub fn compile_kernels(target: &str) -> std::result::Result<Vec<u8>, String> {
    let source = ggraph_gpu::source::full_source(ggraph_gpu::source::COMPAT_CUDA);
    nvrtc::compile(
        &source,
        &runtime::compile_options(target),
        target.starts_with("sm_"),
    )
}

/// NVRTC's version (`12.8`), where the library is present.
pub fn nvrtc_version() -> Option<String> {
    nvrtc::version()
}

/// The CUDA devices of this machine, found once per process; empty
/// without a driver or a GPU.
pub fn devices() -> Vec<Arc<GpuDevice>> {
    ggraph_gpu::discovery::devices::<driver::CudaDriver>()
}

/// The CUDA backend family: one device per GPU the driver reports.
#[derive(Default)]
pub struct Registration;

impl BackendRegistration for Registration {
    fn name(&self) -> &str {
        "CUDA"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        devices()
            .into_iter()
            .map(|d| d as Arc<dyn Device>)
            .collect()
    }
}
