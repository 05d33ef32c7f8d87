//! The thin driver interface under the GPU engine: what differs between
//! CUDA, HIP and the host emulator. Everything above it (devices, buffers,
//! streams, the op dispatch and the kernels) is shared.

use std::any::Any;
use std::ffi::c_void;

use ggraph_core::{DType, Result};

/// A device address (CUdeviceptr, hipDeviceptr_t, or a host address in
/// the emulator).
pub type DevPtr = u64;

/// An opaque stream handle of the runtime (0 is never a valid stream).
pub type RawStream = u64;

/// An opaque event handle of the runtime.
pub type RawEvent = u64;

/// One kernel launch: grid and block sizes, dynamic shared memory, and a
/// pointer to the value of each kernel parameter, in order (as
/// `cuLaunchKernel` takes them).
pub struct LaunchSpec<'a> {
    pub kernel: &'static str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub args: &'a mut [*mut c_void],
}

/// A batch of matrix products in BLAS terms (column-major):
/// `C[b] = A[b]ᵀ · B[b]` with A `k × m` (lda), B `k × n` (ldb) and C
/// `m × n` (ldc, f32), batch b at `stride_*` elements from the previous.
/// In ggml terms: A holds m weight rows of k values, B holds n activation
/// columns of k values, C holds n result rows of m values.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a: DevPtr,
    pub a_type: DType,
    pub lda: i32,
    pub stride_a: i64,
    pub b: DevPtr,
    pub b_type: DType,
    pub ldb: i32,
    pub stride_b: i64,
    pub c: DevPtr,
    pub ldc: i32,
    pub stride_c: i64,
    pub batch: i32,
}

/// One device of a GPU runtime. Methods that take raw pointers are
/// `unsafe`: the caller guarantees the ranges are valid allocations of
/// this device (or host memory of the given length). A `stream` of `None`
/// means a synchronous operation, ordered after all work queued on this
/// device's streams.
pub trait Runtime: Send + Sync {
    /// `CUDA`, `HIP` or `emu`.
    fn family(&self) -> &'static str;

    /// Index of the device within its runtime.
    fn ordinal(&self) -> usize;

    /// The driver's name of the device.
    fn device_name(&self) -> &str;

    /// The architecture kernels are compiled for (`sm_90`, `gfx90a`, `host`).
    fn arch(&self) -> &str;

    /// CUDA compute capability (major, minor), where it applies.
    fn compute_capability(&self) -> Option<(u32, u32)> {
        None
    }

    /// Free and total device memory from the driver.
    fn memory(&self) -> Result<(u64, u64)>;

    /// One driver allocation of `bytes`.
    fn alloc(&self, bytes: u64) -> Result<DevPtr>;

    /// # Safety
    /// `ptr` came from `alloc` of this runtime and is not used afterwards.
    unsafe fn free(&self, ptr: DevPtr);

    /// Page-locked host memory, where the runtime has it.
    fn alloc_pinned(&self, bytes: u64) -> Result<*mut u8>;

    /// # Safety
    /// `ptr` came from `alloc_pinned` of this runtime.
    unsafe fn free_pinned(&self, ptr: *mut u8);

    /// # Safety
    /// `dst..dst+len` is device memory of this runtime; `src` holds `len`
    /// bytes and, for an async copy from pinned memory, stays alive until
    /// the stream passes the copy.
    unsafe fn htod(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()>;

    /// # Safety
    /// As [`Runtime::htod`], the other way round.
    unsafe fn dtoh(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()>;

    /// # Safety
    /// Both ranges are device memory of this runtime.
    unsafe fn dtod(
        &self,
        dst: DevPtr,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()>;

    /// # Safety
    /// The range is device memory of this runtime.
    unsafe fn memset(
        &self,
        dst: DevPtr,
        value: u8,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()>;

    /// Copies from another device of the same runtime directly (peer
    /// access, or the driver's own peer copy); `Ok(false)` when there is no
    /// direct path and the caller must stage through the host.
    ///
    /// # Safety
    /// `dst` is device memory of this runtime, `src` of `src_rt`.
    unsafe fn peer_copy(
        &self,
        _dst: DevPtr,
        _src_rt: &dyn Runtime,
        _src: DevPtr,
        _len: usize,
        _stream: Option<RawStream>,
    ) -> Result<bool> {
        Ok(false)
    }

    fn stream_create(&self) -> Result<RawStream>;

    /// # Safety
    /// The stream came from `stream_create` and is not used afterwards.
    unsafe fn stream_destroy(&self, stream: RawStream);

    fn stream_sync(&self, stream: RawStream) -> Result<()>;

    fn event_create(&self) -> Result<RawEvent>;

    /// # Safety
    /// The event came from `event_create` and is not used afterwards.
    unsafe fn event_destroy(&self, event: RawEvent);

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()>;

    fn event_sync(&self, event: RawEvent) -> Result<()>;

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()>;

    /// Queues a kernel of `kernels/ggraph.cu` (compiled on first use).
    ///
    /// # Safety
    /// The arguments match the kernel's parameters and every pointer in
    /// them addresses memory the kernel may touch.
    unsafe fn launch(&self, stream: RawStream, spec: &mut LaunchSpec<'_>) -> Result<()>;

    /// Whether [`Runtime::gemm`] is available (cuBLAS, hipBLAS, ...).
    fn has_blas(&self) -> bool {
        false
    }

    /// Queues a batched matrix product.
    ///
    /// # Safety
    /// The matrices lie in device memory of this runtime.
    unsafe fn gemm(&self, _stream: RawStream, _g: &Gemm) -> Result<()> {
        Err(ggraph_core::Error::backend(
            self.device_name(),
            "no BLAS library on this device",
        ))
    }

    fn as_any(&self) -> &dyn Any;
}
