//! Driver result codes as the engine's [`Call`] results.
//!
//! cudarc maps `CUresult` to a Rust enum generated from CUDA 12.8's
//! header; drivers return codes from that set for every call made here,
//! so the enum is matched only against success and a few named errors.

use std::ffi::{CStr, c_char};

use cudarc::driver::sys as cu;
use ggraph_gpu::{Call, CallError};

/// The driver's name for a result code.
pub fn error_name(r: cu::CUresult) -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string.
    let ok = unsafe { cu::cuGetErrorName(r, &mut p) } == cu::CUresult::CUDA_SUCCESS;
    if ok && !p.is_null() {
        // SAFETY: a NUL-terminated static string from the driver.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("{r:?}")
    }
}

/// The result of driver entry point `call`.
pub fn status(r: cu::CUresult, call: &'static str) -> Call {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CallError::Failed {
            call,
            code: error_name(r),
        })
    }
}
