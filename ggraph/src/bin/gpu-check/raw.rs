//! The runtime's own calls with nothing of ggraph around them: the BLAS
//! library's GEMM and the driver's device-to-device copy, the figures
//! ggraph's kernels are read against.

use std::time::Instant;

use ggraph::{DType, Result};
use ggraph_gpu::{CallError, CopyKind, DevPtr, GpuDevice, MemCopy, RawStream, Runtime};

/// One allocation of the runtime, freed on drop.
struct Allocation<'a> {
    rt: &'a dyn Runtime,
    ptr: DevPtr,
}

impl<'a> Allocation<'a> {
    fn new(rt: &'a dyn Runtime, bytes: usize) -> std::result::Result<Self, CallError> {
        Ok(Allocation {
            rt,
            ptr: rt.alloc(bytes.max(1))?,
        })
    }

    fn upload(&self, bytes: &[u8]) -> std::result::Result<(), CallError> {
        let copy = MemCopy {
            dst: self.ptr,
            src: bytes.as_ptr() as u64,
            len: bytes.len(),
            kind: CopyKind::HostToDevice,
            stream: None,
        };
        // SAFETY: the allocation holds at least `bytes.len()` bytes (the
        // callers allocate exactly that), the host slice is live.
        unsafe { self.rt.memcpy(&copy) }
    }
}

impl Drop for Allocation<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by this runtime and not used after this.
        let _ = unsafe { self.rt.free(self.ptr) };
    }
}

/// A stream of the runtime, destroyed on drop.
struct Stream<'a> {
    rt: &'a dyn Runtime,
    raw: RawStream,
}

impl<'a> Stream<'a> {
    fn new(rt: &'a dyn Runtime) -> std::result::Result<Self, CallError> {
        Ok(Stream {
            rt,
            raw: rt.stream_create()?,
        })
    }

    /// Seconds per call of `queue`: one untimed call, then `reps` queued
    /// between two synchronisations.
    fn seconds(
        &self,
        reps: usize,
        mut queue: impl FnMut(RawStream) -> std::result::Result<(), CallError>,
    ) -> std::result::Result<f64, CallError> {
        queue(self.raw)?;
        self.rt.stream_sync(self.raw)?;
        let start = Instant::now();
        for _ in 0..reps {
            queue(self.raw)?;
        }
        self.rt.stream_sync(self.raw)?;
        Ok(start.elapsed().as_secs_f64() / reps.max(1) as f64)
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        // SAFETY: created by this runtime; nothing is queued after this.
        let _ = unsafe { self.rt.stream_destroy(self.raw) };
    }
}

/// Seconds of the BLAS library's product of `m` weight rows of `k` values
/// (`weights`, of type `t`: F32, F16 or BF16) by `n` random columns of the
/// same type, f32 sums and results: what ggraph's F32/F16 mul_mat hands
/// the library, without the graph around it.
pub fn gemm_seconds(
    engine: &GpuDevice,
    t: DType,
    weights: &[u8],
    m: usize,
    k: usize,
    n: usize,
    reps: usize,
) -> Result<f64> {
    let rt = engine.runtime().as_ref();
    let on = |e: CallError| e.on(&rt.info().name);
    rt.bind().map_err(on)?;
    let columns = ggraph::quant::quantize(t, &ggraph::util::Rng::new(5).vec(k * n, -1.0, 1.0))?;
    let a = Allocation::new(rt, weights.len()).map_err(on)?;
    let b = Allocation::new(rt, columns.len()).map_err(on)?;
    let c = Allocation::new(rt, m * n * 4).map_err(on)?;
    a.upload(weights).map_err(on)?;
    b.upload(&columns).map_err(on)?;
    let dims = |v: usize| i32::try_from(v).map_err(|_| CallError::Other(format!("{v}: too large")));
    let gemm = ggraph_gpu::Gemm {
        m: dims(m).map_err(on)?,
        n: dims(n).map_err(on)?,
        k: dims(k).map_err(on)?,
        a: a.ptr,
        a_type: t,
        lda: dims(k).map_err(on)?,
        stride_a: 0,
        b: b.ptr,
        b_type: t,
        ldb: dims(k).map_err(on)?,
        stride_b: 0,
        c: c.ptr,
        ldc: dims(m).map_err(on)?,
        stride_c: 0,
        batch: 1,
    };
    let stream = Stream::new(rt).map_err(on)?;
    // SAFETY: the library is present (the caller checked `has_blas`), the
    // device is bound, and the three allocations hold the matrices.
    stream
        .seconds(reps, |s| unsafe { rt.gemm(s, &gemm) })
        .map_err(on)
}

/// Seconds of the driver's device-to-device copy of `bytes`.
pub fn copy_seconds(engine: &GpuDevice, bytes: usize, reps: usize) -> Result<f64> {
    let rt = engine.runtime().as_ref();
    let on = |e: CallError| e.on(&rt.info().name);
    rt.bind().map_err(on)?;
    let src = Allocation::new(rt, bytes).map_err(on)?;
    let dst = Allocation::new(rt, bytes).map_err(on)?;
    let stream = Stream::new(rt).map_err(on)?;
    stream
        .seconds(reps, |s| {
            let copy = MemCopy {
                dst: dst.ptr,
                src: src.ptr,
                len: bytes,
                kind: CopyKind::DeviceToDevice,
                stream: Some(s),
            };
            // SAFETY: both allocations hold `bytes`.
            unsafe { rt.memcpy(&copy) }
        })
        .map_err(on)
}
