//! The HIP runtime under the GPU engine.
//!
//! hip-sys binds `hipError_t` as a Rust enum (`#[repr(u32)]`, generated
//! from HIP 5.4's header). A C function returning a code outside that enum
//! (a newer ROCm adds codes) would make the enum value undefined behaviour,
//! so the entry points used here are declared below returning a plain
//! `i32` instead; hip-sys provides the link to libamdhip64 (found through
//! HIP_PATH at build time) and the `hipDeviceProp_t` layout. hiprtc is
//! loaded at run time with libloading: ROCm 5.2 keeps it inside
//! libamdhip64, later releases in libhiprtc.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use ggraph_core::{Error, Result};
use ggraph_gpu::source::{self, COMPAT_HIP};
use ggraph_gpu::{DevPtr, GpuDevice, LaunchSpec, RawEvent, RawStream, Runtime};

// Keep hip-sys (and its link to libamdhip64) in the build.
use hip_sys::hiprt::hipDeviceProp_t;

type HipStream = *mut c_void;
type HipEvent = *mut c_void;
type HipModule = *mut c_void;
type HipFunction = *mut c_void;

const HIP_SUCCESS: i32 = 0;
const HIP_ERROR_NO_DEVICE: i32 = 100;
const HIP_ERROR_OUT_OF_MEMORY: i32 = 2;
const HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED: i32 = 704;
const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEMCPY_DEVICE_TO_HOST: c_int = 2;
const MEMCPY_DEVICE_TO_DEVICE: c_int = 3;

#[link(name = "amdhip64")]
unsafe extern "C" {
    fn hipInit(flags: c_uint) -> i32;
    fn hipGetDeviceCount(count: *mut c_int) -> i32;
    fn hipSetDevice(device: c_int) -> i32;
    fn hipDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> i32;
    fn hipGetDeviceProperties(prop: *mut hipDeviceProp_t, device: c_int) -> i32;
    fn hipGetErrorName(error: i32) -> *const c_char;
    fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> i32;
    fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> i32;
    fn hipFree(ptr: *mut c_void) -> i32;
    fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> i32;
    fn hipHostFree(ptr: *mut c_void) -> i32;
    fn hipMemcpy(dst: *mut c_void, src: *const c_void, size: usize, kind: c_int) -> i32;
    fn hipMemcpyAsync(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: c_int,
        stream: HipStream,
    ) -> i32;
    fn hipMemset(dst: *mut c_void, value: c_int, size: usize) -> i32;
    fn hipMemsetAsync(dst: *mut c_void, value: c_int, size: usize, stream: HipStream) -> i32;
    fn hipDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) -> i32;
    fn hipDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> i32;
    fn hipMemcpyPeer(
        dst: *mut c_void,
        dst_dev: c_int,
        src: *const c_void,
        src_dev: c_int,
        size: usize,
    ) -> i32;
    fn hipMemcpyPeerAsync(
        dst: *mut c_void,
        dst_dev: c_int,
        src: *const c_void,
        src_dev: c_int,
        size: usize,
        stream: HipStream,
    ) -> i32;
    fn hipStreamCreate(stream: *mut HipStream) -> i32;
    fn hipStreamDestroy(stream: HipStream) -> i32;
    fn hipStreamSynchronize(stream: HipStream) -> i32;
    fn hipEventCreateWithFlags(event: *mut HipEvent, flags: c_uint) -> i32;
    fn hipEventDestroy(event: HipEvent) -> i32;
    fn hipEventRecord(event: HipEvent, stream: HipStream) -> i32;
    fn hipEventSynchronize(event: HipEvent) -> i32;
    fn hipStreamWaitEvent(stream: HipStream, event: HipEvent, flags: c_uint) -> i32;
    fn hipModuleLoadData(module: *mut HipModule, image: *const c_void) -> i32;
    fn hipModuleGetFunction(
        function: *mut HipFunction,
        module: HipModule,
        name: *const c_char,
    ) -> i32;
    fn hipModuleLaunchKernel(
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

fn check(code: i32, device: &str, what: &str) -> Result<()> {
    if code == HIP_SUCCESS {
        Ok(())
    } else {
        Err(Error::backend(
            device,
            format!("{what} failed: {}", error_name(code)),
        ))
    }
}

/// The HIP devices of this machine, found once per process; empty without
/// an AMD GPU (hipGetDeviceCount answers hipErrorNoDevice).
pub fn devices() -> Vec<Arc<GpuDevice>> {
    static DEVICES: OnceLock<Vec<Arc<GpuDevice>>> = OnceLock::new();
    DEVICES
        .get_or_init(|| match std::panic::catch_unwind(discover) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                tracing::info!("HIP: no devices ({e})");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!("HIP: discovery panicked; no devices");
                Vec::new()
            }
        })
        .clone()
}

fn discover() -> Result<Vec<Arc<GpuDevice>>> {
    let mut n: c_int = 0;
    // SAFETY: plain runtime calls with valid out-pointers.
    let r = unsafe { hipGetDeviceCount(&mut n) };
    if r == HIP_ERROR_NO_DEVICE || (r == HIP_SUCCESS && n <= 0) {
        return Ok(Vec::new());
    }
    check(r, "HIP", "hipGetDeviceCount")?;
    // SAFETY: as above.
    check(unsafe { hipInit(0) }, "HIP", "hipInit")?;
    let mut out = Vec::new();
    for ordinal in 0..n as usize {
        match HipRuntime::new(ordinal) {
            Ok(rt) => out.push(GpuDevice::new(Arc::new(rt), "hip")),
            Err(e) => tracing::warn!("HIP device {ordinal} skipped: {e}"),
        }
    }
    Ok(out)
}

/// hiprtc, loaded at run time.
struct Hiprtc {
    _lib: libloading::Library,
    create: unsafe extern "C" fn(
        *mut *mut c_void,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> i32,
    compile: unsafe extern "C" fn(*mut c_void, c_int, *const *const c_char) -> i32,
    log_size: unsafe extern "C" fn(*mut c_void, *mut usize) -> i32,
    log: unsafe extern "C" fn(*mut c_void, *mut c_char) -> i32,
    code_size: unsafe extern "C" fn(*mut c_void, *mut usize) -> i32,
    code: unsafe extern "C" fn(*mut c_void, *mut c_char) -> i32,
    destroy: unsafe extern "C" fn(*mut *mut c_void) -> i32,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> i32,
}

fn hiprtc() -> std::result::Result<&'static Hiprtc, String> {
    static RTC: OnceLock<std::result::Result<Hiprtc, String>> = OnceLock::new();
    RTC.get_or_init(|| {
        let names = [
            "libhiprtc.so",
            "libhiprtc.so.7",
            "libhiprtc.so.6",
            "libhiprtc.so.5",
            "libamdhip64.so",
            "libamdhip64.so.6",
            "libamdhip64.so.5",
        ];
        for name in names {
            // SAFETY: loading a system library; its constructors are HIP's own.
            let Ok(lib) = (unsafe { libloading::Library::new(name) }) else {
                continue;
            };
            // SAFETY: the symbols have these C signatures (hiprtc.h).
            let found = unsafe {
                (|| -> std::result::Result<Hiprtc, libloading::Error> {
                    Ok(Hiprtc {
                        create: *lib.get(b"hiprtcCreateProgram\0")?,
                        compile: *lib.get(b"hiprtcCompileProgram\0")?,
                        log_size: *lib.get(b"hiprtcGetProgramLogSize\0")?,
                        log: *lib.get(b"hiprtcGetProgramLog\0")?,
                        code_size: *lib.get(b"hiprtcGetCodeSize\0")?,
                        code: *lib.get(b"hiprtcGetCode\0")?,
                        destroy: *lib.get(b"hiprtcDestroyProgram\0")?,
                        version: *lib.get(b"hiprtcVersion\0")?,
                        _lib: lib,
                    })
                })()
            };
            if let Ok(r) = found {
                return Ok(r);
            }
        }
        Err(format!("hiprtc not found (tried {})", names.join(", ")))
    })
    .as_ref()
    .map_err(|e| e.clone())
}

fn hiprtc_compile(source: &str, options: &[String]) -> std::result::Result<Vec<u8>, String> {
    let rtc = hiprtc()?;
    let src = CString::new(source).map_err(|_| "source has a NUL byte")?;
    let name = CString::new("ggraph.cu").expect("no NUL");
    let opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).expect("no NUL in options"))
        .collect();
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: valid strings; the program is destroyed below.
    unsafe {
        let mut prog: *mut c_void = std::ptr::null_mut();
        if (rtc.create)(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        ) != 0
        {
            return Err("hiprtcCreateProgram failed".into());
        }
        let rc = (rtc.compile)(prog, ptrs.len() as c_int, ptrs.as_ptr());
        let result = if rc != 0 {
            let mut n = 0usize;
            let mut log = String::new();
            if (rtc.log_size)(prog, &mut n) == 0 && n > 0 {
                let mut buf = vec![0u8; n];
                if (rtc.log)(prog, buf.as_mut_ptr() as *mut c_char) == 0 {
                    log = String::from_utf8_lossy(&buf)
                        .trim_end_matches('\0')
                        .to_string();
                }
            }
            Err(format!("hiprtc error {rc}\n{log}"))
        } else {
            let mut n = 0usize;
            let mut buf = Vec::new();
            if (rtc.code_size)(prog, &mut n) == 0 && n > 0 {
                buf = vec![0u8; n];
                if (rtc.code)(prog, buf.as_mut_ptr() as *mut c_char) != 0 {
                    buf.clear();
                }
            }
            if buf.is_empty() {
                Err("hiprtcGetCode gave nothing".into())
            } else {
                Ok(buf)
            }
        };
        (rtc.destroy)(&mut prog);
        result
    }
}

fn hiprtc_version() -> String {
    match hiprtc() {
        Ok(rtc) => {
            let (mut a, mut b) = (0, 0);
            // SAFETY: valid out-pointers.
            if unsafe { (rtc.version)(&mut a, &mut b) } == 0 {
                format!("{a}.{b}")
            } else {
                "unknown".into()
            }
        }
        Err(_) => "absent".into(),
    }
}

/// One HIP device.
pub struct HipRuntime {
    ordinal: usize,
    name: String,
    arch: String,
    module: OnceLock<std::result::Result<usize, String>>,
    functions: Mutex<HashMap<&'static str, usize>>,
    peer: Mutex<HashMap<usize, bool>>,
}

impl HipRuntime {
    fn new(ordinal: usize) -> Result<HipRuntime> {
        let label = format!("hip:{ordinal}");
        let dev = ordinal as c_int;
        // SAFETY: plain queries with valid out-pointers.
        unsafe {
            let mut buf = [0 as c_char; 256];
            check(
                hipDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev),
                &label,
                "hipDeviceGetName",
            )?;
            let name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            // the properties inside a larger zeroed buffer, in case the
            // library's struct is larger than the bindings' one
            #[repr(C)]
            union Props {
                p: std::mem::ManuallyDrop<hipDeviceProp_t>,
                raw: [u8; 16384],
            }
            let mut props = Props { raw: [0; 16384] };
            let arch = if hipGetDeviceProperties(&mut *props.p, dev) == HIP_SUCCESS {
                let raw = &props.p.gcnArchName;
                let bytes: Vec<u8> = raw
                    .iter()
                    .take_while(|c| **c != 0)
                    .map(|c| *c as u8)
                    .collect();
                String::from_utf8(bytes)
                    .ok()
                    .filter(|s| s.starts_with("gfx"))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            Ok(HipRuntime {
                ordinal,
                name,
                arch: if arch.is_empty() {
                    "gfx-current".into()
                } else {
                    arch
                },
                module: OnceLock::new(),
                functions: Mutex::new(HashMap::new()),
                peer: Mutex::new(HashMap::new()),
            })
        }
    }

    fn label(&self) -> String {
        format!("hip:{}", self.ordinal)
    }

    fn check(&self, code: i32, what: &str) -> Result<()> {
        check(code, &self.label(), what)
    }

    /// Makes this device current on the calling thread.
    fn bind(&self) -> Result<()> {
        // SAFETY: a valid ordinal.
        self.check(
            unsafe { hipSetDevice(self.ordinal as c_int) },
            "hipSetDevice",
        )
    }

    fn module(&self) -> Result<HipModule> {
        let m = self
            .module
            .get_or_init(|| self.load_module().map(|m| m as usize));
        match m {
            Ok(m) => Ok(*m as HipModule),
            Err(e) => Err(Error::backend(self.label(), e.clone())),
        }
    }

    fn load_module(&self) -> std::result::Result<HipModule, String> {
        self.bind().map_err(|e| e.to_string())?;
        let source = source::full_source(COMPAT_HIP);
        let mut options = vec!["-O3".to_string()];
        if self.arch != "gfx-current" {
            options.push(format!("--offload-arch={}", self.arch));
        }
        let file = source::cache_dir().map(|d| {
            source::cache_file(&d, "HIP", &self.arch, &source, &options, &hiprtc_version())
        });
        let image = match file.as_deref().and_then(source::cache_read) {
            Some(b) => b,
            None => {
                let b = hiprtc_compile(&source, &options)?;
                if let Some(f) = &file {
                    source::cache_write(f, &b);
                }
                b
            }
        };
        let mut module: HipModule = std::ptr::null_mut();
        // SAFETY: a code object from hiprtc.
        let rc = unsafe { hipModuleLoadData(&mut module, image.as_ptr() as *const c_void) };
        if rc != HIP_SUCCESS {
            return Err(format!("hipModuleLoadData: {}", error_name(rc)));
        }
        tracing::info!("{}: kernels loaded for {}", self.label(), self.arch);
        Ok(module)
    }

    fn function(&self, name: &'static str) -> Result<HipFunction> {
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = cache.get(name) {
            return Ok(*f as HipFunction);
        }
        let module = self.module()?;
        let cname =
            CString::new(name).map_err(|_| Error::backend(self.label(), "bad kernel name"))?;
        let mut f: HipFunction = std::ptr::null_mut();
        // SAFETY: module loaded, name NUL-terminated.
        self.check(
            unsafe { hipModuleGetFunction(&mut f, module, cname.as_ptr()) },
            &format!("hipModuleGetFunction({name})"),
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

    fn copy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        kind: c_int,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: the caller (a Runtime method) passes valid ranges.
        let rc = unsafe {
            match stream {
                Some(s) => hipMemcpyAsync(dst, src, len, kind, s as HipStream),
                None => hipMemcpy(dst, src, len, kind),
            }
        };
        self.check(rc, "hipMemcpy")
    }
}

// SAFETY: HIP handles may be used from any thread once the device is made
// current (every method binds it first); caches are behind mutexes.
unsafe impl Send for HipRuntime {}
unsafe impl Sync for HipRuntime {}

impl Runtime for HipRuntime {
    fn family(&self) -> &'static str {
        "HIP"
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

    fn memory(&self) -> Result<(u64, u64)> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        self.check(
            unsafe { hipMemGetInfo(&mut free, &mut total) },
            "hipMemGetInfo",
        )?;
        Ok((free as u64, total as u64))
    }

    /// One hipMalloc; the graph allocator subdivides it. Free memory is not
    /// consulted here: the driver says when the device is full.
    fn alloc(&self, bytes: u64) -> Result<DevPtr> {
        self.bind()?;
        let size = usize::try_from(bytes).map_err(|_| self.oom(bytes))?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { hipMalloc(&mut p, size) };
        if rc == HIP_ERROR_OUT_OF_MEMORY {
            return Err(self.oom(bytes));
        }
        self.check(rc, "hipMalloc")?;
        Ok(p as DevPtr)
    }

    unsafe fn free(&self, ptr: DevPtr) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            let rc = unsafe { hipFree(ptr as *mut c_void) };
            if rc != HIP_SUCCESS {
                tracing::warn!("{}: hipFree failed: {}", self.label(), error_name(rc));
            }
        }
    }

    fn alloc_pinned(&self, bytes: u64) -> Result<*mut u8> {
        self.bind()?;
        let size = usize::try_from(bytes).map_err(|_| self.oom(bytes))?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; 1 = hipHostMallocPortable.
        self.check(unsafe { hipHostMalloc(&mut p, size, 1) }, "hipHostMalloc")?;
        Ok(p as *mut u8)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) {
        // SAFETY: caller's contract.
        unsafe { hipHostFree(ptr as *mut c_void) };
    }

    unsafe fn htod(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.copy(
            dst as *mut c_void,
            src as *const c_void,
            len,
            MEMCPY_HOST_TO_DEVICE,
            stream,
        )
    }

    unsafe fn dtoh(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.copy(
            dst as *mut c_void,
            src as *const c_void,
            len,
            MEMCPY_DEVICE_TO_HOST,
            stream,
        )
    }

    unsafe fn dtod(
        &self,
        dst: DevPtr,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.copy(
            dst as *mut c_void,
            src as *const c_void,
            len,
            MEMCPY_DEVICE_TO_DEVICE,
            stream,
        )
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
        let rc = unsafe {
            match stream {
                Some(s) => hipMemsetAsync(dst as *mut c_void, value as c_int, len, s as HipStream),
                None => hipMemset(dst as *mut c_void, value as c_int, len),
            }
        };
        self.check(rc, "hipMemset")
    }

    unsafe fn peer_copy(
        &self,
        dst: DevPtr,
        src_rt: &dyn Runtime,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<bool> {
        let Some(other) = src_rt.as_any().downcast_ref::<HipRuntime>() else {
            return Ok(false);
        };
        let peer_ok = {
            let mut cache = self.peer.lock().unwrap_or_else(|e| e.into_inner());
            *cache.entry(other.ordinal).or_insert_with(|| {
                let mut can: c_int = 0;
                // SAFETY: plain queries.
                unsafe {
                    if hipDeviceCanAccessPeer(
                        &mut can,
                        self.ordinal as c_int,
                        other.ordinal as c_int,
                    ) != HIP_SUCCESS
                        || can == 0
                        || self.bind().is_err()
                    {
                        return false;
                    }
                    let rc = hipDeviceEnablePeerAccess(other.ordinal as c_int, 0);
                    rc == HIP_SUCCESS || rc == HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED
                }
            })
        };
        if !peer_ok {
            return Ok(false);
        }
        self.bind()?;
        let (d, s) = (self.ordinal as c_int, other.ordinal as c_int);
        // SAFETY: caller's contract.
        let rc = unsafe {
            match stream {
                Some(st) => hipMemcpyPeerAsync(
                    dst as *mut c_void,
                    d,
                    src as *const c_void,
                    s,
                    len,
                    st as HipStream,
                ),
                None => hipMemcpyPeer(dst as *mut c_void, d, src as *const c_void, s, len),
            }
        };
        self.check(rc, "hipMemcpyPeer")?;
        Ok(true)
    }

    fn stream_create(&self) -> Result<RawStream> {
        self.bind()?;
        let mut s: HipStream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.check(unsafe { hipStreamCreate(&mut s) }, "hipStreamCreate")?;
        Ok(s as RawStream)
    }

    unsafe fn stream_destroy(&self, stream: RawStream) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            unsafe { hipStreamDestroy(stream as HipStream) };
        }
    }

    fn stream_sync(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: a stream of this device.
        self.check(
            unsafe { hipStreamSynchronize(stream as HipStream) },
            "hipStreamSynchronize",
        )
    }

    fn event_create(&self) -> Result<RawEvent> {
        self.bind()?;
        let mut e: HipEvent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; 2 = hipEventDisableTiming.
        self.check(
            unsafe { hipEventCreateWithFlags(&mut e, 2) },
            "hipEventCreate",
        )?;
        Ok(e as RawEvent)
    }

    unsafe fn event_destroy(&self, event: RawEvent) {
        // SAFETY: caller's contract.
        unsafe { hipEventDestroy(event as HipEvent) };
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: handles of this device.
        self.check(
            unsafe { hipEventRecord(event as HipEvent, stream as HipStream) },
            "hipEventRecord",
        )
    }

    fn event_sync(&self, event: RawEvent) -> Result<()> {
        // SAFETY: an event of this runtime.
        self.check(
            unsafe { hipEventSynchronize(event as HipEvent) },
            "hipEventSynchronize",
        )
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: valid handles.
        self.check(
            unsafe { hipStreamWaitEvent(stream as HipStream, event as HipEvent, 0) },
            "hipStreamWaitEvent",
        )
    }

    unsafe fn launch(&self, stream: RawStream, spec: &mut LaunchSpec<'_>) -> Result<()> {
        let f = self.function(spec.kernel)?;
        self.bind()?;
        let [gx, gy, gz] = spec.grid;
        let [bx, by, bz] = spec.block;
        // SAFETY: caller's contract (arguments match the kernel).
        let rc = unsafe {
            hipModuleLaunchKernel(
                f,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                spec.shared_bytes,
                stream as HipStream,
                spec.args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check(rc, &format!("launch of {}", spec.kernel))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_result_codes_are_plain_numbers_not_undefined_enums() {
        // a code no HIP release defines: handled as an integer
        let e = check(123_456, "hip:0", "hipFoo").unwrap_err().to_string();
        assert!(e.contains("hipFoo failed") && e.contains("123456"), "{e}");
        assert!(check(HIP_SUCCESS, "hip:0", "hipFoo").is_ok());
    }

    #[test]
    fn no_amd_gpu_means_no_devices_and_no_panic() {
        let d = devices();
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

    /// hiprtc needs no GPU: the shared kernel source compiles for a real
    /// AMD architecture here, so a HIP syntax or type error fails CI.
    #[test]
    fn the_kernel_source_compiles_with_hiprtc_for_gfx90a() {
        if let Err(e) = hiprtc() {
            panic!("hiprtc not found (libamdhip64-dev installs it): {e}");
        }
        let source = source::full_source(COMPAT_HIP);
        let options = ["-O3".to_string(), "--offload-arch=gfx90a".to_string()];
        match hiprtc_compile(&source, &options) {
            Ok(image) => assert!(image.len() > 1024, "{} byte code object", image.len()),
            Err(e) => panic!("hiprtc rejected the kernel source: {e}"),
        }
    }

    #[test]
    fn the_hip_source_uses_the_hip_prelude() {
        let s = source::full_source(COMPAT_HIP);
        assert!(s.contains("__shfl_xor((v), (m), 32)"));
        assert!(s.contains("k_mul_mat_vec"));
    }
}
