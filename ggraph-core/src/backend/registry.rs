//! The registry of compiled-in backends and their devices.

use std::sync::Arc;

use super::Device;

/// One backend family (CPU, CUDA, wgpu, ...) that can list its devices.
pub trait BackendRegistration: Send + Sync {
    /// Family name, e.g. `CPU`, `CUDA`, `wgpu`.
    fn name(&self) -> &str;

    /// The devices found. A backend without hardware or driver returns an
    /// empty list, never an error or a panic.
    fn devices(&self) -> Vec<Arc<dyn Device>>;
}

/// All backends compiled into a program. A backend that is not compiled in
/// simply contributes no devices.
#[derive(Default)]
pub struct Registry {
    backends: Vec<Box<dyn BackendRegistration>>,
}

impl Registry {
    /// A registry with no backends.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a backend family; its devices follow those of the families
    /// registered before it.
    pub fn register(&mut self, backend: Box<dyn BackendRegistration>) {
        self.backends.push(backend);
    }

    /// The registered families, in registration order.
    pub fn backends(&self) -> impl Iterator<Item = &dyn BackendRegistration> {
        self.backends.iter().map(|b| b.as_ref())
    }

    /// Every device of every backend, in registration order. Each call asks
    /// the backends again.
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.backends.iter().flat_map(|b| b.devices()).collect()
    }

    /// The device with this name.
    pub fn device(&self, name: &str) -> Option<Arc<dyn Device>> {
        self.devices().into_iter().find(|d| d.name() == name)
    }
}
