//! Finding the devices of a runtime, once per process and never with a
//! panic: without the runtime's library, a driver or a GPU, a runtime
//! lists no devices.

use std::sync::{Arc, Mutex};

use ggraph_core::Result;

use crate::device::GpuDevice;
use crate::runtime::Runtime;

/// A runtime library as a whole (CUDA's driver, HIP's runtime): it counts
/// and opens the devices of this machine.
pub trait Driver {
    /// `CUDA` or `HIP`: in log lines, and in lower case as the prefix of
    /// device names (`cuda:0`).
    const FAMILY: &'static str;

    /// Initialises the runtime and counts its devices: 0 where the
    /// library, the driver or a GPU is missing.
    fn device_count() -> Result<usize>;

    /// Opens device `ordinal`.
    fn open(ordinal: usize) -> Result<Arc<dyn Runtime>>;
}

/// The devices found so far, by family.
type Found = Vec<(&'static str, Vec<Arc<GpuDevice>>)>;

/// The devices of `D`, found on its first call in the process and the same
/// list afterwards. A device that cannot be opened is skipped with a
/// warning; an error or a panic of the runtime (a binding that panics on a
/// missing symbol) means no devices.
pub fn devices<D: Driver>() -> Vec<Arc<GpuDevice>> {
    static FOUND: Mutex<Found> = Mutex::new(Vec::new());
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, devices)) = found.iter().find(|(family, _)| *family == D::FAMILY) {
        return devices.clone();
    }
    let devices = match std::panic::catch_unwind(open_all::<D>) {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            tracing::info!("{}: no devices ({e})", D::FAMILY);
            Vec::new()
        }
        Err(_) => {
            tracing::warn!(
                "{}: the runtime panicked during discovery; no devices",
                D::FAMILY
            );
            Vec::new()
        }
    };
    found.push((D::FAMILY, devices.clone()));
    devices
}

fn open_all<D: Driver>() -> Result<Vec<Arc<GpuDevice>>> {
    let prefix = D::FAMILY.to_lowercase();
    let mut out = Vec::new();
    for ordinal in 0..D::device_count()? {
        match D::open(ordinal) {
            Ok(rt) => out.push(GpuDevice::new(rt, &prefix)),
            Err(e) => tracing::warn!("{} device {ordinal} skipped: {e}", D::FAMILY),
        }
    }
    Ok(out)
}
