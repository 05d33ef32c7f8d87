//! The simplest way to run a graph on one device: every tensor in one
//! fresh buffer, no reuse. Tests and the conformance suite use it; it is
//! also the baseline the graph allocator is checked against.

use std::sync::Arc;

use crate::backend::{Buffer, BufferType, BufferUsage, Device};
use crate::error::Result;
use crate::ir::{Graph, TensorData, TensorId};

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a.max(1)) * a.max(1)
}

/// The tensors of `graph` that need memory: leafs and nodes that are not
/// views and are not bound yet.
pub fn unbound_tensors(graph: &Graph) -> Vec<TensorId> {
    graph
        .leafs()
        .iter()
        .chain(graph.nodes())
        .copied()
        .filter(|&id| {
            let t = graph.tensor(id);
            t.view.is_none() && t.data.is_none()
        })
        .collect()
}

/// Binds every unbound tensor of `graph` into one new buffer of `buft`,
/// each at its own aligned offset. Returns the buffer, or `None` when
/// nothing needed memory.
pub fn alloc_one_buffer(
    graph: &mut Graph,
    buft: &Arc<dyn BufferType>,
) -> Result<Option<Arc<dyn Buffer>>> {
    let ids = unbound_tensors(graph);
    alloc_buffer_for(graph, &ids, buft, BufferUsage::Compute)
}

/// Binds the tensors `ids` of `graph` (non-views without memory) into one
/// new buffer of `buft` allocated for `usage`, each at its own aligned
/// offset. Returns the buffer, or `None` when `ids` is empty.
pub fn alloc_buffer_for(
    graph: &mut Graph,
    ids: &[TensorId],
    buft: &Arc<dyn BufferType>,
    usage: BufferUsage,
) -> Result<Option<Arc<dyn Buffer>>> {
    if ids.is_empty() {
        return Ok(None);
    }
    let align = buft.alignment();
    let mut offsets = Vec::with_capacity(ids.len());
    let mut size = 0u64;
    for &id in ids {
        size = align_up(size, align);
        offsets.push(size);
        size += buft.alloc_size(graph.tensor(id));
    }
    let buffer = buft.alloc(size.max(align), usage)?;
    for (&id, &offset) in ids.iter().zip(&offsets) {
        graph.set_data(
            id,
            TensorData {
                buffer: buffer.clone(),
                offset,
            },
        )?;
    }
    Ok(Some(buffer))
}

/// Computes every node of `graph` on `device` with a fresh stream and waits
/// for it. All tensors must be bound to memory the device can use.
pub fn compute_on(device: &dyn Device, graph: &Graph) -> Result<()> {
    let mut stream = device.new_stream()?;
    stream.compute(graph, graph.nodes())?;
    stream.synchronize()
}
