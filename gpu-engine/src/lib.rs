//! The GPU engine shared by the CUDA and HIP backends (and the host
//! emulator the tests run): devices, buffers, streams, the op dispatch and
//! the kernel source (`kernels/ggraph.cu`, one CUDA C file for CUDA, HIP
//! and the emulator). Each family supplies a [`Runtime`]; everything else
//! is one code path.

mod device;
mod dispatch;
#[cfg(feature = "emulator")]
pub mod emulator;
pub mod runtime;
pub mod source;
mod stream;
mod supports;

pub use device::{
    DEVICE_ALIGNMENT, GpuBuffer, GpuBufferType, GpuDevice, PinnedBuffer, PinnedBufferType,
};
pub use dispatch::MMV_MAX_COLS;
pub use runtime::{DevPtr, Gemm, LaunchSpec, RawEvent, RawStream, Runtime};
pub use stream::{GpuEvent, GpuStream, KTensor};
pub use supports::{MAX_FA_HEAD, MAX_SORT_ROW, gpu_supports};
