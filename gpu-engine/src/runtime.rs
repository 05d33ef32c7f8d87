//! The thin runtime interface under the GPU engine: what differs between
//! CUDA, HIP and the host emulator, one driver call per method. Everything
//! above it (binding the device first, error messages, the module cache,
//! peer access, devices, buffers, streams, the op dispatch and the
//! kernels) is written once in the engine.

use std::any::Any;
use std::ffi::{CStr, c_void};
use std::fmt;

use ggraph_core::DType;

/// A device address (CUdeviceptr, hipDeviceptr_t, or a host address in
/// the emulator).
pub type DevPtr = u64;

/// An opaque stream handle of the runtime (0 is never a valid stream).
pub type RawStream = u64;

/// An opaque event handle of the runtime.
pub type RawEvent = u64;

/// An opaque handle of the loaded kernel module.
pub type RawModule = u64;

/// An opaque handle of one kernel of the module.
pub type RawFunction = u64;

/// A runtime call that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// `call` (the runtime's entry point, e.g. `cuMemAlloc`) returned the
    /// result code the runtime names `code`.
    Failed {
        /// The entry point, e.g. `cuMemAlloc` or `hipModuleLaunchKernel`.
        call: &'static str,
        /// The runtime's name of the result code, e.g.
        /// `CUDA_ERROR_ILLEGAL_ADDRESS`.
        code: String,
    },
    /// The device has no memory left for an allocation.
    OutOfMemory,
    /// Anything else, in words.
    Other(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Failed { call, code } => write!(f, "{call} failed: {code}"),
            CallError::OutOfMemory => f.write_str("out of memory"),
            CallError::Other(msg) => f.write_str(msg),
        }
    }
}

impl CallError {
    /// As a ggraph error of `device` (`cuda:0`, or the family during
    /// discovery).
    pub fn on(&self, device: &str) -> ggraph_core::Error {
        ggraph_core::Error::backend(device, self.to_string())
    }
}

/// The result of one runtime call.
pub type Call<T = ()> = std::result::Result<T, CallError>;

/// The direction of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// `src` is host memory, `dst` device memory.
    HostToDevice,
    /// `src` is device memory, `dst` host memory.
    DeviceToHost,
    /// Both are memory of the same device.
    DeviceToDevice,
}

/// One copy of `len` bytes. Host addresses are passed as integers; a
/// `stream` of `None` means a synchronous copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemCopy {
    /// Destination: a [`DevPtr`], or a host address for
    /// [`CopyKind::DeviceToHost`].
    pub dst: u64,
    /// Source: a [`DevPtr`], or a host address for
    /// [`CopyKind::HostToDevice`].
    pub src: u64,
    /// Bytes to copy.
    pub len: usize,
    /// Which of `dst` and `src` are host addresses.
    pub kind: CopyKind,
    /// The stream to queue the copy on; `None` copies synchronously.
    pub stream: Option<RawStream>,
}

/// One kernel launch: the kernel (its name in `kernels/ggraph.cu` and its
/// handle in the loaded module), the stream, grid and block sizes, dynamic
/// shared memory, and a pointer to the value of each kernel parameter, in
/// order (as `cuLaunchKernel` takes them).
pub struct LaunchSpec<'a> {
    /// The kernel's name in `kernels/ggraph.cu` (`extern "C"`, so not
    /// mangled): for error messages, and how the emulator finds it.
    pub kernel: &'static str,
    /// The kernel's handle, from [`Runtime::module_function`].
    pub function: RawFunction,
    /// The stream the launch is queued on.
    pub stream: RawStream,
    /// Blocks in x, y and z (y and z at most 65535).
    pub grid: [u32; 3],
    /// Threads per block in x, y and z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// One pointer per kernel parameter, to its value.
    pub args: &'a mut [*mut c_void],
}

/// A batch of matrix products in BLAS terms (column-major):
/// `C[b] = A[b]ᵀ · B[b]` with A `k × m` (lda), B `k × n` (ldb) and C
/// `m × n` (ldc, f32), batch b at `stride_*` elements from the previous.
/// In ggml terms: A holds m weight rows of k values, B holds n activation
/// columns of k values, C holds n result rows of m values.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    /// Rows of the result: weight rows (ggml's `ne[1]` of the weights).
    pub m: i32,
    /// Columns of the result: activation columns (tokens).
    pub n: i32,
    /// Length of the dot products (ggml's `ne[0]` of both operands).
    pub k: i32,
    /// First element of the weights.
    pub a: DevPtr,
    /// Element type of A: `F32`, `F16` or `BF16`.
    pub a_type: DType,
    /// Elements from one weight row to the next (at least `k`).
    pub lda: i32,
    /// Elements from one batch's A to the next.
    pub stride_a: i64,
    /// First element of the activations.
    pub b: DevPtr,
    /// Element type of B; the engine passes the same type as `a_type`.
    pub b_type: DType,
    /// Elements from one activation column to the next (at least `k`).
    pub ldb: i32,
    /// Elements from one batch's B to the next.
    pub stride_b: i64,
    /// First element of the f32 result.
    pub c: DevPtr,
    /// Elements from one result row of `m` values to the next (at least
    /// `m`).
    pub ldc: i32,
    /// Elements from one batch's C to the next.
    pub stride_c: i64,
    /// Number of products.
    pub batch: i32,
}

/// What a runtime says about one of its devices, fixed when it is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `CUDA`, `HIP` or `emu`.
    pub family: &'static str,
    /// Index of the device within its runtime.
    pub ordinal: usize,
    /// The driver's name of the device.
    pub name: String,
    /// The architecture kernels are compiled for (`sm_90`, `gfx90a`, `host`).
    pub arch: String,
    /// CUDA compute capability (major, minor), where it applies.
    pub compute_capability: Option<(u32, u32)>,
    /// The device is integrated with the host and shares its memory
    /// (`DeviceKind::IntegratedGpu`): CUDA's `integrated` attribute.
    pub integrated: bool,
    /// Its free memory is the host's available memory
    /// (`MemorySource::HostShared`), as ggml's CUDA backend counts it on
    /// Linux for an integrated device and wherever unified memory is
    /// asked for (`GGML_CUDA_ENABLE_UNIFIED_MEMORY`); ggml's HIP backend
    /// does not.
    pub free_from_host: bool,
}

/// One device of a GPU runtime: each method is one driver call (or a short
/// fixed sequence of them). The engine makes the device current
/// ([`Runtime::bind`]) before every other call, turns [`CallError`]s into
/// ggraph errors naming the device, and caches what it loads.
///
/// Methods that take raw pointers are `unsafe`: the caller guarantees the
/// ranges are valid allocations of this device (or host memory of the
/// given length). A `stream` of `None` means a synchronous operation,
/// ordered after all work queued on this device's streams.
pub trait Runtime: Send + Sync {
    /// Which device this is.
    fn info(&self) -> &DeviceInfo;

    /// Makes this device current on the calling thread.
    fn bind(&self) -> Call {
        Ok(())
    }

    /// Free and total device memory from the driver.
    fn memory(&self) -> Call<(u64, u64)>;

    /// One driver allocation of `bytes`; [`CallError::OutOfMemory`] when
    /// the device is full.
    fn alloc(&self, bytes: usize) -> Call<DevPtr>;

    /// # Safety
    /// `ptr` came from `alloc` of this runtime and is not used afterwards.
    unsafe fn free(&self, ptr: DevPtr) -> Call;

    /// Page-locked host memory, where the runtime has it.
    fn alloc_pinned(&self, bytes: usize) -> Call<*mut u8>;

    /// # Safety
    /// `ptr` came from `alloc_pinned` of this runtime.
    unsafe fn free_pinned(&self, ptr: *mut u8) -> Call;

    /// # Safety
    /// Device ranges are memory of this runtime, host ranges hold `len`
    /// bytes and, for an async copy from pinned memory, stay alive until
    /// the stream passes the copy.
    unsafe fn memcpy(&self, copy: &MemCopy) -> Call;

    /// # Safety
    /// The range is device memory of this runtime.
    unsafe fn memset(&self, dst: DevPtr, value: u8, len: usize, stream: Option<RawStream>) -> Call;

    /// Whether this device can reach `other`'s memory directly (another
    /// device of the same runtime). Asked once per pair; the engine then
    /// calls [`Runtime::enable_peer_access`].
    fn can_access_peer(&self, _other: &dyn Runtime) -> bool {
        false
    }

    /// Turns on direct access to `other`'s memory (already on is success).
    fn enable_peer_access(&self, _other: &dyn Runtime) -> Call {
        Ok(())
    }

    /// Copies from `from`'s memory directly, once peer access is on.
    ///
    /// # Safety
    /// `copy.dst` is device memory of this runtime, `copy.src` of `from`.
    unsafe fn memcpy_peer(&self, _copy: &MemCopy, _from: &dyn Runtime) -> Call {
        Err(CallError::Other("no peer copies on this runtime".into()))
    }

    /// A new stream, ordered after synchronous copies and memsets (CUDA:
    /// a blocking stream, as `cuStreamCreate` with flags 0 gives).
    fn stream_create(&self) -> Call<RawStream>;

    /// # Safety
    /// The stream came from `stream_create` and is not used afterwards.
    unsafe fn stream_destroy(&self, stream: RawStream) -> Call;

    /// Blocks the calling thread until all work queued on `stream` has
    /// finished; errors of that work (a faulting kernel) surface here.
    fn stream_sync(&self, stream: RawStream) -> Call;

    /// A new event, without timing (used only for ordering).
    fn event_create(&self) -> Call<RawEvent>;

    /// # Safety
    /// The event came from `event_create` and is not used afterwards.
    unsafe fn event_destroy(&self, event: RawEvent) -> Call;

    /// Marks the point `stream` has reached: the event completes when the
    /// work queued before it has finished.
    fn event_record(&self, event: RawEvent, stream: RawStream) -> Call;

    /// Blocks the calling thread until `event` completes.
    fn event_sync(&self, event: RawEvent) -> Call;

    /// Makes later work on `stream` wait, on the device, for `event`
    /// (possibly recorded on another stream); the caller does not block.
    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Call;

    /// Compiles the kernels of `kernels/ggraph.cu` (or finds them in the
    /// disk cache, see [`crate::kernel_cache`]) and loads them. Called
    /// once per device, on the first launch; the error is the whole story
    /// of what was tried.
    fn load_module(&self) -> std::result::Result<RawModule, String>;

    /// The kernel `name` of the loaded module.
    fn module_function(&self, module: RawModule, name: &CStr) -> Call<RawFunction>;

    /// Queues a kernel of the loaded module.
    ///
    /// # Safety
    /// The arguments match the kernel's parameters and every pointer in
    /// them addresses memory the kernel may touch.
    unsafe fn launch(&self, spec: &mut LaunchSpec<'_>) -> Call;

    /// Whether [`Runtime::gemm`] is available (cuBLAS, hipBLAS, ...).
    fn has_blas(&self) -> bool {
        false
    }

    /// Queues a batched matrix product.
    ///
    /// # Safety
    /// The matrices lie in device memory of this runtime.
    unsafe fn gemm(&self, _stream: RawStream, _g: &Gemm) -> Call {
        Err(CallError::Other("no BLAS library on this device".into()))
    }

    /// For a runtime to recognise another device of its own family (peer
    /// access and copies downcast `other` to their own type).
    fn as_any(&self) -> &dyn Any;
}
