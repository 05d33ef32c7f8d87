//! The conformance suite on the host emulator: the real dispatch code and
//! the real kernels of `kernels/ggraph.cu` (compiled as C++ and run with
//! threads as fibers), against the f64 reference. This is what a GPU runs,
//! minus the driver and cuBLAS itself.

use std::sync::Arc;

use ggraph_conformance as conformance;
use ggraph_core::backend::Device;
use ggraph_gpu::emulator::EmuRuntime;

fn check(dev: Arc<dyn Device>) {
    let report = conformance::run(&dev);
    println!("{}", report.summary());
    assert_eq!(
        report.unsupported(),
        0,
        "every case of the suite is within the GPU kernels' limits"
    );
    report.check().unwrap();
}

#[test]
fn emulated_gpu_with_blas_passes_the_conformance_suite() {
    check(EmuRuntime::device(0, 1 << 30, true));
}

#[test]
fn emulated_gpu_with_kernels_only_passes_the_conformance_suite() {
    // without BLAS, float mul_mat goes through the tiled kernel
    check(EmuRuntime::device(1, 1 << 30, false));
}
