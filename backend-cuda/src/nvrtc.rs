//! NVRTC, the run-time compiler of CUDA C: the kernel source to a cubin
//! for the device's own architecture, or PTX the driver compiles further.

use std::ffi::{CStr, c_char, c_int};

use cudarc::nvrtc::sys as nv;
use ggraph_gpu::program::{ProgramCompiler, build_program};

use crate::libraries::nvrtc_present;

/// NVRTC's version (`12.8`), where the library is present.
pub fn version() -> Option<String> {
    if !nvrtc_present() {
        return None;
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: the library is present.
    let r = unsafe { nv::nvrtcVersion(&mut a, &mut b) };
    (r == nv::nvrtcResult::NVRTC_SUCCESS).then(|| format!("{a}.{b}"))
}

/// Compiles the source: a cubin when `cubin`, else NUL-terminated PTX.
/// The error carries NVRTC's log.
pub fn compile(source: &str, options: &[String], cubin: bool) -> Result<Vec<u8>, String> {
    if !nvrtc_present() {
        return Err("NVRTC (libnvrtc.so) not found: install the CUDA toolkit's NVRTC library or put it on the library path".into());
    }
    // SAFETY: the library is present; Nvrtc's entry points are NVRTC's.
    unsafe { build_program(&Nvrtc { cubin }, source, options) }
}

/// NVRTC's program calls, giving a cubin or PTX.
struct Nvrtc {
    cubin: bool,
}

fn ok(r: nv::nvrtcResult) -> bool {
    r == nv::nvrtcResult::NVRTC_SUCCESS
}

impl ProgramCompiler for Nvrtc {
    type Program = nv::nvrtcProgram;

    unsafe fn create(&self, source: &CStr, name: &CStr) -> Result<nv::nvrtcProgram, String> {
        let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
        let null = std::ptr::null();
        // SAFETY: valid NUL-terminated strings, no headers.
        let r = unsafe {
            nv::nvrtcCreateProgram(&mut prog, source.as_ptr(), name.as_ptr(), 0, null, null)
        };
        if ok(r) {
            Ok(prog)
        } else {
            Err("nvrtcCreateProgram failed".into())
        }
    }

    unsafe fn compile(
        &self,
        prog: nv::nvrtcProgram,
        options: &[*const c_char],
    ) -> Result<(), String> {
        // SAFETY: caller's contract.
        match unsafe { nv::nvrtcCompileProgram(prog, options.len() as c_int, options.as_ptr()) } {
            nv::nvrtcResult::NVRTC_SUCCESS => Ok(()),
            failed => Err(format!("NVRTC: {failed:?}")),
        }
    }

    unsafe fn log_size(&self, prog: nv::nvrtcProgram, size: &mut usize) -> bool {
        // SAFETY: caller's contract.
        ok(unsafe { nv::nvrtcGetProgramLogSize(prog, size) })
    }

    unsafe fn log(&self, prog: nv::nvrtcProgram, out: *mut c_char) -> bool {
        // SAFETY: caller's contract.
        ok(unsafe { nv::nvrtcGetProgramLog(prog, out) })
    }

    unsafe fn code_size(&self, prog: nv::nvrtcProgram, size: &mut usize) -> bool {
        // SAFETY: caller's contract.
        ok(unsafe {
            if self.cubin {
                nv::nvrtcGetCUBINSize(prog, size)
            } else {
                nv::nvrtcGetPTXSize(prog, size)
            }
        })
    }

    unsafe fn code(&self, prog: nv::nvrtcProgram, out: *mut c_char) -> bool {
        // SAFETY: caller's contract.
        ok(unsafe {
            if self.cubin {
                nv::nvrtcGetCUBIN(prog, out)
            } else {
                nv::nvrtcGetPTX(prog, out)
            }
        })
    }

    fn code_call(&self) -> &'static str {
        if self.cubin {
            "nvrtcGetCUBIN"
        } else {
            "nvrtcGetPTX"
        }
    }

    fn code_is_text(&self) -> bool {
        !self.cubin
    }

    unsafe fn destroy(&self, mut prog: nv::nvrtcProgram) {
        // SAFETY: caller's contract.
        unsafe { nv::nvrtcDestroyProgram(&mut prog) };
    }
}
