//! The no-driver path of the CUDA registration.

use ggraph_core::backend::{BackendRegistration, DeviceKind};

#[test]
fn without_a_driver_the_cuda_backend_lists_no_devices_and_does_not_panic() {
    let reg = ggraph_cuda::Registration;
    assert_eq!(reg.name(), "CUDA");
    let first = reg.devices();
    let again = reg.devices();
    assert_eq!(first.len(), again.len(), "discovery is stable");
    if !ggraph_cuda::driver_present() {
        assert!(first.is_empty());
    }
    for d in &first {
        assert!(d.name().starts_with("cuda:"));
        assert_eq!(d.kind(), DeviceKind::Gpu);
    }
}
