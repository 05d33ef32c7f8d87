//! CUDA through cudarc's raw bindings, with the driver, NVRTC and cuBLAS
//! loaded at run time (`dynamic-loading`).
//!
//! cudarc's bindings panic when a library or symbol is missing, so every
//! entry is guarded: `is_culib_present()` before the first call into a
//! library, only long-standing driver symbols, and device discovery inside
//! `catch_unwind` as a last resort. Without libcuda the crate lists no
//! devices. cudarc maps `CUresult` to a Rust enum generated from CUDA
//! 12.8's header; drivers return codes from that set for every call made
//! here, so the enum is matched only against success and a few named
//! errors.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::sys as cb;
use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nv;
use ggraph_core::{DType, Error, Result};

use ggraph_gpu::source::{self, COMPAT_CUDA};
use ggraph_gpu::{DevPtr, Gemm, GpuDevice, LaunchSpec, RawEvent, RawStream, Runtime};

/// Whether the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cu::is_culib_present() }
}

/// Whether NVRTC can be loaded (needed to compile the kernels).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { nv::is_culib_present() }
}

/// Whether cuBLAS can be loaded.
pub fn cublas_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cb::is_culib_present() }
}

/// The CUDA devices of this machine, found once per process; empty
/// without a driver or a GPU.
pub fn devices() -> Vec<Arc<GpuDevice>> {
    static DEVICES: OnceLock<Vec<Arc<GpuDevice>>> = OnceLock::new();
    DEVICES
        .get_or_init(|| match std::panic::catch_unwind(discover) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                tracing::info!("CUDA: no devices ({e})");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!("CUDA: the driver bindings panicked during discovery; no devices");
                Vec::new()
            }
        })
        .clone()
}

fn discover() -> Result<Vec<Arc<GpuDevice>>> {
    if !driver_present() {
        return Ok(Vec::new());
    }
    // SAFETY: the library is present; plain driver calls.
    unsafe {
        let r = cu::cuInit(0);
        if r == cu::CUresult::CUDA_ERROR_NO_DEVICE {
            return Ok(Vec::new());
        }
        check_raw(r, "cuInit")?;
        let mut n: c_int = 0;
        check_raw(cu::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
        let mut out = Vec::new();
        for ordinal in 0..n.max(0) as usize {
            match CudaRuntime::new(ordinal) {
                Ok(rt) => out.push(GpuDevice::new(Arc::new(rt), "cuda")),
                Err(e) => tracing::warn!("CUDA device {ordinal} skipped: {e}"),
            }
        }
        Ok(out)
    }
}

/// The driver's name for a result code.
fn error_name(r: cu::CUresult) -> String {
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

fn check_raw(r: cu::CUresult, what: &str) -> Result<()> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::backend(
            "CUDA",
            format!("{what} failed: {}", error_name(r)),
        ))
    }
}

/// Raw driver handles, owned by one runtime.
struct Handles {
    dev: cu::CUdevice,
    ctx: cu::CUcontext,
}

struct Blas {
    handle: cb::cublasHandle_t,
}

/// One CUDA device.
pub struct CudaRuntime {
    ordinal: usize,
    name: String,
    arch: String,
    cc: (u32, u32),
    h: Handles,
    module: OnceLock<std::result::Result<usize, String>>,
    functions: Mutex<HashMap<&'static str, usize>>,
    blas: Mutex<Option<Blas>>,
    blas_available: bool,
    peer: Mutex<HashMap<usize, bool>>,
}

// SAFETY: the raw handles are driver objects usable from any thread once
// the context is made current (every method binds it first); mutable
// state is behind mutexes.
unsafe impl Send for CudaRuntime {}
unsafe impl Sync for CudaRuntime {}

impl CudaRuntime {
    fn new(ordinal: usize) -> Result<CudaRuntime> {
        // SAFETY: the driver is initialised; plain queries.
        unsafe {
            let mut dev: cu::CUdevice = 0;
            check_raw(cu::cuDeviceGet(&mut dev, ordinal as c_int), "cuDeviceGet")?;
            let mut buf = [0 as c_char; 256];
            check_raw(
                cu::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev),
                "cuDeviceGetName",
            )?;
            let name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            let attr = |a: cu::CUdevice_attribute| -> Result<i32> {
                let mut v: c_int = 0;
                check_raw(
                    cu::cuDeviceGetAttribute(&mut v, a, dev),
                    "cuDeviceGetAttribute",
                )?;
                Ok(v)
            };
            let major = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
            let minor = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
            let mut ctx: cu::CUcontext = std::ptr::null_mut();
            check_raw(
                cu::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            )?;
            Ok(CudaRuntime {
                ordinal,
                name,
                arch: format!("sm_{major}{minor}"),
                cc: (major as u32, minor as u32),
                h: Handles { dev, ctx },
                module: OnceLock::new(),
                functions: Mutex::new(HashMap::new()),
                blas: Mutex::new(None),
                blas_available: cublas_present(),
                peer: Mutex::new(HashMap::new()),
            })
        }
    }

    fn label(&self) -> String {
        format!("cuda:{}", self.ordinal)
    }

    fn check(&self, r: cu::CUresult, what: &str) -> Result<()> {
        if r == cu::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(Error::backend(
                self.label(),
                format!("{what} failed: {}", error_name(r)),
            ))
        }
    }

    /// Makes this device's context current on the calling thread.
    fn bind(&self) -> Result<()> {
        // SAFETY: the context was retained in `new` and lives as long as self.
        self.check(
            unsafe { cu::cuCtxSetCurrent(self.h.ctx) },
            "cuCtxSetCurrent",
        )
    }

    /// The compiled module (NVRTC on first use, then the caches).
    fn module(&self) -> Result<cu::CUmodule> {
        let m = self
            .module
            .get_or_init(|| self.load_module().map(|m| m as usize));
        match m {
            Ok(m) => Ok(*m as cu::CUmodule),
            Err(e) => Err(Error::backend(self.label(), e.clone())),
        }
    }

    fn load_module(&self) -> std::result::Result<cu::CUmodule, String> {
        self.bind().map_err(|e| e.to_string())?;
        let source = source::full_source(COMPAT_CUDA);
        let version = nvrtc_version().unwrap_or_else(|| "unknown".into());
        let dir = source::cache_dir();
        // the device's own architecture as a cubin, else PTX for it or for
        // an older architecture the driver can JIT from
        let mut targets = vec![format!("sm_{}{}", self.cc.0, self.cc.1)];
        for ptx in [
            format!("compute_{}{}", self.cc.0, self.cc.1),
            "compute_90".into(),
            "compute_80".into(),
            "compute_70".into(),
        ] {
            if !targets.contains(&ptx) {
                targets.push(ptx);
            }
        }
        let mut errors = Vec::new();
        for target in targets {
            let options = vec![
                format!("--gpu-architecture={target}"),
                "-DNDEBUG".to_string(),
            ];
            let file = dir
                .as_ref()
                .map(|d| source::cache_file(d, "CUDA", &target, &source, &options, &version));
            let image = match file.as_deref().and_then(source::cache_read) {
                Some(bytes) => bytes,
                None => match nvrtc_compile(&source, &options, target.starts_with("sm_")) {
                    Ok(bytes) => {
                        if let Some(f) = &file {
                            source::cache_write(f, &bytes);
                        }
                        bytes
                    }
                    Err(e) => {
                        errors.push(format!("{target}: {e}"));
                        continue;
                    }
                },
            };
            let mut module: cu::CUmodule = std::ptr::null_mut();
            // SAFETY: `image` is a cubin or NUL-terminated PTX.
            let r = unsafe { cu::cuModuleLoadData(&mut module, image.as_ptr() as *const c_void) };
            if r == cu::CUresult::CUDA_SUCCESS {
                tracing::info!("{}: kernels loaded for {target}", self.label());
                return Ok(module);
            }
            errors.push(format!("{target}: cuModuleLoadData: {}", error_name(r)));
        }
        Err(format!("cannot build the kernels: {}", errors.join("; ")))
    }

    fn function(&self, name: &'static str) -> Result<cu::CUfunction> {
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = cache.get(name) {
            return Ok(*f as cu::CUfunction);
        }
        let module = self.module()?;
        let cname =
            CString::new(name).map_err(|_| Error::backend(self.label(), "bad kernel name"))?;
        let mut f: cu::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded; the name is NUL-terminated.
        self.check(
            unsafe { cu::cuModuleGetFunction(&mut f, module, cname.as_ptr()) },
            &format!("cuModuleGetFunction({name})"),
        )?;
        cache.insert(name, f as usize);
        Ok(f)
    }

    fn oom(&self, bytes: u64) -> Error {
        Error::OutOfMemory {
            buffer_type: self.label(),
            requested_bytes: bytes,
            available_bytes: self.memory().map(|m| m.0).unwrap_or(0),
        }
    }

    fn can_access_peer(&self, other: &CudaRuntime) -> bool {
        let mut cache = self.peer.lock().unwrap_or_else(|e| e.into_inner());
        *cache.entry(other.ordinal).or_insert_with(|| {
            let mut can: c_int = 0;
            // SAFETY: both devices are valid; plain queries.
            unsafe {
                if cu::cuDeviceCanAccessPeer(&mut can, self.h.dev, other.h.dev)
                    != cu::CUresult::CUDA_SUCCESS
                    || can == 0
                {
                    return false;
                }
                if self.bind().is_err() {
                    return false;
                }
                let r = cu::cuCtxEnablePeerAccess(other.h.ctx, 0);
                r == cu::CUresult::CUDA_SUCCESS
                    || r == cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            }
        })
    }
}

fn nvrtc_version() -> Option<String> {
    if !nvrtc_present() {
        return None;
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: the library is present.
    let r = unsafe { nv::nvrtcVersion(&mut a, &mut b) };
    (r == nv::nvrtcResult::NVRTC_SUCCESS).then(|| format!("{a}.{b}"))
}

/// Compiles the source with NVRTC: a cubin when `cubin`, else NUL
/// terminated PTX. The error carries NVRTC's log.
fn nvrtc_compile(
    source: &str,
    options: &[String],
    cubin: bool,
) -> std::result::Result<Vec<u8>, String> {
    if !nvrtc_present() {
        return Err("NVRTC (libnvrtc.so) not found: install the CUDA toolkit's NVRTC library or put it on the library path".into());
    }
    let src = CString::new(source).map_err(|_| "source has a NUL byte")?;
    let name = CString::new("ggraph.cu").expect("no NUL");
    let opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).expect("no NUL in options"))
        .collect();
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let ok = nv::nvrtcResult::NVRTC_SUCCESS;
    // SAFETY: valid NUL-terminated strings; the program is destroyed below.
    unsafe {
        let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
        if nv::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        ) != ok
        {
            return Err("nvrtcCreateProgram failed".into());
        }
        let compiled = nv::nvrtcCompileProgram(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
        let result = if compiled != ok {
            let mut n = 0usize;
            let mut log = String::new();
            if nv::nvrtcGetProgramLogSize(prog, &mut n) == ok && n > 0 {
                let mut buf = vec![0u8; n];
                if nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char) == ok {
                    log = String::from_utf8_lossy(&buf)
                        .trim_end_matches('\0')
                        .to_string();
                }
            }
            Err(format!("NVRTC: {compiled:?}\n{log}"))
        } else if cubin {
            let mut n = 0usize;
            let mut buf = Vec::new();
            if nv::nvrtcGetCUBINSize(prog, &mut n) == ok && n > 0 {
                buf = vec![0u8; n];
                if nv::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char) != ok {
                    buf.clear();
                }
            }
            if buf.is_empty() {
                Err("nvrtcGetCUBIN gave nothing".into())
            } else {
                Ok(buf)
            }
        } else {
            let mut n = 0usize;
            let mut buf = Vec::new();
            if nv::nvrtcGetPTXSize(prog, &mut n) == ok && n > 0 {
                buf = vec![0u8; n];
                if nv::nvrtcGetPTX(prog, buf.as_mut_ptr() as *mut c_char) != ok {
                    buf.clear();
                }
            }
            if buf.last() != Some(&0) {
                buf.push(0);
            }
            if buf.len() <= 1 {
                Err("nvrtcGetPTX gave nothing".into())
            } else {
                Ok(buf)
            }
        };
        nv::nvrtcDestroyProgram(&mut prog);
        result
    }
}

fn stream_of(s: RawStream) -> cu::CUstream {
    s as cu::CUstream
}

fn data_type(t: DType) -> cb::cudaDataType {
    match t {
        DType::F16 => cb::cudaDataType::CUDA_R_16F,
        DType::BF16 => cb::cudaDataType::CUDA_R_16BF,
        _ => cb::cudaDataType::CUDA_R_32F,
    }
}

impl Runtime for CudaRuntime {
    fn family(&self) -> &'static str {
        "CUDA"
    }

    fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn device_name(&self) -> &str {
        &self.name
    }

    fn arch(&self) -> &str {
        &self.arch
    }

    fn compute_capability(&self) -> Option<(u32, u32)> {
        Some(self.cc)
    }

    fn memory(&self) -> Result<(u64, u64)> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: context bound.
        self.check(
            unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) },
            "cuMemGetInfo",
        )?;
        Ok((free as u64, total as u64))
    }

    fn alloc(&self, bytes: u64) -> Result<DevPtr> {
        self.bind()?;
        let size = usize::try_from(bytes).map_err(|_| self.oom(bytes))?;
        let mut p: cu::CUdeviceptr = 0;
        // SAFETY: context bound.
        let r = unsafe { cu::cuMemAlloc_v2(&mut p, size) };
        if r == cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Err(self.oom(bytes));
        }
        self.check(r, "cuMemAlloc")?;
        Ok(p)
    }

    unsafe fn free(&self, ptr: DevPtr) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            let r = unsafe { cu::cuMemFree_v2(ptr) };
            if r != cu::CUresult::CUDA_SUCCESS {
                tracing::warn!("{}: cuMemFree failed: {}", self.label(), error_name(r));
            }
        }
    }

    fn alloc_pinned(&self, bytes: u64) -> Result<*mut u8> {
        self.bind()?;
        let size = usize::try_from(bytes).map_err(|_| self.oom(bytes))?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: context bound; PORTABLE makes the memory pinned for every context.
        self.check(
            unsafe { cu::cuMemHostAlloc(&mut p, size, 1) },
            "cuMemHostAlloc",
        )?;
        Ok(p as *mut u8)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            unsafe { cu::cuMemFreeHost(ptr as *mut c_void) };
        }
    }

    unsafe fn htod(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: caller's contract.
        let r = unsafe {
            match stream {
                Some(s) => cu::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, len, stream_of(s)),
                None => cu::cuMemcpyHtoD_v2(dst, src as *const c_void, len),
            }
        };
        self.check(r, "cuMemcpyHtoD")
    }

    unsafe fn dtoh(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: caller's contract.
        let r = unsafe {
            match stream {
                Some(s) => cu::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, len, stream_of(s)),
                None => cu::cuMemcpyDtoH_v2(dst as *mut c_void, src, len),
            }
        };
        self.check(r, "cuMemcpyDtoH")
    }

    unsafe fn dtod(
        &self,
        dst: DevPtr,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: caller's contract.
        let r = unsafe {
            match stream {
                Some(s) => cu::cuMemcpyDtoDAsync_v2(dst, src, len, stream_of(s)),
                None => cu::cuMemcpyDtoD_v2(dst, src, len),
            }
        };
        self.check(r, "cuMemcpyDtoD")
    }

    unsafe fn memset(
        &self,
        dst: DevPtr,
        value: u8,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: caller's contract.
        let r = unsafe {
            match stream {
                Some(s) => cu::cuMemsetD8Async(dst, value, len, stream_of(s)),
                None => cu::cuMemsetD8_v2(dst, value, len),
            }
        };
        self.check(r, "cuMemsetD8")
    }

    /// Direct copies between GPUs with peer access; `Ok(false)` without it
    /// (the caller stages through host memory).
    unsafe fn peer_copy(
        &self,
        dst: DevPtr,
        src_rt: &dyn Runtime,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<bool> {
        let Some(other) = src_rt.as_any().downcast_ref::<CudaRuntime>() else {
            return Ok(false);
        };
        if !self.can_access_peer(other) {
            return Ok(false);
        }
        self.bind()?;
        // SAFETY: caller's contract; both contexts are retained.
        let r = unsafe {
            match stream {
                Some(s) => {
                    cu::cuMemcpyPeerAsync(dst, self.h.ctx, src, other.h.ctx, len, stream_of(s))
                }
                None => cu::cuMemcpyPeer(dst, self.h.ctx, src, other.h.ctx, len),
            }
        };
        self.check(r, "cuMemcpyPeer")?;
        Ok(true)
    }

    fn stream_create(&self) -> Result<RawStream> {
        self.bind()?;
        let mut s: cu::CUstream = std::ptr::null_mut();
        // SAFETY: context bound. Flags 0: a blocking stream, so synchronous
        // copies (legacy default stream) are ordered after its work.
        self.check(unsafe { cu::cuStreamCreate(&mut s, 0) }, "cuStreamCreate")?;
        Ok(s as RawStream)
    }

    unsafe fn stream_destroy(&self, stream: RawStream) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            unsafe { cu::cuStreamDestroy_v2(stream_of(stream)) };
        }
    }

    fn stream_sync(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: a stream of this context.
        self.check(
            unsafe { cu::cuStreamSynchronize(stream_of(stream)) },
            "cuStreamSynchronize",
        )
    }

    fn event_create(&self) -> Result<RawEvent> {
        self.bind()?;
        let mut e: cu::CUevent = std::ptr::null_mut();
        // SAFETY: context bound; 2 = CU_EVENT_DISABLE_TIMING.
        self.check(unsafe { cu::cuEventCreate(&mut e, 2) }, "cuEventCreate")?;
        Ok(e as RawEvent)
    }

    unsafe fn event_destroy(&self, event: RawEvent) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            unsafe { cu::cuEventDestroy_v2(event as cu::CUevent) };
        }
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: handles of this context.
        self.check(
            unsafe { cu::cuEventRecord(event as cu::CUevent, stream_of(stream)) },
            "cuEventRecord",
        )
    }

    fn event_sync(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: an event of this runtime.
        self.check(
            unsafe { cu::cuEventSynchronize(event as cu::CUevent) },
            "cuEventSynchronize",
        )
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: events of any context may be waited on.
        self.check(
            unsafe { cu::cuStreamWaitEvent(stream_of(stream), event as cu::CUevent, 0) },
            "cuStreamWaitEvent",
        )
    }

    unsafe fn launch(&self, stream: RawStream, spec: &mut LaunchSpec<'_>) -> Result<()> {
        let f = self.function(spec.kernel)?;
        self.bind()?;
        let [gx, gy, gz] = spec.grid;
        let [bx, by, bz] = spec.block;
        // SAFETY: caller's contract (arguments match the kernel).
        let r = unsafe {
            cu::cuLaunchKernel(
                f,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                spec.shared_bytes,
                stream_of(stream),
                spec.args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check(r, &format!("launch of {}", spec.kernel))
    }

    fn has_blas(&self) -> bool {
        self.blas_available
    }

    unsafe fn gemm(&self, stream: RawStream, g: &Gemm) -> Result<()> {
        self.bind()?;
        let mut guard = self.blas.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let mut handle: cb::cublasHandle_t = std::ptr::null_mut();
            // SAFETY: cuBLAS is present (has_blas); context bound.
            let r = unsafe { cb::cublasCreate_v2(&mut handle) };
            if r != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(Error::backend(
                    self.label(),
                    format!("cublasCreate failed: {r:?}"),
                ));
            }
            *guard = Some(Blas { handle });
        }
        let handle = guard.as_ref().map(|b| b.handle).expect("created above");
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: caller's contract; the handle is used under the lock.
        let r = unsafe {
            let r = cb::cublasSetStream_v2(handle, stream as cb::cudaStream_t);
            if r != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                r
            } else {
                cb::cublasGemmStridedBatchedEx(
                    handle,
                    cb::cublasOperation_t::CUBLAS_OP_T,
                    cb::cublasOperation_t::CUBLAS_OP_N,
                    g.m,
                    g.n,
                    g.k,
                    &alpha as *const f32 as *const c_void,
                    g.a as *const c_void,
                    data_type(g.a_type),
                    g.lda,
                    g.stride_a,
                    g.b as *const c_void,
                    data_type(g.b_type),
                    g.ldb,
                    g.stride_b,
                    &beta as *const f32 as *const c_void,
                    g.c as *mut c_void,
                    cb::cudaDataType::CUDA_R_32F,
                    g.ldc,
                    g.stride_c,
                    g.batch,
                    cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            }
        };
        if r != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(Error::backend(
                self.label(),
                format!("cuBLAS gemm failed: {r:?}"),
            ));
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
