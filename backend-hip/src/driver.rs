//! The HIP runtime as a whole: initialisation and the devices it reports,
//! found once per process. Without an AMD GPU, hipGetDeviceCount answers
//! hipErrorNoDevice and the backend lists no devices.

use std::ffi::c_int;
use std::sync::Arc;

use ggraph_core::Result;
use ggraph_gpu::Runtime;
use ggraph_gpu::discovery::Driver;

use crate::hip_api::{HIP_ERROR_NO_DEVICE, HIP_SUCCESS, hipGetDeviceCount, hipInit, status};
use crate::runtime::HipRuntime;

/// libamdhip64, linked at build time.
pub struct HipDriver;

impl Driver for HipDriver {
    const FAMILY: &'static str = "HIP";

    fn device_count() -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: plain runtime calls with valid out-pointers.
        let r = unsafe { hipGetDeviceCount(&mut n) };
        if r == HIP_ERROR_NO_DEVICE || (r == HIP_SUCCESS && n <= 0) {
            return Ok(0);
        }
        status(r, "hipGetDeviceCount").map_err(|e| e.on(Self::FAMILY))?;
        // SAFETY: as above.
        status(unsafe { hipInit(0) }, "hipInit").map_err(|e| e.on(Self::FAMILY))?;
        Ok(n as usize)
    }

    fn open(ordinal: usize) -> Result<Arc<dyn Runtime>> {
        match HipRuntime::open(ordinal) {
            Ok(rt) => Ok(Arc::new(rt)),
            Err(e) => Err(e.on(&format!("hip:{ordinal}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_amd_gpu_means_no_devices_and_no_panic() {
        let d = ggraph_gpu::discovery::devices::<HipDriver>();
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer.
        let rc = unsafe { hipGetDeviceCount(&mut n) };
        if rc != HIP_SUCCESS || n == 0 {
            assert!(
                d.is_empty(),
                "hipGetDeviceCount gave {rc}, devices {}",
                d.len()
            );
        } else {
            assert_eq!(d.len(), n as usize);
        }
    }
}
