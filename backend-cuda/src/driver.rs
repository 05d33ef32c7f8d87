//! The CUDA driver as a whole: initialisation and the devices it reports,
//! found once per process. Without libcuda the crate lists no devices.

use std::ffi::c_int;
use std::sync::Arc;

use cudarc::driver::sys as cu;
use ggraph_core::Result;
use ggraph_gpu::Runtime;
use ggraph_gpu::discovery::Driver;

use crate::libraries::driver_present;
use crate::runtime::CudaRuntime;
use crate::status::status;

/// libcuda, loaded at run time.
pub struct CudaDriver;

impl Driver for CudaDriver {
    const FAMILY: &'static str = "CUDA";

    fn device_count() -> Result<usize> {
        if !driver_present() {
            return Ok(0);
        }
        // SAFETY: the library is present; plain driver calls.
        unsafe {
            let r = cu::cuInit(0);
            if r == cu::CUresult::CUDA_ERROR_NO_DEVICE {
                return Ok(0);
            }
            status(r, "cuInit").map_err(|e| e.on(Self::FAMILY))?;
            let mut n: c_int = 0;
            status(cu::cuDeviceGetCount(&mut n), "cuDeviceGetCount")
                .map_err(|e| e.on(Self::FAMILY))?;
            Ok(n.max(0) as usize)
        }
    }

    fn open(ordinal: usize) -> Result<Arc<dyn Runtime>> {
        match CudaRuntime::open(ordinal) {
            Ok(rt) => Ok(Arc::new(rt)),
            Err(e) => Err(e.on(Self::FAMILY)),
        }
    }
}
