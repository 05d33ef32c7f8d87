//! The core conformance suite on the wgpu device (lavapipe in CI): every
//! op, type and layout of the suite, against the f64 reference.

mod common;

use std::sync::Arc;
use std::time::Instant;

use ggraph_conformance as conformance;
use ggraph_core::backend::Device;

#[test]
fn wgpu_passes_the_conformance_suite() {
    let Some(dev) = common::device_or_skip("wgpu_passes_the_conformance_suite") else {
        return;
    };
    let dev: Arc<dyn Device> = dev;
    let start = Instant::now();
    let filter = std::env::var("GGRAPH_CONFORMANCE_FILTER").unwrap_or_default();
    let report = conformance::run_filtered(&dev, |name| name.contains(filter.as_str()));
    println!("{}", report.summary());
    println!(
        "{} ({}): {:.1} s",
        dev.name(),
        dev.description(),
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        report.unsupported(),
        0,
        "the wgpu backend claims every op and type of the suite"
    );
    report.check().unwrap();
}
