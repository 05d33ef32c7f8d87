//! Finding a wgpu device for the tests.

use std::io::Write;
use std::sync::Arc;

use ggraph_wgpu::WgpuDevice;

/// The first wgpu device, or `None` (with a printed message) when this
/// machine has no adapter. With `GGRAPH_REQUIRE_WGPU=1` (set by
/// scripts/test, which installs lavapipe) a missing adapter fails the test
/// instead.
#[allow(dead_code)]
pub fn device_or_skip(test: &str) -> Option<Arc<WgpuDevice>> {
    let devices = ggraph_wgpu::devices();
    if let Some(d) = devices.first() {
        return Some(d.clone());
    }
    let adapters = ggraph_wgpu::adapters();
    if std::env::var("GGRAPH_REQUIRE_WGPU").as_deref() == Ok("1") {
        panic!(
            "{test}: GGRAPH_REQUIRE_WGPU=1 but no wgpu device could be opened (adapters: {adapters:?}); \
             install mesa-vulkan-drivers and libvulkan1 for lavapipe"
        );
    }
    // straight to the stream (print macros are captured by the test
    // harness), so that a skip is seen in every test run
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: no wgpu adapter on this machine (install mesa-vulkan-drivers and \
         libvulkan1 for lavapipe, or set GGRAPH_REQUIRE_WGPU=1 to make this an error)"
    );
    None
}
