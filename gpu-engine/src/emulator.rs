//! The host emulator: a [`Runtime`] whose "device memory" is host memory
//! and whose kernels are those of `kernels/ggraph.cu`, compiled as C++ by
//! build.rs with `kernels/emu.h` (threads as fibers, `__syncthreads` and
//! warp shuffles as barriers). A device over it runs the real dispatch code
//! and the real kernels, so the conformance suite checks both without a
//! GPU. The BLAS entry point is emulated in Rust with cuBLAS's column-major
//! semantics, so the argument mapping of the cuBLAS path is checked too.
//!
//! It is a test device: slow (every GPU thread is a fiber) and never
//! registered by any backend registration.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::any::Any;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ggraph_core::DType;
use ggraph_core::quant::{bf16_to_f32, f16_to_f32};

use crate::device::GpuDevice;
use crate::runtime::{
    Call, CallError, DevPtr, DeviceInfo, Gemm, LaunchSpec, MemCopy, RawEvent, RawFunction,
    RawModule, RawStream, Runtime,
};

unsafe extern "C" {
    fn ggraph_emu_launch(
        name: *const c_char,
        gx: u32,
        gy: u32,
        gz: u32,
        bx: u32,
        by: u32,
        bz: u32,
        shared_bytes: u32,
        args: *mut *mut c_void,
        err: *mut c_char,
        errlen: usize,
    ) -> i32;
}

const ALIGN: usize = 256;

/// Counts of the runtime calls a device was asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCalls {
    /// Kernel launches and BLAS calls.
    pub launches: u64,
    /// Copies and fills (host to device, device to host, on the device,
    /// between devices).
    pub copies: u64,
    /// Waits of the host for a stream or an event.
    pub syncs: u64,
    /// Events recorded, and streams made to wait for one.
    pub events: u64,
}

impl std::ops::Sub for DeviceCalls {
    type Output = DeviceCalls;

    fn sub(self, earlier: DeviceCalls) -> DeviceCalls {
        DeviceCalls {
            launches: self.launches - earlier.launches,
            copies: self.copies - earlier.copies,
            syncs: self.syncs - earlier.syncs,
            events: self.events - earlier.events,
        }
    }
}

#[derive(Default)]
struct CallCounts {
    launches: AtomicU64,
    copies: AtomicU64,
    syncs: AtomicU64,
    events: AtomicU64,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// An emulated GPU with a declared memory size.
pub struct EmuRuntime {
    info: DeviceInfo,
    budget_bytes: u64,
    allocated: AtomicU64,
    blas: bool,
    /// Whether launches and BLAS calls compute ([`EmuRuntime::null`]
    /// leaves them out).
    computes: bool,
    /// The runtime calls made so far, by kind.
    calls: CallCounts,
    sizes: Mutex<HashMap<u64, usize>>,
    next_handle: AtomicU64,
}

impl EmuRuntime {
    /// Emulated device `ordinal` with `budget_bytes` of memory; `blas`
    /// says whether it offers the (emulated) BLAS path.
    pub fn new(ordinal: usize, budget_bytes: u64, blas: bool) -> Arc<EmuRuntime> {
        Arc::new(EmuRuntime::with_memory(ordinal, budget_bytes, blas, false))
    }

    /// An emulated integrated device, as CUDA reports one that shares the
    /// host's memory: its free memory is the host's available memory.
    pub fn integrated(ordinal: usize, budget_bytes: u64, blas: bool) -> Arc<EmuRuntime> {
        Arc::new(EmuRuntime::with_memory(ordinal, budget_bytes, blas, true))
    }

    /// A device whose kernel launches and BLAS calls return at once,
    /// computing nothing (its memory, copies, streams and events are the
    /// emulator's): what the host spends to run a graph on a GPU, without
    /// the GPU's time. Its results are whatever the memory held.
    pub fn null(ordinal: usize, budget_bytes: u64) -> Arc<EmuRuntime> {
        let mut rt = EmuRuntime::with_memory(ordinal, budget_bytes, true, false);
        rt.computes = false;
        rt.info.name = "host emulator, kernels left out (host cost only)".into();
        Arc::new(rt)
    }

    fn with_memory(ordinal: usize, budget_bytes: u64, blas: bool, integrated: bool) -> EmuRuntime {
        EmuRuntime {
            info: DeviceInfo {
                family: "emu",
                ordinal,
                name: format!(
                    "host emulator of the GPU kernels ({})",
                    if blas { "with BLAS" } else { "kernels only" }
                ),
                arch: "host".into(),
                compute_capability: None,
                integrated,
                free_from_host: integrated,
            },
            budget_bytes,
            allocated: AtomicU64::new(0),
            blas,
            computes: true,
            calls: CallCounts::default(),
            sizes: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
        }
    }

    /// A GPU device (`emu:N`) over a new emulator.
    pub fn device(ordinal: usize, budget_bytes: u64, blas: bool) -> Arc<GpuDevice> {
        GpuDevice::new(EmuRuntime::new(ordinal, budget_bytes, blas), "emu")
    }

    /// The runtime calls made on this device so far, by kind: what a GPU
    /// driver would be asked to do.
    pub fn calls(&self) -> DeviceCalls {
        let c = &self.calls;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DeviceCalls {
            launches: get(&c.launches),
            copies: get(&c.copies),
            syncs: get(&c.syncs),
            events: get(&c.events),
        }
    }

    /// Bytes allocated on the emulated device now.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// Live allocations (device and pinned): one per buffer, never one
    /// per tensor.
    pub fn live_allocations(&self) -> usize {
        self.sizes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn host_alloc(&self, bytes: usize) -> Call<*mut u8> {
        let size = bytes.max(1);
        let layout = Layout::from_size_align(size, ALIGN).map_err(|_| CallError::OutOfMemory)?;
        // SAFETY: non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        if p.is_null() {
            return Err(CallError::OutOfMemory);
        }
        self.sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p as u64, size);
        Ok(p)
    }

    fn host_free(&self, p: u64) -> usize {
        let size = self
            .sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&p);
        match size {
            Some(size) => {
                let layout = Layout::from_size_align(size, ALIGN).expect("valid at allocation");
                // SAFETY: allocated by host_alloc with this layout.
                unsafe { dealloc(p as *mut u8, layout) };
                size
            }
            None => 0,
        }
    }

    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }
}

/// One element of a plain float type as f32.
///
/// # Safety
/// `p` is valid for reads of the type's size.
unsafe fn read_elem(t: DType, p: *const u8) -> f32 {
    // SAFETY: caller's contract.
    unsafe {
        match t {
            DType::F32 => (p as *const f32).read_unaligned(),
            DType::F16 => f16_to_f32((p as *const u16).read_unaligned()),
            DType::BF16 => bf16_to_f32((p as *const u16).read_unaligned()),
            _ => f32::NAN,
        }
    }
}

impl Runtime for EmuRuntime {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory(&self) -> Call<(u64, u64)> {
        Ok((
            self.budget_bytes.saturating_sub(self.allocated_bytes()),
            self.budget_bytes,
        ))
    }

    /// Host memory, within the declared budget.
    fn alloc(&self, bytes: usize) -> Call<DevPtr> {
        // as the host allocation: at least one byte
        let bytes = bytes.max(1);
        let counted = bytes as u64;
        let prev = self.allocated.fetch_add(counted, Ordering::SeqCst);
        if prev.saturating_add(counted) > self.budget_bytes {
            self.allocated.fetch_sub(counted, Ordering::SeqCst);
            return Err(CallError::OutOfMemory);
        }
        match self.host_alloc(bytes) {
            Ok(p) => Ok(p as u64),
            Err(e) => {
                self.allocated.fetch_sub(counted, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    unsafe fn free(&self, ptr: DevPtr) -> Call {
        let size = self.host_free(ptr) as u64;
        self.allocated.fetch_sub(size, Ordering::SeqCst);
        Ok(())
    }

    fn alloc_pinned(&self, bytes: usize) -> Call<*mut u8> {
        self.host_alloc(bytes)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Call {
        self.host_free(ptr as u64);
        Ok(())
    }

    /// Every copy is a host copy.
    unsafe fn memcpy(&self, copy: &MemCopy) -> Call {
        count(&self.calls.copies);
        // SAFETY: caller's contract.
        unsafe { std::ptr::copy(copy.src as *const u8, copy.dst as *mut u8, copy.len) };
        Ok(())
    }

    unsafe fn memset(&self, dst: DevPtr, value: u8, len: usize, _: Option<RawStream>) -> Call {
        count(&self.calls.copies);
        // SAFETY: caller's contract.
        unsafe { std::ptr::write_bytes(dst as *mut u8, value, len) };
        Ok(())
    }

    /// Emulated devices reach each other directly, like GPUs with peer
    /// access.
    fn can_access_peer(&self, other: &dyn Runtime) -> bool {
        other.as_any().downcast_ref::<EmuRuntime>().is_some()
    }

    unsafe fn memcpy_peer(&self, copy: &MemCopy, _: &dyn Runtime) -> Call {
        // SAFETY: caller's contract.
        unsafe { self.memcpy(copy) }
    }

    fn stream_create(&self) -> Call<RawStream> {
        Ok(self.handle())
    }

    unsafe fn stream_destroy(&self, _: RawStream) -> Call {
        Ok(())
    }

    fn stream_sync(&self, _: RawStream) -> Call {
        count(&self.calls.syncs);
        Ok(())
    }

    fn event_create(&self) -> Call<RawEvent> {
        Ok(self.handle())
    }

    unsafe fn event_destroy(&self, _: RawEvent) -> Call {
        Ok(())
    }

    fn event_record(&self, _: RawEvent, _: RawStream) -> Call {
        count(&self.calls.events);
        Ok(())
    }

    fn event_sync(&self, _: RawEvent) -> Call {
        count(&self.calls.syncs);
        Ok(())
    }

    fn stream_wait_event(&self, _: RawStream, _: RawEvent) -> Call {
        count(&self.calls.events);
        Ok(())
    }

    /// The kernels are linked in (build.rs): nothing to load.
    fn load_module(&self) -> Result<RawModule, String> {
        Ok(0)
    }

    /// Kernels are launched by name (`spec.kernel`).
    fn module_function(&self, _: RawModule, _: &CStr) -> Call<RawFunction> {
        Ok(0)
    }

    unsafe fn launch(&self, spec: &mut LaunchSpec<'_>) -> Call {
        count(&self.calls.launches);
        if !self.computes {
            return Ok(());
        }
        let name =
            CString::new(spec.kernel).map_err(|_| CallError::Other("bad kernel name".into()))?;
        let mut err = vec![0 as c_char; 512];
        let [gx, gy, gz] = spec.grid;
        let [bx, by, bz] = spec.block;
        // SAFETY: the arguments match the kernel (caller's contract);
        // every pointer in them is host memory of this emulator.
        let rc = unsafe {
            ggraph_emu_launch(
                name.as_ptr(),
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                spec.shared_bytes,
                spec.args.as_mut_ptr(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != 0 {
            // SAFETY: the emulator writes a NUL-terminated message.
            let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            return Err(CallError::Other(format!("kernel {}: {msg}", spec.kernel)));
        }
        Ok(())
    }

    fn has_blas(&self) -> bool {
        self.blas
    }

    /// `C = Aᵀ · B` per batch, column-major, f32 accumulation: what
    /// `cublasGemmStridedBatchedEx(T, N, ...)` computes.
    unsafe fn gemm(&self, _: RawStream, g: &Gemm) -> Call {
        if !self.blas {
            return Err(CallError::Other(
                "BLAS is off on this emulated device".into(),
            ));
        }
        count(&self.calls.launches);
        if !self.computes {
            return Ok(());
        }
        let (ea, eb) = (g.a_type.type_size(), g.b_type.type_size());
        for bt in 0..g.batch as i64 {
            for j in 0..g.n as i64 {
                for i in 0..g.m as i64 {
                    let mut sum = 0f32;
                    for kk in 0..g.k as i64 {
                        let ai = bt * g.stride_a + i * g.lda as i64 + kk;
                        let bi = bt * g.stride_b + j * g.ldb as i64 + kk;
                        // SAFETY: the dispatcher sized A and B (caller's contract).
                        let (x, y) = unsafe {
                            (
                                read_elem(g.a_type, (g.a + (ai as u64) * ea as u64) as *const u8),
                                read_elem(g.b_type, (g.b + (bi as u64) * eb as u64) as *const u8),
                            )
                        };
                        sum += x * y;
                    }
                    let ci = bt * g.stride_c + j * g.ldc as i64 + i;
                    // SAFETY: as above, for C.
                    unsafe { ((g.c + ci as u64 * 4) as *mut f32).write_unaligned(sum) };
                }
            }
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
