//! ggraph HIP backend: the GPU engine of `ggraph-gpu` (devices, buffers,
//! streams, dispatch and the one kernel source) over the HIP runtime, with
//! the kernels compiled at run time by hiprtc for the device's `gfx`
//! architecture. hipBLAS is not used: matrix products run on the shared
//! kernels (mat-vec and tiled).
//!
//! The runtime is behind the `hip` feature (it needs ROCm at build time).
//! Without the feature, or without an AMD GPU, the backend lists no
//! devices.
//!
//! Layers, each module importing only from the ones above it:
//! `hip_api` (entry points and result codes) and `hiprtc` (kernel
//! compilation); `runtime` (one device: the engine's `Runtime`);
//! `driver` (discovery).
//!
//! # Example
//!
//! The registration compiles and runs with or without the `hip` feature;
//! without it, or without an AMD GPU, it lists no devices.
//!
//! ```
//! use ggraph_core::backend::{BackendRegistration, Device};
//!
//! let devices = ggraph_hip::Registration.devices();
//! if !ggraph_hip::compiled_in() {
//!     assert!(devices.is_empty());
//! }
//! for gpu in &devices {
//!     // `hip:0`, `hip:1`, ...
//!     println!("{}: {}", gpu.name(), gpu.description());
//! }
//! ```

#![warn(missing_docs)]

#[cfg(feature = "hip")]
mod driver;
#[cfg(feature = "hip")]
mod hip_api;
#[cfg(feature = "hip")]
mod hiprtc;
#[cfg(feature = "hip")]
mod runtime;

use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, Device};

/// The HIP backend family.
#[derive(Default)]
pub struct Registration;

impl BackendRegistration for Registration {
    fn name(&self) -> &str {
        "HIP"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        devices()
            .into_iter()
            .map(|d| d as Arc<dyn Device>)
            .collect()
    }
}

#[cfg(feature = "hip")]
pub use runtime::HipRuntime;

/// The HIP devices of this machine, found once per process; empty without
/// an AMD GPU, and in a build without the feature `hip`.
pub fn devices() -> Vec<Arc<ggraph_gpu::GpuDevice>> {
    #[cfg(feature = "hip")]
    {
        ggraph_gpu::discovery::devices::<driver::HipDriver>()
    }
    #[cfg(not(feature = "hip"))]
    {
        Vec::new()
    }
}

/// Whether the HIP runtime is compiled into this build.
pub const fn compiled_in() -> bool {
    cfg!(feature = "hip")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_never_panics_and_lists_only_hip_devices() {
        let d = Registration.devices();
        assert_eq!(Registration.name(), "HIP");
        if !compiled_in() {
            assert!(d.is_empty());
        }
        for dev in d {
            assert!(dev.name().starts_with("hip:"));
        }
    }
}
