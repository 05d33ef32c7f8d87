//! Streams: ordered work on one device (compute a split, copies), and the
//! events that order work between streams.

use std::any::Any;
use std::sync::Arc;

use crate::error::Result;
use crate::ir::{Graph, TensorId};
use crate::memory::{Buffer, copy_between};

/// A point in a stream's work that others can wait for.
pub trait Event: Send + Sync {
    /// Blocks until the work before the event is done (as
    /// [`Stream::synchronize`] defines done).
    fn synchronize(&self) -> Result<()>;

    /// `self`, for a backend to downcast to its own event type.
    fn as_any(&self) -> &dyn Any;
}

/// An event that is already complete (for synchronous backends).
#[derive(Debug, Default)]
pub struct CompletedEvent;

impl Event for CompletedEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A stream on one device: computes splits and moves data, in order.
pub trait Stream: Send {
    /// Computes `nodes` of `graph` (a split: a contiguous run of the
    /// graph's nodes, all supported by this device), in order. All tensors
    /// involved are bound to memory this device can use.
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()>;

    /// Queues a write to a buffer this device owns (the data is copied
    /// before the call returns).
    fn write_async(&mut self, buffer: &dyn Buffer, offset: u64, data: &[u8]) -> Result<()> {
        buffer.write(offset, data)
    }

    /// Queues a copy between buffers; the default copies synchronously,
    /// staging through host memory when needed.
    fn copy_async(
        &mut self,
        src: &dyn Buffer,
        src_offset: u64,
        dst: &dyn Buffer,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        copy_between(src, src_offset, dst, dst_offset, len)
    }

    /// Waits for everything queued on this stream: afterwards its results
    /// can be read and its inputs' memory used again. A device that runs
    /// every request in the order it arrives, reads included (a remote
    /// server), may return once the work is on its way: a later read
    /// waits for it there, and a failure surfaces on that read.
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    /// Marks the current point of the stream.
    fn record_event(&mut self) -> Result<Arc<dyn Event>> {
        self.synchronize()?;
        Ok(Arc::new(CompletedEvent))
    }

    /// Makes later work on this stream wait for `event`.
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        event.synchronize()
    }
}
