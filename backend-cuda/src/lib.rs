//! ggraph CUDA backend.
//!
//! Device discovery, buffers and kernels land with issue #6; until then the
//! crate registers the CUDA family with no devices, so that programs built
//! against the registry keep the same API when it arrives.

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};

/// The CUDA backend family.
#[derive(Default)]
pub struct Registration;

impl BackendRegistration for Registration {
    fn name(&self) -> &str {
        "CUDA"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        Vec::new()
    }
}
