//! A stream on one GPU: runs splits (kernel launches queued in order),
//! async copies, events. Kernels that read indices report bad ones through
//! an error word on the device, checked when the stream synchronises.

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

use ggraph_core::backend::{Backend, Buffer, Device, Event, copy_between};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use super::device::GpuBuffer;
use super::dispatch;
use super::runtime::{DevPtr, Gemm, LaunchSpec, RawEvent, RawStream, Runtime};

/// One kernel parameter, by value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    T(KTensor),
    I(i32),
    F(f32),
    P(DevPtr),
}

/// A tensor as the kernels take it (`struct Tensor` of ggraph.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KTensor {
    pub data: DevPtr,
    pub ne: [i64; 4],
    pub nb: [i64; 4],
    pub dtype: i32,
    pub pad: i32,
}

/// A stream of a GPU device.
pub struct GpuStream {
    rt: Arc<dyn Runtime>,
    device: Arc<dyn Device>,
    stream: RawStream,
    /// One i32 on the device: error flags set by kernels.
    err_word: DevPtr,
    /// Temporary device memory for converted operands, grown when an op
    /// needs more and reused by every later op of the stream.
    scratch: DevPtr,
    scratch_bytes: u64,
}

// SAFETY: the raw handles are owned by this stream and used from one
// thread at a time (Backend is used through &mut).
unsafe impl Send for GpuStream {}

impl GpuStream {
    pub fn new(rt: Arc<dyn Runtime>, device: Arc<dyn Device>) -> Result<GpuStream> {
        let stream = rt.stream_create()?;
        let err_word = match rt.alloc(4) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: created above, never used.
                unsafe { rt.stream_destroy(stream) };
                return Err(e);
            }
        };
        // SAFETY: 4 bytes just allocated.
        unsafe { rt.memset(err_word, 0, 4, None)? };
        Ok(GpuStream {
            rt,
            device,
            stream,
            err_word,
            scratch: 0,
            scratch_bytes: 0,
        })
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.rt
    }

    pub(crate) fn err_ptr(&self) -> DevPtr {
        self.err_word
    }

    /// Device memory of at least `bytes` for the op being queued; valid
    /// until the next call.
    pub(crate) fn scratch(&mut self, bytes: u64) -> Result<DevPtr> {
        if bytes <= self.scratch_bytes && self.scratch != 0 {
            return Ok(self.scratch);
        }
        // earlier ops may still read the old scratch: wait for them
        self.rt.stream_sync(self.stream)?;
        if self.scratch != 0 {
            // SAFETY: allocated below by this stream, no queued work uses it.
            unsafe { self.rt.free(self.scratch) };
            self.scratch = 0;
            self.scratch_bytes = 0;
        }
        let size = bytes.next_power_of_two().max(1 << 20);
        self.scratch = self.rt.alloc(size)?;
        self.scratch_bytes = size;
        Ok(self.scratch)
    }

    /// Queues one kernel.
    pub(crate) fn launch(
        &mut self,
        kernel: &'static str,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<()> {
        let mut store: Vec<Arg> = args.to_vec();
        let mut ptrs: Vec<*mut c_void> = store
            .iter_mut()
            .map(|a| match a {
                Arg::T(t) => t as *mut KTensor as *mut c_void,
                Arg::I(i) => i as *mut i32 as *mut c_void,
                Arg::F(f) => f as *mut f32 as *mut c_void,
                Arg::P(p) => p as *mut DevPtr as *mut c_void,
            })
            .collect();
        let mut spec = LaunchSpec {
            kernel,
            grid,
            block,
            shared_bytes,
            args: &mut ptrs,
        };
        // SAFETY: the dispatcher builds arguments matching each kernel's
        // parameters from tensors resolved to this device's memory.
        unsafe { self.rt.launch(self.stream, &mut spec) }
    }

    /// Queues a matrix product on the BLAS library.
    pub(crate) fn gemm(&mut self, g: &Gemm) -> Result<()> {
        // SAFETY: the dispatcher checked the layouts against the tensors.
        unsafe { self.rt.gemm(self.stream, g) }
    }

    /// Device address of a tensor's first byte, checking that it lives in
    /// this device's memory.
    pub(crate) fn address(&self, graph: &Graph, id: TensorId) -> Result<DevPtr> {
        let t = graph.tensor(id);
        let (buffer, offset) = graph
            .data_of(id)
            .ok_or_else(|| Error::Unallocated(graph.display_name(id)))?;
        if offset + t.nbytes() as u64 > buffer.size() {
            return Err(Error::OutOfBounds {
                what: "tensor memory",
                offset,
                end: offset + t.nbytes() as u64,
                size: buffer.size(),
            });
        }
        match buffer.as_any().downcast_ref::<GpuBuffer>() {
            Some(b) if b.is_on(self.rt.as_ref()) => Ok(b.device_ptr() + offset),
            _ => Err(Error::backend(
                self.device.name(),
                format!(
                    "tensor '{}' lives in {} memory, which {} cannot address; copy it first",
                    graph.display_name(id),
                    buffer.buffer_type_name(),
                    self.device.name()
                ),
            )),
        }
    }

    /// Reads and clears the kernels' error flags.
    fn check_errors(&mut self) -> Result<()> {
        let mut word = [0u8; 4];
        // SAFETY: the error word is 4 bytes of this device.
        unsafe { self.rt.dtoh(word.as_mut_ptr(), self.err_word, 4, None)? };
        let flags = i32::from_le_bytes(word);
        if flags == 0 {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { self.rt.memset(self.err_word, 0, 4, None)? };
        let mut ops = Vec::new();
        if flags & dispatch::ERR_GET_ROWS != 0 {
            ops.push("get_rows");
        }
        if flags & dispatch::ERR_SET_ROWS != 0 {
            ops.push("set_rows");
        }
        if flags & dispatch::ERR_MUL_MAT_ID != 0 {
            ops.push("mul_mat_id");
        }
        Err(Error::InvalidArgument(format!(
            "{}: an index was outside its tensor in {} (those rows were left as zeros or unwritten)",
            self.device.name(),
            ops.join(", ")
        )))
    }

    fn gpu_buffer<'a>(&self, b: &'a dyn Buffer) -> Option<&'a GpuBuffer> {
        b.as_any()
            .downcast_ref::<GpuBuffer>()
            .filter(|g| g.is_on(self.rt.as_ref()))
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        let _ = self.rt.stream_sync(self.stream);
        // SAFETY: owned by this stream; its work is finished.
        unsafe {
            if self.scratch != 0 {
                self.rt.free(self.scratch);
            }
            self.rt.free(self.err_word);
            self.rt.stream_destroy(self.stream);
        }
    }
}

impl Backend for GpuStream {
    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        for &n in nodes {
            graph.get(n)?;
            let t = graph.tensor(n);
            if t.op.is_noop() {
                continue;
            }
            if !self.device.supports_op(graph, n) {
                return Err(Error::Unsupported {
                    device: self.device.name().to_string(),
                    what: format!("{} ('{}')", t.op.label(), graph.display_name(n)),
                });
            }
            dispatch::run_node(self, graph, n)?;
        }
        Ok(())
    }

    /// The data is copied (to the driver's staging memory at least) before
    /// this returns.
    fn write_async(&mut self, buffer: &dyn Buffer, offset: u64, data: &[u8]) -> Result<()> {
        match self.gpu_buffer(buffer) {
            Some(g) => {
                ggraph_core::backend::check_range("write", offset, data.len() as u64, g.size())?;
                if data.is_empty() {
                    return Ok(());
                }
                // SAFETY: range checked; pageable source memory is staged by
                // the driver before the call returns.
                unsafe {
                    self.rt.htod(
                        g.device_ptr() + offset,
                        data.as_ptr(),
                        data.len(),
                        Some(self.stream),
                    )
                }
            }
            None => buffer.write(offset, data),
        }
    }

    fn copy_async(
        &mut self,
        src: &dyn Buffer,
        src_offset: u64,
        dst: &dyn Buffer,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        ggraph_core::backend::check_range("copy source", src_offset, len, src.size())?;
        ggraph_core::backend::check_range("copy destination", dst_offset, len, dst.size())?;
        if len == 0 {
            return Ok(());
        }
        let s = Some(self.stream);
        let (sg, dg) = (self.gpu_buffer(src), self.gpu_buffer(dst));
        // SAFETY (all arms): ranges checked above; host memory belongs to
        // buffers the caller keeps alive until the stream is synchronised.
        unsafe {
            match (sg, dg) {
                (Some(a), Some(b)) => {
                    return self.rt.dtod(
                        b.device_ptr() + dst_offset,
                        a.device_ptr() + src_offset,
                        len as usize,
                        s,
                    );
                }
                (None, Some(b)) => {
                    if let Some(p) = src.host_ptr() {
                        return self.rt.htod(
                            b.device_ptr() + dst_offset,
                            p.add(src_offset as usize),
                            len as usize,
                            s,
                        );
                    }
                    if let Some(a) = src.as_any().downcast_ref::<GpuBuffer>()
                        && a.runtime().family() == self.rt.family()
                        && self.rt.peer_copy(
                            b.device_ptr() + dst_offset,
                            a.runtime().as_ref(),
                            a.device_ptr() + src_offset,
                            len as usize,
                            s,
                        )?
                    {
                        return Ok(());
                    }
                }
                (Some(a), None) => {
                    if let Some(p) = dst.host_ptr() {
                        return self.rt.dtoh(
                            p.add(dst_offset as usize),
                            a.device_ptr() + src_offset,
                            len as usize,
                            s,
                        );
                    }
                }
                (None, None) => {}
            }
        }
        // staged through the host, in order with this stream's work
        self.rt.stream_sync(self.stream)?;
        copy_between(src, src_offset, dst, dst_offset, len)
    }

    fn synchronize(&mut self) -> Result<()> {
        self.rt.stream_sync(self.stream)?;
        self.check_errors()
    }

    fn record_event(&mut self) -> Result<Arc<dyn Event>> {
        let ev = self.rt.event_create()?;
        let event = GpuEvent {
            rt: self.rt.clone(),
            event: ev,
        };
        self.rt.event_record(ev, self.stream)?;
        Ok(Arc::new(event))
    }

    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        match event.as_any().downcast_ref::<GpuEvent>() {
            Some(e) if e.rt.family() == self.rt.family() => {
                self.rt.stream_wait_event(self.stream, e.event)
            }
            _ => event.synchronize(),
        }
    }
}

/// A point in a GPU stream.
pub struct GpuEvent {
    rt: Arc<dyn Runtime>,
    event: RawEvent,
}

// SAFETY: event handles may be used from any thread.
unsafe impl Send for GpuEvent {}
unsafe impl Sync for GpuEvent {}

impl Drop for GpuEvent {
    fn drop(&mut self) {
        // SAFETY: created by this runtime; destroying a pending event is
        // allowed (the driver releases it when it completes).
        unsafe { self.rt.event_destroy(self.event) };
    }
}

impl Event for GpuEvent {
    fn synchronize(&self) -> Result<()> {
        self.rt.event_sync(self.event)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
