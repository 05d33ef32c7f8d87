//! The registry's devices: one per adapter, opened the first time they are
//! asked for and shared by every registry afterwards.

use std::sync::{Arc, OnceLock};

use crate::context;
use crate::device::WgpuDevice;

/// One device per adapter, opened on first use. An adapter whose device
/// cannot be opened is skipped with a warning.
pub(crate) fn registry_devices() -> &'static [Arc<WgpuDevice>] {
    static DEVICES: OnceLock<Vec<Arc<WgpuDevice>>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        context::enumerate()
            .into_iter()
            .enumerate()
            .filter_map(|(i, adapter)| match WgpuDevice::open_registry(adapter) {
                Ok(d) => Some(d),
                Err(e) => {
                    tracing::warn!("wgpu adapter {i} skipped: {e}");
                    None
                }
            })
            .collect()
    })
}
