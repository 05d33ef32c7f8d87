//! The wgpu instance, the adapters it finds, and device ordinals.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The backends searched: Vulkan, Metal and DX12, plus GL with the `gl`
/// feature, narrowed by `WGPU_BACKEND` when it is set.
fn backends() -> wgpu::Backends {
    let mut allowed = wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12;
    if cfg!(feature = "gl") {
        allowed |= wgpu::Backends::GL;
    }
    match wgpu::Backends::from_env() {
        Some(asked) => allowed & asked,
        None => allowed,
    }
}

/// The process-wide instance (creating one is cheap, but adapters and
/// devices are tied to it, so one is kept).
pub(crate) fn instance() -> &'static wgpu::Instance {
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = backends();
        wgpu::Instance::new(desc)
    })
}

/// The adapters wgpu finds now, in its order.
pub(crate) fn enumerate() -> Vec<wgpu::Adapter> {
    let backends = backends();
    if backends.is_empty() {
        return Vec::new();
    }
    pollster::block_on(instance().enumerate_adapters(backends))
}

/// What an adapter is, for listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Position in wgpu's list; pass it to
    /// [`WgpuDevice::open`](crate::WgpuDevice::open).
    pub index: usize,
    /// The adapter's name as its driver gives it (lavapipe: `llvmpipe
    /// (LLVM ...)`).
    pub name: String,
    /// Vulkan, Metal, DX12 or GL.
    pub backend: String,
    /// Discrete, integrated, virtual or CPU (lavapipe is a CPU adapter).
    pub device_type: String,
    /// The driver's name and version details, as wgpu reports them; empty
    /// where the platform says nothing.
    pub driver: String,
}

/// The adapters wgpu finds, without opening devices on them.
pub fn adapters() -> Vec<AdapterSummary> {
    enumerate()
        .iter()
        .enumerate()
        .map(|(index, a)| {
            let info = a.get_info();
            AdapterSummary {
                index,
                name: info.name.clone(),
                backend: format!("{:?}", info.backend),
                device_type: format!("{:?}", info.device_type),
                driver: format!("{} {}", info.driver, info.driver_info)
                    .trim()
                    .to_string(),
            }
        })
        .collect()
}

/// The next free device ordinal: names are never reused in a process, so
/// that buffer types (compared by name) never collide.
pub(crate) fn next_ordinal() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
