//! The compute stream of a device that computes with the CPU kernels:
//! resolves the memory of every tensor of a split, through the device's
//! [`MemoryAccess`], and runs the kernels in order.

use std::sync::Arc;

use ggraph_core::backend::{Buffer, Device, Stream};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::kernels;
use crate::kernels::tensor_ref::TRef;
use crate::profile;
use crate::team::Team;

/// How a device's kernels reach the memory of a buffer.
pub trait MemoryAccess: Send + Sync {
    /// The address of the buffer's first byte, or None for memory the
    /// device's kernels may not touch.
    fn address(&self, buffer: &dyn Buffer) -> Option<*mut u8>;
}

pub struct CpuStream {
    device: Arc<dyn Device>,
    team: Option<Arc<Team>>,
    access: Box<dyn MemoryAccess>,
}

impl CpuStream {
    pub fn new(
        device: Arc<dyn Device>,
        team: Option<Arc<Team>>,
        access: Box<dyn MemoryAccess>,
    ) -> CpuStream {
        CpuStream {
            device,
            team,
            access,
        }
    }

    fn resolve(&self, graph: &Graph, id: TensorId) -> Result<TRef> {
        let t = graph.tensor(id);
        let (buffer, offset) = graph
            .memory_of(id)
            .ok_or_else(|| Error::Unallocated(graph.display_name(id)))?;
        if offset + t.nbytes() as u64 > buffer.size() {
            return Err(Error::OutOfBounds {
                what: "tensor memory",
                offset,
                end: offset + t.nbytes() as u64,
                size: buffer.size(),
            });
        }
        let base = self.access.address(buffer.as_ref()).ok_or_else(|| {
            Error::backend(
                self.device.name(),
                format!(
                    "tensor '{}' lives in {} memory, which {} cannot address; copy it first",
                    graph.display_name(id),
                    buffer.buffer_type_name(),
                    self.device.name()
                ),
            )
        })?;
        // SAFETY: offset + nbytes is inside the buffer (checked above).
        Ok(TRef::new(unsafe { base.add(offset as usize) }, t))
    }

    fn run(&self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        let resolve = |id: TensorId| self.resolve(graph, id);
        for &n in nodes {
            graph.get(n)?;
            if graph.tensor(n).op.is_noop() {
                continue;
            }
            if !self.device.supports_op(graph, n) {
                return Err(Error::Unsupported {
                    device: self.device.name().to_string(),
                    what: format!(
                        "{} ('{}')",
                        graph.tensor(n).op.label(),
                        graph.display_name(n)
                    ),
                });
            }
            if profile::enabled() {
                let start = std::time::Instant::now();
                kernels::run_node(graph, n, &resolve)?;
                profile::record(graph, n, start.elapsed());
            } else {
                kernels::run_node(graph, n, &resolve)?;
            }
        }
        Ok(())
    }
}

impl Stream for CpuStream {
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        match &self.team {
            Some(team) => team.run(|| self.run(graph, nodes)),
            None => self.run(graph, nodes),
        }
    }
}
