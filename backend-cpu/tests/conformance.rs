//! The core conformance suite on the CPU and on a simulated device.

use std::sync::Arc;

use ggraph_core::backend::Device;
use ggraph_core::conformance;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

#[test]
fn cpu_passes_the_conformance_suite() {
    let dev: Arc<dyn Device> = CpuDevice::new();
    let report = conformance::run(&dev);
    println!("{}", report.summary());
    assert_eq!(report.unsupported(), 0, "the CPU must support every case");
    report.check().unwrap();
}

#[test]
fn simulated_device_passes_the_conformance_suite() {
    let dev: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(1 << 30));
    let report = conformance::run(&dev);
    println!("{}", report.summary());
    assert_eq!(report.unsupported(), 0);
    report.check().unwrap();
}
