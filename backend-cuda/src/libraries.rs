//! Which CUDA libraries this machine has. cudarc loads each at run time
//! (`dynamic-loading`) and panics on a missing one, so every first call
//! into a library is guarded by these.

use cudarc::cublas::sys as cb;
use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nv;

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
