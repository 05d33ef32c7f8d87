//! Weight packing: many long-lived tensors in as few buffers as the buffer
//! type's max size allows, one device allocation per buffer.

use std::sync::Arc;

use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::error::{Error, Result};
use crate::ir::{Graph, TensorData, TensorId};
use crate::util::format_bytes;

/// Where packing puts each tensor: buffer index and offset, plus the size
/// of every buffer. A plan only; nothing is allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackPlan {
    /// Bytes of each buffer: the end of its last tensor (no trailing
    /// padding).
    pub buffer_sizes: Vec<u64>,
    /// Per tensor, in the order given: (buffer index, byte offset), the
    /// offset a multiple of the alignment.
    pub placements: Vec<(usize, u64)>,
}

impl PackPlan {
    /// Bytes of all buffers together.
    pub fn total_bytes(&self) -> u64 {
        self.buffer_sizes.iter().sum()
    }
}

/// Plans `sizes` (name, bytes) into buffers of at most `max_size` bytes,
/// first fit in the given order (which keeps a layer's tensors together).
pub fn plan_packing(alignment: u64, max_size: u64, sizes: &[(String, u64)]) -> Result<PackPlan> {
    let align = alignment.max(1);
    let mut ends: Vec<u64> = Vec::new();
    let mut placements = Vec::with_capacity(sizes.len());
    for (name, size) in sizes {
        if *size > max_size {
            return Err(Error::TooLarge {
                what: "weight",
                name: name.clone(),
                bytes: *size,
                max_bytes: max_size,
            });
        }
        let fits = |end: u64| end.div_ceil(align) * align + size <= max_size;
        let b = match ends.iter().position(|&e| fits(e)) {
            Some(b) => b,
            None => {
                ends.push(0);
                ends.len() - 1
            }
        };
        let offset = ends[b].div_ceil(align) * align;
        ends[b] = offset + size;
        placements.push((b, offset));
    }
    Ok(PackPlan {
        buffer_sizes: ends,
        placements,
    })
}

/// Packed weights: the buffers, and each tensor's address in order.
pub struct PackedWeights {
    /// The buffers allocated, one per buffer of the plan.
    pub buffers: Vec<Arc<dyn Buffer>>,
    /// Each tensor's memory, in the order the sizes were given.
    pub placements: Vec<TensorData>,
}

/// Allocates the buffers of a packing plan: one allocation per buffer.
pub fn pack_weights(buft: &Arc<dyn BufferType>, sizes: &[(String, u64)]) -> Result<PackedWeights> {
    let plan = plan_packing(buft.alignment(), buft.max_size(), sizes)?;
    tracing::debug!(
        "{}: {} tensor(s) ({}{}) packed: {} in {} buffer(s)",
        buft.name(),
        sizes.len(),
        sizes.first().map_or("", |(n, _)| n.as_str()),
        if sizes.len() > 1 { ", ..." } else { "" },
        format_bytes(plan.buffer_sizes.iter().sum()),
        plan.buffer_sizes.len()
    );
    let buffers = plan
        .buffer_sizes
        .iter()
        .map(|&s| buft.alloc(s.max(1), BufferUsage::Weights))
        .collect::<Result<Vec<_>>>()?;
    let placements = plan
        .placements
        .iter()
        .map(|&(b, offset)| TensorData {
            buffer: buffers[b].clone(),
            offset,
        })
        .collect();
    Ok(PackedWeights {
        buffers,
        placements,
    })
}

/// Packs every weight of `graph` that has no memory yet into buffers of
/// `buft` and binds them. Returns the buffers.
pub fn bind_graph_weights(
    graph: &mut Graph,
    buft: &Arc<dyn BufferType>,
) -> Result<Vec<Arc<dyn Buffer>>> {
    bind_graph_weights_by(graph, |_, _| buft.clone())
}

/// Packs every weight of `graph` that has no memory yet into buffers of the
/// type `choose` picks for it (by id and name), one packing per type, and
/// binds them. Returns the buffers.
pub fn bind_graph_weights_by(
    graph: &mut Graph,
    choose: impl Fn(TensorId, &str) -> Arc<dyn BufferType>,
) -> Result<Vec<Arc<dyn Buffer>>> {
    let ids: Vec<TensorId> = graph
        .leafs()
        .iter()
        .copied()
        .filter(|&l| {
            let t = graph.tensor(l);
            t.flags.weight && t.data.is_none() && t.view.is_none()
        })
        .collect();
    // group by buffer type, keeping the graph's order within each group
    let mut groups: Vec<(Arc<dyn BufferType>, Vec<TensorId>)> = Vec::new();
    for id in ids {
        let bt = choose(id, &graph.tensor(id).name);
        match groups.iter_mut().find(|(b, _)| b.name() == bt.name()) {
            Some((_, v)) => v.push(id),
            None => groups.push((bt, vec![id])),
        }
    }
    let mut buffers = Vec::new();
    for (bt, ids) in groups {
        let sizes: Vec<(String, u64)> = ids
            .iter()
            .map(|&id| (graph.display_name(id), bt.alloc_size(graph.tensor(id))))
            .collect();
        let packed = pack_weights(&bt, &sizes)?;
        for (id, data) in ids.into_iter().zip(packed.placements) {
            graph.set_data(id, data)?;
        }
        buffers.extend(packed.buffers);
    }
    Ok(buffers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_fill_buffers_up_to_the_max_size() {
        let sizes: Vec<(String, u64)> = (0..10).map(|i| (format!("w{i}"), 300)).collect();
        let plan = plan_packing(64, 1000, &sizes).unwrap();
        // 300 → aligned 320 apart: three per 1000-byte buffer
        assert_eq!(plan.buffer_sizes, vec![940, 940, 940, 300]);
        assert_eq!(plan.placements[0], (0, 0));
        assert_eq!(plan.placements[1], (0, 320));
        assert_eq!(plan.placements[3], (1, 0));
    }

    #[test]
    fn a_weight_larger_than_any_buffer_is_an_error() {
        let err = plan_packing(1, 100, &[("big".into(), 101)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("big") && err.contains("101") && err.contains("100"),
            "{err}"
        );
    }
}
