//! hiprtc, the run-time compiler of HIP, loaded at run time with
//! libloading: ROCm 5.2 keeps it inside libamdhip64, later releases in
//! libhiprtc. It compiles the kernel source to a code object for the
//! device's `gfx` architecture, and needs no GPU to do so.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

use ggraph_gpu::program::{ProgramCompiler, build_program};

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

/// hiprtc from the first library that has it, loaded once.
fn load() -> std::result::Result<&'static Hiprtc, String> {
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

/// Compiles the source with `options`; the error carries hiprtc's log.
pub fn compile(source: &str, options: &[String]) -> Result<Vec<u8>, String> {
    let rtc = load()?;
    // SAFETY: the entry points were found in the loaded library.
    unsafe { build_program(rtc, source, options) }
}

impl ProgramCompiler for Hiprtc {
    type Program = *mut c_void;

    unsafe fn create(&self, source: &CStr, name: &CStr) -> Result<*mut c_void, String> {
        let mut prog: *mut c_void = std::ptr::null_mut();
        let null = std::ptr::null();
        // SAFETY: valid NUL-terminated strings, no headers.
        match unsafe { (self.create)(&mut prog, source.as_ptr(), name.as_ptr(), 0, null, null) } {
            0 => Ok(prog),
            _ => Err("hiprtcCreateProgram failed".into()),
        }
    }

    unsafe fn compile(&self, prog: *mut c_void, options: &[*const c_char]) -> Result<(), String> {
        // SAFETY: caller's contract.
        match unsafe { (self.compile)(prog, options.len() as c_int, options.as_ptr()) } {
            0 => Ok(()),
            rc => Err(format!("hiprtc error {rc}")),
        }
    }

    unsafe fn log_size(&self, prog: *mut c_void, size: &mut usize) -> bool {
        // SAFETY: caller's contract.
        unsafe { (self.log_size)(prog, size) == 0 }
    }

    unsafe fn log(&self, prog: *mut c_void, out: *mut c_char) -> bool {
        // SAFETY: caller's contract.
        unsafe { (self.log)(prog, out) == 0 }
    }

    unsafe fn code_size(&self, prog: *mut c_void, size: &mut usize) -> bool {
        // SAFETY: caller's contract.
        unsafe { (self.code_size)(prog, size) == 0 }
    }

    unsafe fn code(&self, prog: *mut c_void, out: *mut c_char) -> bool {
        // SAFETY: caller's contract.
        unsafe { (self.code)(prog, out) == 0 }
    }

    fn code_call(&self) -> &'static str {
        "hiprtcGetCode"
    }

    unsafe fn destroy(&self, mut prog: *mut c_void) {
        // SAFETY: caller's contract.
        unsafe { (self.destroy)(&mut prog) };
    }
}

/// hiprtc's version (`5.2`), or `absent`.
pub fn version() -> String {
    match load() {
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

#[cfg(test)]
mod tests {
    use ggraph_gpu::source::{self, COMPAT_HIP};

    use super::*;

    /// hiprtc needs no GPU: the shared kernel source compiles for a real
    /// AMD architecture here, so a HIP syntax or type error fails CI.
    #[test]
    fn the_kernel_source_compiles_with_hiprtc_for_gfx90a() {
        if let Err(e) = load() {
            panic!("hiprtc not found (libamdhip64-dev installs it): {e}");
        }
        let source = source::full_source(COMPAT_HIP);
        let options = ["-O3".to_string(), "--offload-arch=gfx90a".to_string()];
        match compile(&source, &options) {
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
