//! Streams and events on a wgpu device.
//!
//! A device has one queue, which runs submissions in order. A stream
//! records the kernels of a split into one command buffer and submits it
//! once (batched per split); an event is the queue's submission index at
//! the point it was recorded. Waiting for an event of the same device costs
//! nothing (the queue is in order); an event of another device is waited
//! for on the host, without stopping any other device.

use std::any::Any;
use std::sync::Arc;

use ggraph_core::backend::{Buffer, Event, Stream, copy_between};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::buffer::WgpuBuffer;
use crate::gpu::Gpu;
use crate::kernels::{self, Recorder};
use crate::supports;

/// A stream on a wgpu device.
pub struct WgpuStream {
    gpu: Arc<Gpu>,
    /// The last submission of this stream.
    last: Option<wgpu::SubmissionIndex>,
}

impl WgpuStream {
    pub(crate) fn new(gpu: Arc<Gpu>) -> WgpuStream {
        WgpuStream { gpu, last: None }
    }

    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Marks everything queued on the device so far as this stream's work.
    fn mark_queued(&mut self) {
        // an empty submission returns the index after all queued work
        self.last = Some(self.gpu().queue.submit([]));
    }
}

/// A point in a wgpu device's queue.
pub struct WgpuEvent {
    gpu: Arc<Gpu>,
    index: Option<wgpu::SubmissionIndex>,
}

impl WgpuEvent {
    /// The device whose queue the event belongs to.
    pub fn device_name(&self) -> &str {
        &self.gpu.name
    }
}

impl Event for WgpuEvent {
    fn synchronize(&self) -> Result<()> {
        self.gpu.wait(self.index.clone())?;
        self.gpu.check_status()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Stream for WgpuStream {
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        let gpu = self.gpu().clone();
        let mut rec = Recorder::new(&gpu);
        for &n in nodes {
            graph.get(n)?;
            let t = graph.tensor(n);
            if t.op.is_noop() {
                continue;
            }
            if !supports::supports(&gpu, graph, n) {
                return Err(Error::Unsupported {
                    device: gpu.name.clone(),
                    what: format!("{} ('{}')", t.op.label(), graph.display_name(n)),
                });
            }
            let _span = tracing::trace_span!("wgpu kernel", node = %n).entered();
            kernels::encode(&mut rec, graph, n)?;
        }
        if let Some(index) = rec.submit()? {
            self.last = Some(index);
        }
        gpu.take_errors()
    }

    fn write_async(&mut self, buffer: &dyn Buffer, offset: u64, data: &[u8]) -> Result<()> {
        buffer.write(offset, data)?;
        self.mark_queued();
        Ok(())
    }

    /// Device-side copies between buffers of this device, uploads from
    /// host memory and readbacks into host memory; anything else (another
    /// device's buffer) goes through host memory.
    fn copy_async(
        &mut self,
        src: &dyn Buffer,
        src_offset: u64,
        dst: &dyn Buffer,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        let gpu = self.gpu().clone();
        let ours = |b: &dyn Buffer| {
            b.as_any()
                .downcast_ref::<WgpuBuffer>()
                .is_some_and(|w| w.same_device(&gpu))
        };
        if let Some(d) = dst.as_any().downcast_ref::<WgpuBuffer>()
            && ours(dst)
            && d.copy_in(dst_offset, src, src_offset, len)?
        {
            self.mark_queued();
            return Ok(());
        }
        copy_between(src, src_offset, dst, dst_offset, len)?;
        if ours(src) || ours(dst) {
            self.mark_queued();
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<()> {
        let gpu = self.gpu().clone();
        gpu.wait(self.last.clone())?;
        gpu.check_status()
    }

    fn record_event(&mut self) -> Result<Arc<dyn Event>> {
        if self.last.is_none() {
            self.mark_queued();
        }
        Ok(Arc::new(WgpuEvent {
            gpu: self.gpu().clone(),
            index: self.last.clone(),
        }))
    }

    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        if let Some(e) = event.as_any().downcast_ref::<WgpuEvent>()
            && Arc::ptr_eq(&e.gpu, self.gpu())
        {
            // same queue: later submissions already run after it
            return Ok(());
        }
        event.synchronize()
    }
}
