//! The graph allocator: liveness-planned compute memory in a few large
//! chunks per buffer type, allocated once and reused across runs.
//!
//! Planning is two passes: [liveness](super::liveness) finds when each
//! block of memory is written and last read (a source dies after its last
//! consumer, views keep their base alive, in-place ops take over a
//! source's block; inputs and outputs are never reused while needed,
//! weights and already-placed tensors are left alone), then a
//! [placement strategy](super::strategy) gives the blocks offsets.

use std::sync::Arc;

use super::dyn_alloc::Addr;
use super::liveness::{Block, NO_BLOCK, liveness, same_layout, structure};
use super::strategy::{Strategy, place};
use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::error::{Error, Result};
use crate::ir::{Graph, TensorData, TensorId};
use crate::util::format_bytes;

/// Where one tensor goes: a buffer type (by index), a chunk and an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The buffer type, as an index into the allocator's list.
    pub buft: u16,
    /// Chunk (which buffer of that type) and byte offset in it.
    pub addr: Addr,
    /// Bytes reserved there, as the buffer type's `alloc_size` gives them;
    /// an op run in place shares its source's slot.
    pub size: u64,
}

/// A memory plan for one graph.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The block of every tensor (by tensor index), or NO_BLOCK.
    block_of: Vec<u32>,
    blocks: Vec<Block>,
    addrs: Vec<Addr>,
    /// Bytes of each chunk, per buffer type.
    chunk_sizes: Vec<Vec<u64>>,
    /// The graph's structure, to recognise a graph the plan also fits.
    structure: Vec<u32>,
    /// The block of each position in the graph (leafs, then nodes) that
    /// has one, for binding another graph of the same structure.
    by_position: Vec<(u32, u32)>,
    positions: usize,
}

impl Plan {
    /// Bytes needed per buffer type (sum of its chunks).
    pub fn bytes_per_buffer_type(&self) -> Vec<u64> {
        self.chunk_sizes.iter().map(|c| c.iter().sum()).collect()
    }

    /// Chunk sizes per buffer type.
    pub fn chunk_sizes(&self) -> &[Vec<u64>] {
        &self.chunk_sizes
    }

    /// The slot planned for a tensor.
    pub fn slot(&self, id: TensorId) -> Option<Slot> {
        match self.block_of.get(id.index()) {
            Some(&b) if b != NO_BLOCK => Some(self.block_slot(b)),
            _ => None,
        }
    }

    fn block_slot(&self, b: u32) -> Slot {
        let block = &self.blocks[b as usize];
        Slot {
            buft: block.buft,
            addr: self.addrs[b as usize],
            size: block.size,
        }
    }
}

/// Counters of the allocator's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Calls to `reserve`.
    pub reserves: u64,
    /// Times `alloc_graph` found the reserved memory too small and
    /// allocated again.
    pub reallocations: u64,
    /// `alloc_graph` calls that reused the reserved plan as it was.
    pub plan_reuses: u64,
    /// `alloc_graph` calls that planned afresh inside the reserved memory.
    pub replans: u64,
    /// Buffers allocated from devices, in total.
    pub device_allocations: u64,
}

/// Plans and owns the compute memory of graphs, per buffer type.
pub struct GraphAllocator {
    strategy: Strategy,
    bufts: Vec<Arc<dyn BufferType>>,
    buffers: Vec<Vec<Arc<dyn Buffer>>>,
    reserved: Option<Plan>,
    stats: AllocStats,
}

/// Assigns each tensor that needs memory a buffer type (an index into the
/// allocator's list).
pub type Assign<'a> = &'a dyn Fn(TensorId) -> usize;

impl GraphAllocator {
    /// An allocator over `bufts`, holding no memory yet; an [`Assign`]
    /// function picks among them by index.
    pub fn new(bufts: Vec<Arc<dyn BufferType>>) -> GraphAllocator {
        let n = bufts.len();
        GraphAllocator {
            strategy: Strategy::default(),
            bufts,
            buffers: vec![Vec::new(); n],
            reserved: None,
            stats: AllocStats::default(),
        }
    }

    /// An allocator for one buffer type.
    pub fn single(buft: Arc<dyn BufferType>) -> GraphAllocator {
        GraphAllocator::new(vec![buft])
    }

    /// Uses another placement strategy from now on.
    pub fn with_strategy(mut self, strategy: Strategy) -> GraphAllocator {
        self.strategy = strategy;
        self
    }

    /// The buffer types, in the order [`Assign`] indexes them.
    pub fn buffer_types(&self) -> &[Arc<dyn BufferType>] {
        &self.bufts
    }

    /// Counters of reserves, reuses and reallocations so far.
    pub fn stats(&self) -> AllocStats {
        self.stats
    }

    /// Bytes of the buffers held, per buffer type.
    pub fn buffer_bytes(&self) -> Vec<u64> {
        self.buffers
            .iter()
            .map(|bs| bs.iter().map(|b| b.size()).sum())
            .collect()
    }

    /// The buffers held, per buffer type.
    pub fn buffers(&self) -> &[Vec<Arc<dyn Buffer>>] {
        &self.buffers
    }

    /// Plans `graph` without allocating anything.
    pub fn plan(&self, graph: &Graph, assign: Assign) -> Result<Plan> {
        plan_graph(graph, &self.bufts, assign, self.strategy)
    }

    /// Bytes per buffer type a graph needs: a dry run.
    pub fn measure(&self, graph: &Graph, assign: Assign) -> Result<Vec<u64>> {
        Ok(self.plan(graph, assign)?.bytes_per_buffer_type())
    }

    /// Plans the worst-case graph and allocates its chunks (keeping buffers
    /// already big enough). Later graphs of the same shape family that are
    /// no larger fit without another allocation.
    pub fn reserve(&mut self, graph: &Graph, assign: Assign) -> Result<()> {
        let plan = self.plan(graph, assign)?;
        self.stats.reserves += 1;
        tracing::debug!(
            "graph allocator: reserving {} for the worst-case graph",
            self.describe(&plan.chunk_sizes)
        );
        self.ensure_buffers(&plan.chunk_sizes)?;
        self.reserved = Some(plan);
        Ok(())
    }

    /// Gives every tensor of `graph` that needs memory its address,
    /// reusing the reserved memory; allocates again (and counts it) only
    /// when the graph needs more than was reserved.
    pub fn alloc_graph(&mut self, graph: &mut Graph, assign: Assign) -> Result<()> {
        if let Some(bindings) = self
            .reserved
            .as_ref()
            .and_then(|r| self.reuse_bindings(r, graph, assign))
        {
            self.stats.plan_reuses += 1;
            tracing::trace!("graph allocator: the reserved plan fits this graph as it is");
            return self.bind_slots(graph, &bindings);
        }
        let plan = self.plan(graph, assign)?;
        if self.fits(&plan.chunk_sizes) {
            self.stats.replans += 1;
            tracing::debug!(
                "graph allocator: planned afresh inside the memory held: {}",
                self.describe(&plan.chunk_sizes)
            );
            if self.reserved.is_none() {
                self.reserved = Some(plan.clone());
            }
            return self.bind(graph, &plan);
        }
        if !self.buffers.iter().all(|b| b.is_empty()) {
            self.stats.reallocations += 1;
            tracing::info!(
                "graph allocator: reserved memory too small, allocating {:?} bytes per buffer type",
                plan.bytes_per_buffer_type()
            );
        }
        self.ensure_buffers(&plan.chunk_sizes)?;
        self.bind(graph, &plan)?;
        self.reserved = Some(plan);
        Ok(())
    }

    /// `CPU 1.00 MiB in 1 chunk(s), ...`: a plan's memory, for the logs.
    fn describe(&self, chunk_sizes: &[Vec<u64>]) -> String {
        let parts: Vec<String> = chunk_sizes
            .iter()
            .zip(&self.bufts)
            .filter(|(c, _)| !c.is_empty())
            .map(|(c, bt)| {
                format!(
                    "{} {} in {} chunk(s)",
                    bt.name(),
                    format_bytes(c.iter().sum()),
                    c.len()
                )
            })
            .collect();
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join(", ")
        }
    }

    fn fits(&self, chunk_sizes: &[Vec<u64>]) -> bool {
        chunk_sizes.iter().zip(&self.buffers).all(|(need, have)| {
            need.len() <= have.len() && need.iter().zip(have).all(|(n, b)| *n <= b.size())
        })
    }

    /// Makes the held buffers at least `chunk_sizes`; on failure nothing
    /// changes.
    fn ensure_buffers(&mut self, chunk_sizes: &[Vec<u64>]) -> Result<()> {
        let mut next: Vec<Vec<Arc<dyn Buffer>>> = self.buffers.clone();
        let mut allocations = 0;
        for (t, need) in chunk_sizes.iter().enumerate() {
            // bytes of this type's new buffers allocated in this attempt;
            // dropped again (with `next`) if a later one fails
            let mut fresh = 0u64;
            for (c, &size) in need.iter().enumerate() {
                let have = next[t].get(c).map_or(0, |b| b.size());
                if size <= have {
                    continue;
                }
                let buffer =
                    self.bufts[t]
                        .alloc(size, BufferUsage::Compute)
                        .map_err(|e| match e {
                            Error::OutOfMemory {
                                buffer_type,
                                available_bytes,
                                ..
                            } => Error::OutOfMemory {
                                buffer_type: format!("{buffer_type} (compute buffer)"),
                                requested_bytes: need.iter().sum(),
                                available_bytes: available_bytes + fresh + have,
                            },
                            e => e,
                        })?;
                tracing::debug!(
                    "graph allocator: {} chunk {c}: allocated {} (held {})",
                    self.bufts[t].name(),
                    format_bytes(size),
                    format_bytes(have)
                );
                fresh += size - have;
                allocations += 1;
                if c < next[t].len() {
                    next[t][c] = buffer;
                } else {
                    next[t].push(buffer);
                }
            }
        }
        self.buffers = next;
        self.stats.device_allocations += allocations;
        Ok(())
    }

    fn bind(&self, graph: &mut Graph, plan: &Plan) -> Result<()> {
        let bindings: Vec<(TensorId, Slot)> = plan
            .block_of
            .iter()
            .enumerate()
            .filter(|(_, b)| **b != NO_BLOCK)
            .map(|(i, &b)| (TensorId(i as u32), plan.block_slot(b)))
            .collect();
        self.bind_slots(graph, &bindings)
    }

    fn bind_slots(&self, graph: &mut Graph, bindings: &[(TensorId, Slot)]) -> Result<()> {
        for &(id, slot) in bindings {
            let buffer = &self.buffers[slot.buft as usize][slot.addr.chunk as usize];
            // the slot holds the tensor (planned from its alloc size), and
            // the buffer holds the slot (it was sized from the plan)
            debug_assert!(slot.addr.offset + slot.size <= buffer.size());
            graph.tensor_mut(id).data = Some(TensorData {
                buffer: buffer.clone(),
                offset: slot.addr.offset,
            });
        }
        Ok(())
    }

    /// The reserved slots for `graph`, if it has the reserved plan's
    /// structure, no tensor is larger than its slot, and every in-place
    /// pair still shares a layout.
    fn reuse_bindings(
        &self,
        reserved: &Plan,
        graph: &Graph,
        assign: Assign,
    ) -> Option<Vec<(TensorId, Slot)>> {
        let ids: Vec<TensorId> = graph.leafs().iter().chain(graph.nodes()).copied().collect();
        if ids.len() != reserved.positions || structure(graph, assign) != reserved.structure {
            return None;
        }
        let mut slot_of = vec![None; graph.n_tensors()];
        let mut out = Vec::with_capacity(reserved.by_position.len());
        for &(k, b) in &reserved.by_position {
            let slot = reserved.block_slot(b);
            let id = ids[k as usize];
            if self.bufts[slot.buft as usize].alloc_size(graph.tensor(id)) > slot.size {
                return None;
            }
            slot_of[id.index()] = Some(slot);
            out.push((id, slot));
        }
        for &node in graph.nodes() {
            let Some(ns) = slot_of[node.index()] else {
                continue;
            };
            for &s in &graph.tensor(node).src {
                let owner = graph.base_of(s);
                if owner != node
                    && slot_of[owner.index()] == Some(ns)
                    && !same_layout(graph.tensor(node), graph.tensor(s))
                {
                    return None;
                }
            }
        }
        Some(out)
    }
}

/// Plans a graph: the pure function behind reserve, alloc_graph and measure.
pub fn plan_graph(
    graph: &Graph,
    bufts: &[Arc<dyn BufferType>],
    assign: Assign,
    strategy: Strategy,
) -> Result<Plan> {
    let live = liveness(graph, bufts, assign)?;
    // name a block by its first tensor, for errors only
    let name_of = |b: usize| {
        live.block_of
            .iter()
            .position(|&x| x as usize == b)
            .map_or_else(
                || format!("block {b}"),
                |i| graph.display_name(TensorId(i as u32)),
            )
    };
    let (addrs, chunk_sizes) = place(strategy, &live.blocks, bufts, &name_of)?;
    let by_position = graph
        .leafs()
        .iter()
        .chain(graph.nodes())
        .enumerate()
        .filter_map(|(k, id)| {
            let b = live.block_of[id.index()];
            (b != NO_BLOCK).then_some((k as u32, b))
        })
        .collect();
    Ok(Plan {
        positions: graph.leafs().len() + graph.nodes().len(),
        block_of: live.block_of,
        blocks: live.blocks,
        addrs,
        chunk_sizes,
        structure: live.structure,
        by_position,
    })
}
