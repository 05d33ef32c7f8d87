//! The HIP runtime's entry points and result codes.
//!
//! hip-sys binds `hipError_t` as a Rust enum (`#[repr(u32)]`, generated
//! from HIP 5.4's header). A C function returning a code outside that enum
//! (a newer ROCm adds codes) would make the enum value undefined behaviour,
//! so the entry points used here are declared below returning a plain
//! `i32` instead; hip-sys provides the link to libamdhip64 (found through
//! HIP_PATH at build time) and the `hipDeviceProp_t` layout.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use ggraph_gpu::{Call, CallError};
// Keep hip-sys (and its link to libamdhip64) in the build.
pub use hip_sys::hiprt::hipDeviceProp_t;

pub type HipStream = *mut c_void;
pub type HipEvent = *mut c_void;
pub type HipModule = *mut c_void;
pub type HipFunction = *mut c_void;

pub const HIP_SUCCESS: i32 = 0;
pub const HIP_ERROR_NO_DEVICE: i32 = 100;
pub const HIP_ERROR_OUT_OF_MEMORY: i32 = 2;
pub const HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED: i32 = 704;
pub const MEMCPY_HOST_TO_DEVICE: c_int = 1;
pub const MEMCPY_DEVICE_TO_HOST: c_int = 2;
pub const MEMCPY_DEVICE_TO_DEVICE: c_int = 3;

#[link(name = "amdhip64")]
unsafe extern "C" {
    pub fn hipInit(flags: c_uint) -> i32;
    pub fn hipGetDeviceCount(count: *mut c_int) -> i32;
    pub fn hipSetDevice(device: c_int) -> i32;
    pub fn hipDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> i32;
    pub fn hipGetDeviceProperties(prop: *mut hipDeviceProp_t, device: c_int) -> i32;
    pub fn hipGetErrorName(error: i32) -> *const c_char;
    pub fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> i32;
    pub fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> i32;
    pub fn hipFree(ptr: *mut c_void) -> i32;
    pub fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> i32;
    pub fn hipHostFree(ptr: *mut c_void) -> i32;
    pub fn hipMemcpy(dst: *mut c_void, src: *const c_void, size: usize, kind: c_int) -> i32;
    pub fn hipMemcpyAsync(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: c_int,
        stream: HipStream,
    ) -> i32;
    pub fn hipMemset(dst: *mut c_void, value: c_int, size: usize) -> i32;
    pub fn hipMemsetAsync(dst: *mut c_void, value: c_int, size: usize, stream: HipStream) -> i32;
    pub fn hipDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) -> i32;
    pub fn hipDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> i32;
    pub fn hipMemcpyPeer(
        dst: *mut c_void,
        dst_dev: c_int,
        src: *const c_void,
        src_dev: c_int,
        size: usize,
    ) -> i32;
    pub fn hipMemcpyPeerAsync(
        dst: *mut c_void,
        dst_dev: c_int,
        src: *const c_void,
        src_dev: c_int,
        size: usize,
        stream: HipStream,
    ) -> i32;
    pub fn hipStreamCreate(stream: *mut HipStream) -> i32;
    pub fn hipStreamDestroy(stream: HipStream) -> i32;
    pub fn hipStreamSynchronize(stream: HipStream) -> i32;
    pub fn hipEventCreateWithFlags(event: *mut HipEvent, flags: c_uint) -> i32;
    pub fn hipEventDestroy(event: HipEvent) -> i32;
    pub fn hipEventRecord(event: HipEvent, stream: HipStream) -> i32;
    pub fn hipEventSynchronize(event: HipEvent) -> i32;
    pub fn hipStreamWaitEvent(stream: HipStream, event: HipEvent, flags: c_uint) -> i32;
    pub fn hipModuleLoadData(module: *mut HipModule, image: *const c_void) -> i32;
    pub fn hipModuleGetFunction(
        function: *mut HipFunction,
        module: HipModule,
        name: *const c_char,
    ) -> i32;
    pub fn hipModuleLaunchKernel(
        f: HipFunction,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared_bytes: c_uint,
        stream: HipStream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> i32;
}

/// The runtime's name for a result code (any value is safe to pass).
pub fn error_name(code: i32) -> String {
    // SAFETY: hipGetErrorName returns a static string for any input
    // ("hipErrorUnknown" for codes it does not know).
    let p = unsafe { hipGetErrorName(code) };
    if p.is_null() {
        return format!("HIP error {code}");
    }
    // SAFETY: a NUL-terminated static string.
    let name = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    format!("{name} ({code})")
}

/// The result of runtime entry point `call`.
pub fn status(code: i32, call: &'static str) -> Call {
    if code == HIP_SUCCESS {
        Ok(())
    } else {
        Err(CallError::Failed {
            call,
            code: error_name(code),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_result_codes_are_plain_numbers_not_undefined_enums() {
        // a code no HIP release defines: handled as an integer
        let e = status(123_456, "hipFoo")
            .unwrap_err()
            .on("hip:0")
            .to_string();
        assert!(e.contains("hipFoo failed") && e.contains("123456"), "{e}");
        assert!(status(HIP_SUCCESS, "hipFoo").is_ok());
    }
}
