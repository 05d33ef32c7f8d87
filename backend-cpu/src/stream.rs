//! The compute stream of a device that computes with the CPU kernels:
//! resolves the memory of every tensor of a split, through the device's
//! [`MemoryAccess`], and runs the kernels in order.

use std::cell::RefCell;
use std::sync::Arc;

use ggraph_core::backend::{Buffer, Device, Stream};
use ggraph_core::ir::{Graph, OpKind, TensorId};
use ggraph_core::{Error, Result};

use crate::kernels;
use crate::kernels::tensor_ref::TRef;
use crate::profile;
use crate::repack::RepackBuffer;
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

    /// The memory of tensor `id` for the kernel of `node`. Interleaved
    /// weights (`CPU_REPACK`) go as they are to the kernels that read them
    /// (a whole weight as mul_mat's, mul_mat_id's or get_rows' first
    /// operand); any other read of them gets ggml's bytes, converted into
    /// `temps`.
    fn resolve(
        &self,
        graph: &Graph,
        id: TensorId,
        node: TensorId,
        temps: &RefCell<Vec<Vec<u8>>>,
    ) -> Result<TRef> {
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
        if let Some(repacked) = buffer.as_any().downcast_ref::<RepackBuffer>() {
            return self.resolve_repacked(graph, id, node, repacked, offset, temps);
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

    fn resolve_repacked(
        &self,
        graph: &Graph,
        id: TensorId,
        node: TensorId,
        buffer: &RepackBuffer,
        offset: u64,
        temps: &RefCell<Vec<Vec<u8>>>,
    ) -> Result<TRef> {
        let t = graph.tensor(id);
        let len = t.nbytes() as u64;
        let Some(laid) = buffer.laid_over(offset, len) else {
            // SAFETY: offset + nbytes is inside the buffer (checked).
            return Ok(TRef::new(unsafe { buffer.base().add(offset as usize) }, t));
        };
        if id == node {
            return Err(Error::backend(
                self.device.name(),
                format!(
                    "'{}' would write into the weight matrix at {offset} of a {} buffer",
                    graph.display_name(id),
                    buffer.buffer_type_name()
                ),
            ));
        }
        let n = graph.tensor(node);
        let whole = laid.offset == offset
            && laid.ne == t.ne
            && laid.layout.dtype() == t.dtype
            && t.is_contiguous();
        let reads_layout = matches!(
            n.op.kind(),
            OpKind::MulMat | OpKind::MulMatId | OpKind::GetRows
        ) && n.src.first() == Some(&id)
            && !n.src[1..].contains(&id);
        if whole && reads_layout {
            let mut r = TRef::new(
                // SAFETY: offset + nbytes is inside the buffer (checked).
                unsafe { buffer.base().add(offset as usize) },
                t,
            );
            r.layout = Some(laid.layout);
            return Ok(r);
        }
        let mut plain = vec![0u8; len as usize];
        buffer.read(offset, &mut plain)?;
        let r = TRef::new(plain.as_mut_ptr(), t);
        temps.borrow_mut().push(plain);
        Ok(r)
    }

    fn run(&self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        for &n in nodes {
            let temps = RefCell::new(Vec::new());
            let resolve = |id: TensorId| self.resolve(graph, id, n, &temps);
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
