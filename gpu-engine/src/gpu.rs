//! One device of a runtime as the rest of the engine uses it: every call
//! makes the device current first and turns a failure into a ggraph error
//! naming the device (`cuda:0`); the kernel module is loaded once and
//! peer access is asked once per pair of devices.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ggraph_core::{Error, Result};

use crate::kernel_module::KernelModule;
use crate::runtime::{
    Call, CallError, CopyKind, DevPtr, Gemm, LaunchSpec, MemCopy, RawEvent, RawStream, Runtime,
};

/// A runtime device with the engine's plumbing around it.
pub struct Gpu {
    rt: Arc<dyn Runtime>,
    /// `<prefix>:<ordinal>`: the device's name in errors.
    label: String,
    module: KernelModule,
    /// Whether direct copies from a peer (by ordinal) work.
    peers: Mutex<HashMap<usize, bool>>,
    /// Bytes of F16 weights a quantised product on the BLAS library
    /// converts at a time.
    dequant_slice_bytes: AtomicUsize,
}

/// The default of [`Gpu::dequant_slice_bytes`]: 64 MiB, the weights of
/// 8192 rows of 4096 values.
const DEQUANT_SLICE_BYTES: usize = 64 << 20;

impl Gpu {
    /// The device of `rt`, named `<prefix>:<ordinal>` (e.g. `cuda:0`).
    pub fn new(rt: Arc<dyn Runtime>, prefix: &str) -> Gpu {
        Gpu {
            label: format!("{prefix}:{}", rt.info().ordinal),
            rt,
            module: KernelModule::default(),
            peers: Mutex::new(HashMap::new()),
            dequant_slice_bytes: AtomicUsize::new(DEQUANT_SLICE_BYTES),
        }
    }

    /// Bytes of F16 weights a product of quantised weights on the BLAS
    /// library converts at a time: the scratch memory it takes beside the
    /// activations, whatever the size of the matrix.
    pub fn dequant_slice_bytes(&self) -> usize {
        self.dequant_slice_bytes.load(Ordering::Relaxed)
    }

    /// Changes [`Gpu::dequant_slice_bytes`] (at least one row is converted
    /// at a time).
    pub fn set_dequant_slice_bytes(&self, bytes: usize) {
        self.dequant_slice_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.rt
    }

    /// Whether `other` is a handle of this same device.
    pub fn is(&self, other: &Gpu) -> bool {
        self.is_runtime(other.rt.as_ref())
    }

    /// Whether `rt` is this device.
    pub fn is_runtime(&self, rt: &dyn Runtime) -> bool {
        let (a, b) = (self.rt.info(), rt.info());
        a.family == b.family && a.ordinal == b.ordinal
    }

    /// Whether `other` is a device of the same runtime.
    pub fn same_family(&self, other: &Gpu) -> bool {
        self.rt.info().family == other.rt.info().family
    }

    fn check<T>(&self, r: Call<T>) -> Result<T> {
        r.map_err(|e| e.on(&self.label))
    }

    fn bind(&self) -> Result<()> {
        self.check(self.rt.bind())
    }

    /// Free and total device memory.
    pub fn memory(&self) -> Result<(u64, u64)> {
        self.bind()?;
        self.check(self.rt.memory())
    }

    fn oom(&self, bytes: u64) -> Error {
        Error::OutOfMemory {
            buffer_type: self.label.clone(),
            requested_bytes: bytes,
            available_bytes: self.memory().map(|m| m.0).unwrap_or(0),
        }
    }

    /// One allocation through `alloc`, out-of-memory errors with the
    /// device's free memory.
    fn allocate<T>(&self, bytes: u64, alloc: impl FnOnce(usize) -> Call<T>) -> Result<T> {
        self.bind()?;
        let size = usize::try_from(bytes).map_err(|_| self.oom(bytes))?;
        match alloc(size) {
            Err(CallError::OutOfMemory) => Err(self.oom(bytes)),
            r => self.check(r),
        }
    }

    /// One driver allocation of device memory (`cuMemAlloc` / `hipMalloc`).
    pub fn alloc(&self, bytes: u64) -> Result<DevPtr> {
        self.allocate(bytes, |size| self.rt.alloc(size))
    }

    /// # Safety
    /// `ptr` came from [`Gpu::alloc`] and is not used afterwards.
    pub unsafe fn free(&self, ptr: DevPtr) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            if let Err(e) = unsafe { self.rt.free(ptr) } {
                tracing::warn!("{}: {e}", self.label);
            }
        }
    }

    /// Page-locked host memory.
    pub fn alloc_pinned(&self, bytes: u64) -> Result<*mut u8> {
        self.allocate(bytes, |size| self.rt.alloc_pinned(size))
    }

    /// # Safety
    /// `ptr` came from [`Gpu::alloc_pinned`] and is not used afterwards.
    pub unsafe fn free_pinned(&self, ptr: *mut u8) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            let _ = unsafe { self.rt.free_pinned(ptr) };
        }
    }

    /// # Safety
    /// As [`Runtime::memcpy`].
    unsafe fn copy(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        kind: CopyKind,
        stream: Option<RawStream>,
    ) -> Result<()> {
        let copy = MemCopy {
            dst,
            src,
            len,
            kind,
            stream,
        };
        self.bind()?;
        // SAFETY: caller's contract.
        self.check(unsafe { self.rt.memcpy(&copy) })
    }

    /// # Safety
    /// `dst..dst+len` is memory of this device; `src` holds `len` bytes
    /// and, for an async copy from pinned memory, stays alive until the
    /// stream passes the copy.
    pub unsafe fn htod(
        &self,
        dst: DevPtr,
        src: *const u8,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        // SAFETY: caller's contract.
        unsafe { self.copy(dst, src as u64, len, CopyKind::HostToDevice, stream) }
    }

    /// # Safety
    /// As [`Gpu::htod`], the other way round.
    pub unsafe fn dtoh(
        &self,
        dst: *mut u8,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        // SAFETY: caller's contract.
        unsafe { self.copy(dst as u64, src, len, CopyKind::DeviceToHost, stream) }
    }

    /// # Safety
    /// Both ranges are memory of this device.
    pub unsafe fn dtod(
        &self,
        dst: DevPtr,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        // SAFETY: caller's contract.
        unsafe { self.copy(dst, src, len, CopyKind::DeviceToDevice, stream) }
    }

    /// # Safety
    /// The range is memory of this device.
    pub unsafe fn memset(
        &self,
        dst: DevPtr,
        value: u8,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: caller's contract.
        self.check(unsafe { self.rt.memset(dst, value, len, stream) })
    }

    /// Whether this device reaches `other`'s memory directly, asked (and
    /// turned on) once per peer.
    fn peer_access(&self, other: &dyn Runtime) -> bool {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        *peers.entry(other.info().ordinal).or_insert_with(|| {
            self.rt.can_access_peer(other)
                && self.rt.bind().is_ok()
                && self.rt.enable_peer_access(other).is_ok()
        })
    }

    /// Copies from another device of the same runtime directly (peer
    /// access); `Ok(false)` when there is no direct path and the caller
    /// must stage through the host.
    ///
    /// # Safety
    /// `dst` is memory of this device, `src` of `from`.
    pub unsafe fn peer_copy(
        &self,
        dst: DevPtr,
        from: &Gpu,
        src: DevPtr,
        len: usize,
        stream: Option<RawStream>,
    ) -> Result<bool> {
        if !self.peer_access(from.rt.as_ref()) {
            return Ok(false);
        }
        let copy = MemCopy {
            dst,
            src,
            len,
            kind: CopyKind::DeviceToDevice,
            stream,
        };
        self.bind()?;
        // SAFETY: caller's contract; peer access is on.
        self.check(unsafe { self.rt.memcpy_peer(&copy, from.rt.as_ref()) })?;
        Ok(true)
    }

    pub fn stream_create(&self) -> Result<RawStream> {
        self.bind()?;
        self.check(self.rt.stream_create())
    }

    /// # Safety
    /// The stream came from [`Gpu::stream_create`] and is not used
    /// afterwards.
    pub unsafe fn stream_destroy(&self, stream: RawStream) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            let _ = unsafe { self.rt.stream_destroy(stream) };
        }
    }

    pub fn stream_sync(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        self.check(self.rt.stream_sync(stream))
    }

    pub fn event_create(&self) -> Result<RawEvent> {
        self.bind()?;
        self.check(self.rt.event_create())
    }

    /// # Safety
    /// The event came from [`Gpu::event_create`] and is not used
    /// afterwards.
    pub unsafe fn event_destroy(&self, event: RawEvent) {
        if self.bind().is_ok() {
            // SAFETY: caller's contract.
            let _ = unsafe { self.rt.event_destroy(event) };
        }
    }

    pub fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        self.bind()?;
        self.check(self.rt.event_record(event, stream))
    }

    pub fn event_sync(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        self.check(self.rt.event_sync(event))
    }

    pub fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        self.bind()?;
        self.check(self.rt.stream_wait_event(stream, event))
    }

    /// Queues kernel `kernel` of `kernels/ggraph.cu` on `stream` (the
    /// module is loaded on first use), with a pointer to the value of each
    /// of its parameters in `args`.
    ///
    /// # Safety
    /// The arguments match the kernel's parameters and every pointer in
    /// them addresses memory the kernel may touch.
    pub unsafe fn launch(
        &self,
        stream: RawStream,
        kernel: &'static str,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        let function = self
            .module
            .function(self.rt.as_ref(), &self.label, kernel)?;
        let mut spec = LaunchSpec {
            kernel,
            function,
            stream,
            grid,
            block,
            shared_bytes,
            args,
        };
        self.bind()?;
        // SAFETY: caller's contract.
        match unsafe { self.rt.launch(&mut spec) } {
            Err(CallError::Failed { code, .. }) => Err(Error::backend(
                &self.label,
                format!("launch of {kernel} failed: {code}"),
            )),
            r => self.check(r),
        }
    }

    /// Whether [`Gpu::gemm`] is available.
    pub fn has_blas(&self) -> bool {
        self.rt.has_blas()
    }

    /// Queues a batched matrix product on the BLAS library.
    ///
    /// # Safety
    /// The matrices lie in memory of this device.
    pub unsafe fn gemm(&self, stream: RawStream, g: &Gemm) -> Result<()> {
        self.bind()?;
        // SAFETY: caller's contract.
        self.check(unsafe { self.rt.gemm(stream, g) })
    }
}
