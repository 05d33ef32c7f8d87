//! ggraph wgpu backend.
//!
//! Device discovery, buffers and kernels land with issue #5; until then the
//! crate registers the wgpu family with no devices, so that programs built
//! against the registry keep the same API when it arrives.

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};

/// The wgpu backend family.
#[derive(Default)]
pub struct Registration;

impl BackendRegistration for Registration {
    fn name(&self) -> &str {
        "wgpu"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        Vec::new()
    }
}
