//! The liveness pass: which tensors need memory, when each block of memory
//! is first written and last read, and which ops take over the memory of
//! a source (in place). It decides no addresses; the placement strategies
//! do that from the blocks it returns.
//!
//! Time runs over the nodes: leafs are written at time 0, node i at time
//! i + 1. A block is live from its birth to its death inclusive; two
//! blocks that are live at the same time need disjoint memory.

use std::sync::Arc;

use crate::backend::BufferType;
use crate::error::{Error, Result};
use crate::ir::{Graph, Tensor, TensorId};

/// Marks "no block" in [`Liveness::block_of`].
pub const NO_BLOCK: u32 = u32::MAX;

/// One block of memory: a tensor's, and those of the ops that run in place
/// on it after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Its buffer type, as an index into the allocator's list.
    pub buft: u16,
    /// Bytes, as the buffer type's `alloc_size` gives them for the tensor
    /// that opened the block (not yet aligned).
    pub size: u64,
    /// Time step of the first write: 0 for a leaf, `i + 1` for node `i`.
    pub birth: u32,
    /// Time step of the last read, inclusive; [`Liveness::end`] for a block
    /// never freed while the graph runs (outputs, kept tensors).
    pub death: u32,
}

/// The blocks of a graph and the block of every tensor.
#[derive(Clone, Debug)]
pub struct Liveness {
    /// Every block, in the order the pass opened them.
    pub blocks: Vec<Block>,
    /// Block index per tensor index, or `u32::MAX` for a tensor the
    /// allocator does not place (views, weights, tensors with memory).
    pub block_of: Vec<u32>,
    /// One past the last time step.
    pub end: u32,
    /// What the lifetimes were computed from, by position (per leaf and
    /// node: op, flags, buffer type, view base, sources): two graphs with
    /// the same encoding have the same lifetimes.
    pub structure: Vec<u32>,
}

/// Whether the allocator places this tensor: not a view, no memory yet,
/// not a weight.
pub fn needs_memory(t: &Tensor) -> bool {
    t.view.is_none() && t.data.is_none() && !t.flags.weight
}

pub fn same_layout(a: &Tensor, b: &Tensor) -> bool {
    a.dtype == b.dtype && a.ne == b.ne && a.nb == b.nb
}

struct Pass<'g> {
    graph: &'g Graph,
    bufts: &'g [Arc<dyn BufferType>],
    children: Vec<u32>,
    views: Vec<u32>,
    /// The tensor holds its block and ends it when it dies.
    owns: Vec<bool>,
    /// Its last use is done (a view gives up its base once, even in a
    /// node list where it comes after a reader).
    released: Vec<bool>,
    blocks: Vec<Block>,
    block_of: Vec<u32>,
    end: u32,
}

impl Pass<'_> {
    fn open(&mut self, id: TensorId, buft: usize, time: u32) {
        let size = self.bufts[buft].alloc_size(self.graph.tensor(id));
        self.block_of[id.index()] = self.blocks.len() as u32;
        self.blocks.push(Block {
            buft: buft as u16,
            size,
            birth: time,
            death: self.end,
        });
        self.owns[id.index()] = true;
    }

    fn close(&mut self, id: TensorId, time: u32) {
        let i = id.index();
        let flags = self.graph.tensor(id).flags;
        if !self.owns[i] || flags.output || flags.keep {
            return;
        }
        self.owns[i] = false;
        let b = self.block_of[i] as usize;
        self.blocks[b].death = time;
    }

    /// A consumer of `id` is done (or `id` has none).
    fn release(&mut self, id: TensorId, time: u32) {
        let i = id.index();
        let t = self.graph.tensor(id);
        // an output (or a view that is one) keeps its memory to the end
        if self.children[i] != 0
            || self.views[i] != 0
            || t.flags.output
            || t.flags.keep
            || self.released[i]
        {
            return;
        }
        self.released[i] = true;
        match t.view {
            Some(v) => {
                let b = v.base.index();
                self.views[b] = self.views[b].saturating_sub(1);
                if self.views[b] == 0 && self.children[b] == 0 {
                    self.close(v.base, time);
                }
            }
            None => self.close(id, time),
        }
    }

    /// The tensor whose block `node` may take over: a source with no other
    /// consumer and the same layout, or the base of such a view source.
    fn in_place_owner(&self, node: TensorId, buft: usize) -> Option<TensorId> {
        let t = self.graph.tensor(node);
        if !t.op.can_run_in_place() {
            return None;
        }
        for &s in &t.src {
            let src = self.graph.tensor(s);
            if self.children[s.index()] != 1
                || !same_layout(t, src)
                || src.flags.input
                || src.flags.output
            {
                continue;
            }
            let owner = match src.view {
                None if self.views[s.index()] == 0 => s,
                Some(v) if v.offset == 0 => {
                    let b = v.base.index();
                    let base = self.graph.tensor(v.base);
                    if self.views[b] != 1
                        || self.children[b] != 0
                        || base.flags.input
                        || base.flags.output
                    {
                        continue;
                    }
                    v.base
                }
                _ => continue,
            };
            let b = self.block_of[owner.index()];
            if self.owns[owner.index()]
                && b != NO_BLOCK
                && self.blocks[b as usize].buft as usize == buft
                && self.blocks[b as usize].size >= self.bufts[buft].alloc_size(t)
            {
                return Some(owner);
            }
        }
        None
    }
}

/// Runs the liveness pass over `graph` with each tensor's buffer type
/// from `assign`.
pub fn liveness(
    graph: &Graph,
    bufts: &[Arc<dyn BufferType>],
    assign: &dyn Fn(TensorId) -> usize,
) -> Result<Liveness> {
    let n = graph.n_tensors();
    let (leafs, nodes) = (graph.leafs(), graph.nodes());
    let mut p = Pass {
        graph,
        bufts,
        children: vec![0; n],
        views: vec![0; n],
        owns: vec![false; n],
        released: vec![false; n],
        blocks: Vec::with_capacity(nodes.len() + leafs.len()),
        block_of: vec![NO_BLOCK; n],
        end: nodes.len() as u32 + 1,
    };
    let buft_of = |id: TensorId| -> Result<usize> {
        let b = assign(id);
        if b >= bufts.len() {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' assigned buffer type {b}, only {} known",
                graph.display_name(id),
                bufts.len()
            )));
        }
        Ok(b)
    };
    let pos = positions(graph);
    let mut structure = Vec::with_capacity(structure_capacity(graph));
    for &node in nodes {
        let t = graph.tensor(node);
        for &s in &t.src {
            p.children[s.index()] += 1;
        }
        if let Some(v) = t.view {
            p.views[v.base.index()] += 1;
        }
    }
    // leafs (inputs and other user-filled tensors) are written before
    // anything runs
    for &leaf in leafs {
        let t = graph.tensor(leaf);
        let buft = needs_memory(t).then(|| buft_of(leaf)).transpose()?;
        encode(&mut structure, t, buft, &pos);
        if let Some(buft) = buft {
            p.open(leaf, buft, 0);
        }
    }
    for (i, &node) in nodes.iter().enumerate() {
        let time = i as u32 + 1;
        let t = graph.tensor(node);
        let buft = needs_memory(t).then(|| buft_of(node)).transpose()?;
        encode(&mut structure, t, buft, &pos);
        if let Some(buft) = buft {
            match p.in_place_owner(node, buft) {
                Some(owner) => {
                    p.block_of[node.index()] = p.block_of[owner.index()];
                    p.owns[owner.index()] = false;
                    p.owns[node.index()] = true;
                }
                None => p.open(node, buft, time),
            }
        }
        for &s in &t.src {
            let i = s.index();
            p.children[i] = p.children[i].saturating_sub(1);
            p.release(s, time);
        }
        // a result nobody reads (and nobody asked for) dies at once
        if p.children[node.index()] == 0 {
            p.release(node, time);
        }
    }
    Ok(Liveness {
        blocks: p.blocks,
        block_of: p.block_of,
        end: p.end,
        structure,
    })
}

/// Encodes what liveness depends on, by position: per leaf and node, its
/// op, flags, whether it needs memory and of which buffer type, and its
/// sources' positions. Two graphs with the same encoding have the same
/// lifetimes, so a plan made for one fits the other wherever its tensors
/// are no larger.
pub fn structure(graph: &Graph, assign: &dyn Fn(TensorId) -> usize) -> Vec<u32> {
    let pos = positions(graph);
    let mut structure = Vec::with_capacity(structure_capacity(graph));
    for &id in graph.leafs().iter().chain(graph.nodes()) {
        let t = graph.tensor(id);
        encode(&mut structure, t, needs_memory(t).then(|| assign(id)), &pos);
    }
    structure
}

const NO_POSITION: u32 = u32::MAX;

/// Position of every leaf and node (leafs first), by tensor index.
fn positions(graph: &Graph) -> Vec<u32> {
    let mut pos = vec![NO_POSITION; graph.n_tensors()];
    for (k, id) in graph.leafs().iter().chain(graph.nodes()).enumerate() {
        pos[id.index()] = k as u32;
    }
    pos
}

fn structure_capacity(graph: &Graph) -> usize {
    graph.nodes().len() * 7 + graph.leafs().len() * 5
}

#[inline]
fn encode(out: &mut Vec<u32>, t: &Tensor, buft: Option<usize>, pos: &[u32]) {
    let flags = t.flags.input as u32
        | (t.flags.output as u32) << 1
        | (t.flags.weight as u32) << 2
        | (t.flags.keep as u32) << 3
        | (buft.is_some() as u32) << 4;
    // the op kind says whether it may run in place
    out.extend_from_slice(&[
        t.op.kind() as u32,
        flags,
        buft.map_or(NO_POSITION, |b| b as u32),
        t.view.map_or(NO_POSITION, |v| pos[v.base.index()]),
        t.src.len() as u32,
    ]);
    out.extend(t.src.iter().map(|s| pos[s.index()]));
}

impl Liveness {
    /// The most bytes of one buffer type live at any one time: no
    /// placement can need less (sizes rounded up to `alignment`).
    pub fn peak_live_bytes(&self, buft: usize, alignment: u64) -> u64 {
        let align = alignment.max(1);
        let mut delta = vec![0i128; self.end as usize + 2];
        for b in self.blocks.iter().filter(|b| b.buft as usize == buft) {
            let size = b.size.max(1).div_ceil(align) * align;
            delta[b.birth as usize] += size as i128;
            delta[b.death as usize + 1] -= size as i128;
        }
        let mut live = 0i128;
        let mut peak = 0i128;
        for d in delta {
            live += d;
            peak = peak.max(live);
        }
        peak as u64
    }
}
