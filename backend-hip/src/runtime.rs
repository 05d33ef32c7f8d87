//! One HIP device under the GPU engine: the HIP runtime, one call per
//! method. The engine makes the device current before each call
//! ([`Runtime::bind`]). hipBLAS is not used: matrix products run on the
//! shared kernels.

use std::any::Any;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::null_mut;

use ggraph_gpu::kernel_cache;
use ggraph_gpu::source::{self, COMPAT_HIP};
use ggraph_gpu::{
    Call, CallError, CopyKind, DevPtr, DeviceInfo, LaunchSpec, MemCopy, RawEvent, RawFunction,
    RawModule, RawStream, Runtime,
};

use crate::hip_api::*;
use crate::hiprtc;

/// One HIP device as the engine's [`Runtime`](ggraph_gpu::Runtime), with
/// kernels compiled by hiprtc for its `gfx` architecture and no BLAS.
/// Discovery opens it; from a device, reach it with
/// `GpuDevice::runtime().as_any().downcast_ref::<HipRuntime>()`.
pub struct HipRuntime {
    info: DeviceInfo,
}

// SAFETY: HIP handles may be used from any thread once the device is made
// current (the engine binds it before every call).
unsafe impl Send for HipRuntime {}
unsafe impl Sync for HipRuntime {}

/// The `gfx` architecture of device `dev` from its properties, or empty.
///
/// # Safety
/// The runtime is initialised and `dev` is one of its devices.
unsafe fn gcn_arch(dev: c_int) -> String {
    // the properties inside a larger zeroed buffer, in case the library's
    // struct is larger than the bindings' one
    #[repr(C)]
    union Props {
        p: std::mem::ManuallyDrop<hipDeviceProp_t>,
        raw: [u8; 16384],
    }
    let mut props = Props { raw: [0; 16384] };
    // SAFETY: caller's contract; the buffer is large enough.
    unsafe {
        if hipGetDeviceProperties(&mut *props.p, dev) != HIP_SUCCESS {
            return String::new();
        }
        let bytes: Vec<u8> = props
            .p
            .gcnArchName
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8(bytes)
            .ok()
            .filter(|s| s.starts_with("gfx"))
            .unwrap_or_default()
    }
}

impl HipRuntime {
    /// Device `ordinal` of the initialised runtime.
    pub(crate) fn open(ordinal: usize) -> Call<HipRuntime> {
        let dev = ordinal as c_int;
        let mut buf = [0 as c_char; 256];
        // SAFETY: plain queries with valid out-pointers.
        let name = unsafe {
            status(
                hipDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev),
                "hipDeviceGetName",
            )?;
            CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
        };
        // SAFETY: as above.
        let arch = unsafe { gcn_arch(dev) };
        Ok(HipRuntime {
            info: DeviceInfo {
                family: "HIP",
                ordinal,
                name,
                arch: if arch.is_empty() {
                    "gfx-current".into()
                } else {
                    arch
                },
                compute_capability: None,
                // ggml's HIP backend counts an APU's memory as the driver
                // reports it
                integrated: false,
                free_from_host: false,
            },
        })
    }

    fn label(&self) -> String {
        format!("hip:{}", self.info.ordinal)
    }

    fn peer(other: &dyn Runtime) -> Call<&HipRuntime> {
        other
            .as_any()
            .downcast_ref::<HipRuntime>()
            .ok_or_else(|| CallError::Other("not a HIP device".into()))
    }
}

impl Runtime for HipRuntime {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn bind(&self) -> Call {
        // SAFETY: a valid ordinal.
        status(
            unsafe { hipSetDevice(self.info.ordinal as c_int) },
            "hipSetDevice",
        )
    }

    fn memory(&self) -> Call<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        status(
            unsafe { hipMemGetInfo(&mut free, &mut total) },
            "hipMemGetInfo",
        )?;
        Ok((free as u64, total as u64))
    }

    /// One hipMalloc; the graph allocator subdivides it. Free memory is not
    /// consulted here: the driver says when the device is full.
    fn alloc(&self, bytes: usize) -> Call<DevPtr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        match unsafe { hipMalloc(&mut p, bytes) } {
            HIP_ERROR_OUT_OF_MEMORY => Err(CallError::OutOfMemory),
            rc => status(rc, "hipMalloc").map(|()| p as DevPtr),
        }
    }

    unsafe fn free(&self, ptr: DevPtr) -> Call {
        // SAFETY: caller's contract.
        status(unsafe { hipFree(ptr as *mut c_void) }, "hipFree")
    }

    fn alloc_pinned(&self, bytes: usize) -> Call<*mut u8> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; 1 = hipHostMallocPortable.
        status(unsafe { hipHostMalloc(&mut p, bytes, 1) }, "hipHostMalloc")?;
        Ok(p as *mut u8)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Call {
        // SAFETY: caller's contract.
        status(unsafe { hipHostFree(ptr as *mut c_void) }, "hipHostFree")
    }

    /// hipMemcpy takes the direction as an argument.
    unsafe fn memcpy(&self, c: &MemCopy) -> Call {
        let (dst, src, len) = (c.dst as *mut c_void, c.src as *const c_void, c.len);
        let kind = match c.kind {
            CopyKind::HostToDevice => MEMCPY_HOST_TO_DEVICE,
            CopyKind::DeviceToHost => MEMCPY_DEVICE_TO_HOST,
            CopyKind::DeviceToDevice => MEMCPY_DEVICE_TO_DEVICE,
        };
        // SAFETY: caller's contract.
        let rc = unsafe {
            match c.stream {
                Some(s) => hipMemcpyAsync(dst, src, len, kind, s as HipStream),
                None => hipMemcpy(dst, src, len, kind),
            }
        };
        status(rc, "hipMemcpy")
    }

    unsafe fn memset(&self, dst: DevPtr, value: u8, len: usize, stream: Option<RawStream>) -> Call {
        let (dst, value) = (dst as *mut c_void, value as c_int);
        // SAFETY: caller's contract.
        let rc = unsafe {
            match stream {
                Some(s) => hipMemsetAsync(dst, value, len, s as HipStream),
                None => hipMemset(dst, value, len),
            }
        };
        status(rc, "hipMemset")
    }

    fn can_access_peer(&self, other: &dyn Runtime) -> bool {
        let Ok(other) = HipRuntime::peer(other) else {
            return false;
        };
        let mut can: c_int = 0;
        let (d, p) = (self.info.ordinal as c_int, other.info.ordinal as c_int);
        // SAFETY: a plain query.
        unsafe { hipDeviceCanAccessPeer(&mut can, d, p) == HIP_SUCCESS && can != 0 }
    }

    fn enable_peer_access(&self, other: &dyn Runtime) -> Call {
        let other = HipRuntime::peer(other)?;
        // SAFETY: device bound; a valid peer ordinal.
        match unsafe { hipDeviceEnablePeerAccess(other.info.ordinal as c_int, 0) } {
            HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            rc => status(rc, "hipDeviceEnablePeerAccess"),
        }
    }

    unsafe fn memcpy_peer(&self, c: &MemCopy, from: &dyn Runtime) -> Call {
        let from = HipRuntime::peer(from)?;
        let (d, s) = (self.info.ordinal as c_int, from.info.ordinal as c_int);
        let (dst, src, len) = (c.dst as *mut c_void, c.src as *const c_void, c.len);
        // SAFETY: caller's contract.
        let rc = unsafe {
            match c.stream {
                Some(st) => hipMemcpyPeerAsync(dst, d, src, s, len, st as HipStream),
                None => hipMemcpyPeer(dst, d, src, s, len),
            }
        };
        status(rc, "hipMemcpyPeer")
    }

    fn stream_create(&self) -> Call<RawStream> {
        let mut s: HipStream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        status(unsafe { hipStreamCreate(&mut s) }, "hipStreamCreate")?;
        Ok(s as RawStream)
    }

    unsafe fn stream_destroy(&self, stream: RawStream) -> Call {
        // SAFETY: caller's contract.
        status(
            unsafe { hipStreamDestroy(stream as HipStream) },
            "hipStreamDestroy",
        )
    }

    fn stream_sync(&self, stream: RawStream) -> Call {
        // SAFETY: a stream of this device.
        let rc = unsafe { hipStreamSynchronize(stream as HipStream) };
        status(rc, "hipStreamSynchronize")
    }

    fn event_create(&self) -> Call<RawEvent> {
        let mut e: HipEvent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; 2 = hipEventDisableTiming.
        status(
            unsafe { hipEventCreateWithFlags(&mut e, 2) },
            "hipEventCreate",
        )?;
        Ok(e as RawEvent)
    }

    unsafe fn event_destroy(&self, event: RawEvent) -> Call {
        // SAFETY: caller's contract.
        status(
            unsafe { hipEventDestroy(event as HipEvent) },
            "hipEventDestroy",
        )
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Call {
        // SAFETY: handles of this device.
        let rc = unsafe { hipEventRecord(event as HipEvent, stream as HipStream) };
        status(rc, "hipEventRecord")
    }

    fn event_sync(&self, event: RawEvent) -> Call {
        // SAFETY: an event of this runtime.
        let rc = unsafe { hipEventSynchronize(event as HipEvent) };
        status(rc, "hipEventSynchronize")
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Call {
        // SAFETY: valid handles.
        let rc = unsafe { hipStreamWaitEvent(stream as HipStream, event as HipEvent, 0) };
        status(rc, "hipStreamWaitEvent")
    }

    /// hiprtc (or the disk cache) for the device's architecture.
    fn load_module(&self) -> std::result::Result<RawModule, String> {
        let source = source::full_source(COMPAT_HIP);
        let mut options = vec!["-O3".to_string()];
        if self.info.arch != "gfx-current" {
            options.push(format!("--offload-arch={}", self.info.arch));
        }
        let version = hiprtc::version();
        let image = kernel_cache::load_or_compile(
            "HIP",
            &self.info.arch,
            &source,
            &options,
            &version,
            || hiprtc::compile(&source, &options),
        )?;
        let mut module: HipModule = std::ptr::null_mut();
        // SAFETY: a code object from hiprtc.
        let rc = unsafe { hipModuleLoadData(&mut module, image.as_ptr() as *const c_void) };
        if rc != HIP_SUCCESS {
            return Err(format!("hipModuleLoadData: {}", error_name(rc)));
        }
        tracing::info!("{}: kernels loaded for {}", self.label(), self.info.arch);
        Ok(module as RawModule)
    }

    fn module_function(&self, module: RawModule, name: &CStr) -> Call<RawFunction> {
        let mut f: HipFunction = std::ptr::null_mut();
        // SAFETY: module loaded, name NUL-terminated.
        let rc = unsafe { hipModuleGetFunction(&mut f, module as HipModule, name.as_ptr()) };
        status(rc, "hipModuleGetFunction")?;
        Ok(f as RawFunction)
    }

    unsafe fn launch(&self, spec: &mut LaunchSpec<'_>) -> Call {
        let ([gx, gy, gz], [bx, by, bz]) = (spec.grid, spec.block);
        let (f, s) = (spec.function as HipFunction, spec.stream as HipStream);
        let (shared, args, extra) = (spec.shared_bytes, spec.args.as_mut_ptr(), null_mut());
        // SAFETY: caller's contract (arguments match the kernel).
        let r = unsafe { hipModuleLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, args, extra) };
        status(r, "hipModuleLaunchKernel")
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
