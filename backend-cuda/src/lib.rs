//! ggraph CUDA backend: the GPU engine of `ggraph-gpu` (devices, buffers,
//! streams, dispatch and the one kernel source) over CUDA, through cudarc
//! with the driver, NVRTC and cuBLAS loaded at run time: the crate builds
//! without CUDA installed, and where there is no driver it lists no
//! devices and never panics.

pub mod cuda;

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
