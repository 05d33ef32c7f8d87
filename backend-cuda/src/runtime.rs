//! One CUDA device under the GPU engine: the driver API through cudarc's
//! raw bindings, one call per method. The engine makes the device's
//! context current before each call ([`Runtime::bind`]).

use std::any::Any;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::null_mut;

use cudarc::driver::sys as cu;
use ggraph_gpu::kernel_cache;
use ggraph_gpu::source::{self, COMPAT_CUDA};
use ggraph_gpu::{
    Call, CallError, CopyKind, DevPtr, DeviceInfo, Gemm, LaunchSpec, MemCopy, RawEvent,
    RawFunction, RawModule, RawStream, Runtime,
};

use crate::cublas::Cublas;
use crate::libraries::cublas_present;
use crate::nvrtc;
use crate::status::{error_name, status};

/// One CUDA device as the engine's [`Runtime`](ggraph_gpu::Runtime): its
/// handle, its primary context and, where cuBLAS exists, a cuBLAS handle.
/// Discovery opens it; from a device, reach it with
/// `GpuDevice::runtime().as_any().downcast_ref::<CudaRuntime>()`.
pub struct CudaRuntime {
    info: DeviceInfo,
    cc: (u32, u32),
    dev: cu::CUdevice,
    ctx: cu::CUcontext,
    blas: Cublas,
    blas_available: bool,
    /// Allocations are managed memory (`GGML_CUDA_ENABLE_UNIFIED_MEMORY`,
    /// as ggml reads it): they may exceed the device's own memory.
    unified: bool,
}

// SAFETY: the raw handles are driver objects usable from any thread once
// the context is made current (the engine binds it before every call);
// mutable state is behind mutexes.
unsafe impl Send for CudaRuntime {}
unsafe impl Sync for CudaRuntime {}

fn stream_of(s: RawStream) -> cu::CUstream {
    s as cu::CUstream
}

fn event_of(e: RawEvent) -> cu::CUevent {
    e as cu::CUevent
}

impl CudaRuntime {
    /// Device `ordinal` of the initialised driver.
    pub(crate) fn open(ordinal: usize) -> Call<CudaRuntime> {
        // SAFETY: the driver is initialised; plain queries.
        unsafe {
            let mut dev: cu::CUdevice = 0;
            status(cu::cuDeviceGet(&mut dev, ordinal as c_int), "cuDeviceGet")?;
            let mut buf = [0 as c_char; 256];
            status(
                cu::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev),
                "cuDeviceGetName",
            )?;
            let name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            let attr = |a: cu::CUdevice_attribute| -> Call<i32> {
                let mut v: c_int = 0;
                status(
                    cu::cuDeviceGetAttribute(&mut v, a, dev),
                    "cuDeviceGetAttribute",
                )?;
                Ok(v)
            };
            let major = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
            let minor = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
            let integrated = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0;
            let unified = std::env::var_os("GGML_CUDA_ENABLE_UNIFIED_MEMORY").is_some();
            let mut ctx: cu::CUcontext = std::ptr::null_mut();
            status(
                cu::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            )?;
            let cc = (major as u32, minor as u32);
            Ok(CudaRuntime {
                info: DeviceInfo {
                    family: "CUDA",
                    ordinal,
                    name,
                    arch: format!("sm_{major}{minor}"),
                    compute_capability: Some(cc),
                    integrated,
                    free_from_host: cfg!(target_os = "linux") && (integrated || unified),
                },
                cc,
                dev,
                ctx,
                blas: Cublas::default(),
                blas_available: cublas_present(),
                unified,
            })
        }
    }

    fn label(&self) -> String {
        format!("cuda:{}", self.info.ordinal)
    }

    /// The architectures to build for, best first: the device's own as a
    /// cubin, else PTX for it or for an older architecture the driver can
    /// JIT from.
    fn targets(&self) -> Vec<String> {
        let (major, minor) = self.cc;
        let mut targets = vec![format!("sm_{major}{minor}")];
        for ptx in [
            format!("compute_{major}{minor}"),
            "compute_90".into(),
            "compute_80".into(),
            "compute_70".into(),
        ] {
            if !targets.contains(&ptx) {
                targets.push(ptx);
            }
        }
        targets
    }
}

/// NVRTC's options for `target` (`sm_90`, `compute_80`).
pub(crate) fn compile_options(target: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={target}"),
        "-DNDEBUG".to_string(),
    ]
}

impl Runtime for CudaRuntime {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn bind(&self) -> Call {
        // SAFETY: the context was retained in `open` and lives as long as self.
        status(unsafe { cu::cuCtxSetCurrent(self.ctx) }, "cuCtxSetCurrent")
    }

    fn memory(&self) -> Call<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: context bound.
        status(
            unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) },
            "cuMemGetInfo",
        )?;
        Ok((free as u64, total as u64))
    }

    fn alloc(&self, bytes: usize) -> Call<DevPtr> {
        let mut p: cu::CUdeviceptr = 0;
        // SAFETY: context bound; managed memory attached to every stream
        // (CU_MEM_ATTACH_GLOBAL), as cudaMallocManaged's default.
        let (r, call) = unsafe {
            if self.unified {
                (cu::cuMemAllocManaged(&mut p, bytes, 1), "cuMemAllocManaged")
            } else {
                (cu::cuMemAlloc_v2(&mut p, bytes), "cuMemAlloc")
            }
        };
        if r == cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Err(CallError::OutOfMemory);
        }
        status(r, call)?;
        Ok(p)
    }

    unsafe fn free(&self, ptr: DevPtr) -> Call {
        // SAFETY: caller's contract.
        status(unsafe { cu::cuMemFree_v2(ptr) }, "cuMemFree")
    }

    fn alloc_pinned(&self, bytes: usize) -> Call<*mut u8> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: context bound; PORTABLE makes the memory pinned for every context.
        status(
            unsafe { cu::cuMemHostAlloc(&mut p, bytes, 1) },
            "cuMemHostAlloc",
        )?;
        Ok(p as *mut u8)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Call {
        // SAFETY: caller's contract.
        status(
            unsafe { cu::cuMemFreeHost(ptr as *mut c_void) },
            "cuMemFreeHost",
        )
    }

    unsafe fn memcpy(&self, c: &MemCopy) -> Call {
        let (dst, src, len) = (c.dst, c.src, c.len);
        let (hd, dh) = (src as *const c_void, dst as *mut c_void);
        // SAFETY: caller's contract.
        unsafe {
            match (c.kind, c.stream.map(stream_of)) {
                (CopyKind::HostToDevice, Some(s)) => {
                    status(cu::cuMemcpyHtoDAsync_v2(dst, hd, len, s), "cuMemcpyHtoD")
                }
                (CopyKind::HostToDevice, None) => {
                    status(cu::cuMemcpyHtoD_v2(dst, hd, len), "cuMemcpyHtoD")
                }
                (CopyKind::DeviceToHost, Some(s)) => {
                    status(cu::cuMemcpyDtoHAsync_v2(dh, src, len, s), "cuMemcpyDtoH")
                }
                (CopyKind::DeviceToHost, None) => {
                    status(cu::cuMemcpyDtoH_v2(dh, src, len), "cuMemcpyDtoH")
                }
                (CopyKind::DeviceToDevice, Some(s)) => {
                    status(cu::cuMemcpyDtoDAsync_v2(dst, src, len, s), "cuMemcpyDtoD")
                }
                (CopyKind::DeviceToDevice, None) => {
                    status(cu::cuMemcpyDtoD_v2(dst, src, len), "cuMemcpyDtoD")
                }
            }
        }
    }

    unsafe fn memset(&self, dst: DevPtr, value: u8, len: usize, stream: Option<RawStream>) -> Call {
        // SAFETY: caller's contract.
        let r = unsafe {
            match stream {
                Some(s) => cu::cuMemsetD8Async(dst, value, len, stream_of(s)),
                None => cu::cuMemsetD8_v2(dst, value, len),
            }
        };
        status(r, "cuMemsetD8")
    }

    fn can_access_peer(&self, other: &dyn Runtime) -> bool {
        let Some(other) = other.as_any().downcast_ref::<CudaRuntime>() else {
            return false;
        };
        let mut can: c_int = 0;
        // SAFETY: both devices are valid; a plain query.
        let r = unsafe { cu::cuDeviceCanAccessPeer(&mut can, self.dev, other.dev) };
        r == cu::CUresult::CUDA_SUCCESS && can != 0
    }

    fn enable_peer_access(&self, other: &dyn Runtime) -> Call {
        let Some(other) = other.as_any().downcast_ref::<CudaRuntime>() else {
            return Err(CallError::Other("not a CUDA device".into()));
        };
        // SAFETY: context bound; the peer's context is retained.
        let r = unsafe { cu::cuCtxEnablePeerAccess(other.ctx, 0) };
        if r == cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        status(r, "cuCtxEnablePeerAccess")
    }

    unsafe fn memcpy_peer(&self, c: &MemCopy, from: &dyn Runtime) -> Call {
        let Some(from) = from.as_any().downcast_ref::<CudaRuntime>() else {
            return Err(CallError::Other("not a CUDA device".into()));
        };
        let (dctx, sctx) = (self.ctx, from.ctx);
        // SAFETY: caller's contract; both contexts are retained.
        let r = unsafe {
            match c.stream {
                Some(s) => cu::cuMemcpyPeerAsync(c.dst, dctx, c.src, sctx, c.len, stream_of(s)),
                None => cu::cuMemcpyPeer(c.dst, dctx, c.src, sctx, c.len),
            }
        };
        status(r, "cuMemcpyPeer")
    }

    fn stream_create(&self) -> Call<RawStream> {
        let mut s: cu::CUstream = std::ptr::null_mut();
        // SAFETY: context bound. Flags 0: a blocking stream, so synchronous
        // copies (legacy default stream) are ordered after its work.
        status(unsafe { cu::cuStreamCreate(&mut s, 0) }, "cuStreamCreate")?;
        Ok(s as RawStream)
    }

    unsafe fn stream_destroy(&self, stream: RawStream) -> Call {
        // SAFETY: caller's contract.
        status(
            unsafe { cu::cuStreamDestroy_v2(stream_of(stream)) },
            "cuStreamDestroy",
        )
    }

    fn stream_sync(&self, stream: RawStream) -> Call {
        // SAFETY: a stream of this context.
        status(
            unsafe { cu::cuStreamSynchronize(stream_of(stream)) },
            "cuStreamSynchronize",
        )
    }

    fn event_create(&self) -> Call<RawEvent> {
        let mut e: cu::CUevent = std::ptr::null_mut();
        // SAFETY: context bound; 2 = CU_EVENT_DISABLE_TIMING.
        status(unsafe { cu::cuEventCreate(&mut e, 2) }, "cuEventCreate")?;
        Ok(e as RawEvent)
    }

    unsafe fn event_destroy(&self, event: RawEvent) -> Call {
        // SAFETY: caller's contract.
        status(
            unsafe { cu::cuEventDestroy_v2(event_of(event)) },
            "cuEventDestroy",
        )
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Call {
        // SAFETY: handles of this context.
        status(
            unsafe { cu::cuEventRecord(event_of(event), stream_of(stream)) },
            "cuEventRecord",
        )
    }

    fn event_sync(&self, event: RawEvent) -> Call {
        // SAFETY: an event of this runtime.
        status(
            unsafe { cu::cuEventSynchronize(event_of(event)) },
            "cuEventSynchronize",
        )
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Call {
        // SAFETY: events of any context may be waited on.
        status(
            unsafe { cu::cuStreamWaitEvent(stream_of(stream), event_of(event), 0) },
            "cuStreamWaitEvent",
        )
    }

    /// NVRTC (or the disk cache) for each target in turn, until the
    /// driver loads one.
    fn load_module(&self) -> std::result::Result<RawModule, String> {
        let source = source::full_source(COMPAT_CUDA);
        let version = nvrtc::version().unwrap_or_else(|| "unknown".into());
        let mut errors = Vec::new();
        for target in self.targets() {
            let options = compile_options(&target);
            let cubin = target.starts_with("sm_");
            let image =
                kernel_cache::load_or_compile("CUDA", &target, &source, &options, &version, || {
                    nvrtc::compile(&source, &options, cubin)
                });
            let image = match image {
                Ok(bytes) => bytes,
                Err(e) => {
                    errors.push(format!("{target}: {e}"));
                    continue;
                }
            };
            let mut module: cu::CUmodule = std::ptr::null_mut();
            // SAFETY: `image` is a cubin or NUL-terminated PTX.
            let r = unsafe { cu::cuModuleLoadData(&mut module, image.as_ptr() as *const c_void) };
            if r == cu::CUresult::CUDA_SUCCESS {
                tracing::info!("{}: kernels loaded for {target}", self.label());
                return Ok(module as RawModule);
            }
            errors.push(format!("{target}: cuModuleLoadData: {}", error_name(r)));
        }
        Err(format!("cannot build the kernels: {}", errors.join("; ")))
    }

    fn module_function(&self, module: RawModule, name: &CStr) -> Call<RawFunction> {
        let mut f: cu::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded; the name is NUL-terminated.
        status(
            unsafe { cu::cuModuleGetFunction(&mut f, module as cu::CUmodule, name.as_ptr()) },
            "cuModuleGetFunction",
        )?;
        Ok(f as RawFunction)
    }

    unsafe fn launch(&self, spec: &mut LaunchSpec<'_>) -> Call {
        let ([gx, gy, gz], [bx, by, bz]) = (spec.grid, spec.block);
        let (f, s) = (spec.function as cu::CUfunction, stream_of(spec.stream));
        let (shared, args, extra) = (spec.shared_bytes, spec.args.as_mut_ptr(), null_mut());
        // SAFETY: caller's contract (arguments match the kernel).
        let r = unsafe { cu::cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, args, extra) };
        status(r, "cuLaunchKernel")
    }

    fn has_blas(&self) -> bool {
        self.blas_available
    }

    unsafe fn gemm(&self, stream: RawStream, g: &Gemm) -> Call {
        // SAFETY: cuBLAS is present (has_blas); context bound (the
        // engine's contract); caller's contract for the matrices.
        unsafe { self.blas.gemm(stream, g) }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
