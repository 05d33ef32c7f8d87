//! Memory figures of a wgpu device.
//!
//! wgpu has no portable free-memory call, so each device reports what its
//! platform gives; see the crate documentation for the order of choices.

use ggraph_core::backend::{MemoryInfo, MemorySource};

/// How a device knows its memory, fixed when it is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// `GGRAPH_WGPU_MEMORY`: a declared budget, enforced at allocation.
    Declared(u64),
    /// Vulkan with `VK_EXT_memory_budget`: asked on every query.
    VulkanExt,
    /// Vulkan without the extension: the largest device-local heap.
    VulkanHeap(u64),
    /// No platform figure: the adapter's largest buffer size.
    MaxBuffer(u64),
}

/// A device's memory figures with the reason for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Free and total bytes and their source, as `Device::memory` returns
    /// them. Free is total minus ggraph's allocations for a declared
    /// budget, or the driver's budget minus its usage (all processes).
    pub info: MemoryInfo,
    /// Bytes of buffers ggraph holds on the device.
    pub allocated_bytes: u64,
    /// Where the figures come from, in words.
    pub how: String,
}

/// Decides how a device on `adapter` will report memory.
pub(crate) fn budget_for(adapter: &wgpu::Adapter, limits: &wgpu::Limits) -> Budget {
    if let Ok(v) = std::env::var("GGRAPH_WGPU_MEMORY") {
        match ggraph_core::util::parse_bytes(v.trim()) {
            Ok(bytes) => return Budget::Declared(bytes),
            Err(e) => tracing::warn!("GGRAPH_WGPU_MEMORY={v} ignored: {e}"),
        }
    }
    if let Some(v) = vulkan::query(adapter) {
        return if v.budget.is_some() {
            Budget::VulkanExt
        } else {
            Budget::VulkanHeap(v.heap_bytes)
        };
    }
    Budget::MaxBuffer(limits.max_buffer_size)
}

impl Budget {
    /// The budget allocations are checked against, if ggraph enforces one.
    pub(crate) fn enforced_limit(&self) -> Option<u64> {
        match *self {
            Budget::Declared(b) | Budget::VulkanHeap(b) | Budget::MaxBuffer(b) => Some(b),
            Budget::VulkanExt => None,
        }
    }

    /// The memory figures of a device on `adapter` that holds `allocated`
    /// bytes of buffers.
    pub(crate) fn report(&self, adapter: &wgpu::Adapter, allocated: u64) -> MemoryReport {
        let declared = |total: u64, how: String| MemoryReport {
            info: MemoryInfo {
                free_bytes: total.saturating_sub(allocated),
                total_bytes: total,
                source: MemorySource::DeclaredBudget,
            },
            allocated_bytes: allocated,
            how,
        };
        match *self {
            Budget::Declared(b) => declared(
                b,
                "declared budget (GGRAPH_WGPU_MEMORY) minus ggraph's allocations".into(),
            ),
            Budget::VulkanHeap(b) => declared(
                b,
                "largest device-local Vulkan heap minus ggraph's allocations (no VK_EXT_memory_budget)"
                    .into(),
            ),
            Budget::MaxBuffer(b) => declared(
                b,
                "the adapter's largest buffer size minus ggraph's allocations (no platform memory query)"
                    .into(),
            ),
            Budget::VulkanExt => match vulkan::query(adapter).and_then(|v| v.budget) {
                Some((budget, usage)) => MemoryReport {
                    info: MemoryInfo {
                        free_bytes: budget.saturating_sub(usage),
                        total_bytes: budget,
                        source: MemorySource::Driver,
                    },
                    allocated_bytes: allocated,
                    how: "Vulkan memory budget (VK_EXT_memory_budget) of the device-local heaps".into(),
                },
                None => declared(0, "Vulkan memory budget query failed".into()),
            },
        }
    }
}

/// What the Vulkan driver says about device-local memory.
#[allow(dead_code)]
pub(crate) struct VulkanMemory {
    /// Size of the largest device-local heap.
    pub heap_bytes: u64,
    /// (budget, usage) summed over device-local heaps, when the driver has
    /// `VK_EXT_memory_budget`.
    pub budget: Option<(u64, u64)>,
}

#[cfg(not(any(target_vendor = "apple", target_family = "wasm")))]
mod vulkan {
    use ash::vk;

    use super::VulkanMemory;

    /// The device-local heaps of a Vulkan adapter; `None` for other
    /// backends.
    pub(crate) fn query(adapter: &wgpu::Adapter) -> Option<VulkanMemory> {
        // SAFETY: the hal adapter is only read through, for as long as the
        // guard lives; nothing is destroyed.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
        let instance = hal.shared_instance().raw_instance();
        let physical = hal.raw_physical_device();
        let has_budget = hal
            .physical_device_capabilities()
            .supports_extension(ash::ext::memory_budget::NAME);
        let heaps = |props: &vk::PhysicalDeviceMemoryProperties| {
            props.memory_heaps[..props.memory_heap_count as usize]
                .iter()
                .enumerate()
                .filter(|(_, h)| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
                .map(|(i, h)| (i, h.size))
                .collect::<Vec<_>>()
        };
        if has_budget {
            let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
            let mut props2 = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
            // SAFETY: the extension is supported, which implies
            // VK_KHR_get_physical_device_properties2 / Vulkan 1.1, and the
            // structures are correctly chained.
            unsafe { instance.get_physical_device_memory_properties2(physical, &mut props2) };
            let local = heaps(&props2.memory_properties);
            let heap_bytes = local.iter().map(|h| h.1).max().unwrap_or(0);
            let (b, u) = local.iter().fold((0u64, 0u64), |(b, u), (i, _)| {
                (b + budget.heap_budget[*i], u + budget.heap_usage[*i])
            });
            Some(VulkanMemory {
                heap_bytes,
                budget: Some((b, u)),
            })
        } else {
            // SAFETY: a Vulkan 1.0 query on a valid physical device.
            let props = unsafe { instance.get_physical_device_memory_properties(physical) };
            let heap_bytes = heaps(&props).iter().map(|h| h.1).max().unwrap_or(0);
            Some(VulkanMemory {
                heap_bytes,
                budget: None,
            })
        }
    }
}

#[cfg(any(target_vendor = "apple", target_family = "wasm"))]
mod vulkan {
    use super::VulkanMemory;

    pub(crate) fn query(_adapter: &wgpu::Adapter) -> Option<VulkanMemory> {
        None
    }
}
