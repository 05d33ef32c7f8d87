//! A stream on one GPU as a ggraph backend: runs splits (kernel launches
//! queued in order on a [`KernelQueue`]), async copies, events.

use std::any::Any;
use std::sync::Arc;

use ggraph_core::backend::{Buffer, Device, Event, Stream, copy_between};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::buffer::GpuBuffer;
use crate::dispatch;
use crate::gpu::Gpu;
use crate::queue::KernelQueue;
use crate::runtime::{RawEvent, Runtime};

/// A stream of a GPU device.
pub struct GpuStream {
    queue: KernelQueue,
    device: Arc<dyn Device>,
}

impl GpuStream {
    pub(crate) fn new(gpu: Arc<Gpu>, device: Arc<dyn Device>) -> Result<GpuStream> {
        Ok(GpuStream {
            queue: KernelQueue::new(gpu)?,
            device,
        })
    }

    /// The runtime of the stream's device, which queues its launches and
    /// copies.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        self.gpu().runtime()
    }

    fn gpu(&self) -> &Arc<Gpu> {
        self.queue.gpu()
    }

    fn gpu_buffer<'a>(&self, b: &'a dyn Buffer) -> Option<&'a GpuBuffer> {
        b.as_any()
            .downcast_ref::<GpuBuffer>()
            .filter(|g| g.gpu().is(self.gpu()))
    }
}

impl Stream for GpuStream {
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
            dispatch::run_node(&mut self.queue, graph, n)?;
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
                    self.gpu().htod(
                        g.device_ptr() + offset,
                        data.as_ptr(),
                        data.len(),
                        Some(self.queue.raw()),
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
        let gpu = self.gpu();
        let s = Some(self.queue.raw());
        let (sg, dg) = (self.gpu_buffer(src), self.gpu_buffer(dst));
        // SAFETY (all arms): ranges checked above; host memory belongs to
        // buffers the caller keeps alive until the stream is synchronised.
        unsafe {
            match (sg, dg) {
                (Some(a), Some(b)) => {
                    return gpu.dtod(
                        b.device_ptr() + dst_offset,
                        a.device_ptr() + src_offset,
                        len as usize,
                        s,
                    );
                }
                (None, Some(b)) => {
                    if let Some(p) = src.host_ptr() {
                        return gpu.htod(
                            b.device_ptr() + dst_offset,
                            p.add(src_offset as usize),
                            len as usize,
                            s,
                        );
                    }
                    if let Some(a) = src.as_any().downcast_ref::<GpuBuffer>()
                        && a.gpu().same_family(gpu)
                        && gpu.peer_copy(
                            b.device_ptr() + dst_offset,
                            a.gpu(),
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
                        return gpu.dtoh(
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
        gpu.stream_sync(self.queue.raw())?;
        copy_between(src, src_offset, dst, dst_offset, len)
    }

    fn synchronize(&mut self) -> Result<()> {
        self.gpu().stream_sync(self.queue.raw())?;
        self.queue.check_errors()
    }

    fn record_event(&mut self) -> Result<Arc<dyn Event>> {
        let gpu = self.gpu();
        let ev = gpu.event_create()?;
        let event = GpuEvent {
            gpu: gpu.clone(),
            event: ev,
        };
        gpu.event_record(ev, self.queue.raw())?;
        Ok(Arc::new(event))
    }

    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        match event.as_any().downcast_ref::<GpuEvent>() {
            Some(e) if e.gpu.same_family(self.gpu()) => {
                self.gpu().stream_wait_event(self.queue.raw(), e.event)
            }
            _ => event.synchronize(),
        }
    }
}

/// A point in a GPU stream.
pub struct GpuEvent {
    gpu: Arc<Gpu>,
    event: RawEvent,
}

// SAFETY: event handles may be used from any thread.
unsafe impl Send for GpuEvent {}
unsafe impl Sync for GpuEvent {}

impl Drop for GpuEvent {
    fn drop(&mut self) {
        // SAFETY: created by this device; destroying a pending event is
        // allowed (the driver releases it when it completes).
        unsafe { self.gpu.event_destroy(self.event) };
    }
}

impl Event for GpuEvent {
    fn synchronize(&self) -> Result<()> {
        self.gpu.event_sync(self.event)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
