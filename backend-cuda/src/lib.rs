//! ggraph CUDA backend, and the GPU engine it shares with the HIP backend.
//!
//! - [`engine`]: devices, buffers, streams and the op dispatch over a thin
//!   [`engine::Runtime`] trait, and the kernel source (`kernels/ggraph.cu`,
//!   one CUDA C file for CUDA and HIP).
//! - CUDA through cudarc with the driver, NVRTC and cuBLAS loaded at run
//!   time: the crate builds without CUDA installed, and where there is no
//!   driver it lists no devices and never panics.
//! - `emu` (feature `emulator`): the same kernels compiled as C++ and run
//!   on the CPU, so the tests check the kernels and the dispatch without a
//!   GPU.

pub mod cuda;
#[cfg(feature = "emulator")]
pub mod emu;
pub mod engine;

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};

/// The CUDA backend family: one device per GPU the driver reports.
#[derive(Default)]
pub struct Registration;

impl BackendRegistration for Registration {
    fn name(&self) -> &str {
        "CUDA"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        cuda::devices()
            .into_iter()
            .map(|d| d as Arc<dyn Device>)
            .collect()
    }
}
