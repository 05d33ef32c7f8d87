//! Offset strategies: offsets for the blocks of a liveness pass.
//!
//! - [`Strategy::BestFit`] replays the blocks in time order through the
//!   dynamic offset allocator (best fit over free blocks), as ggml does.
//! - [`Strategy::GreedyBySize`] uses what planning ahead knows: every
//!   block's lifetime. Largest blocks first, each at the lowest offset
//!   where it overlaps no block live at the same time. On layered models it
//!   reaches the peak of live bytes, where best fit leaves holes.

use std::sync::Arc;

use super::dyn_alloc::{Addr, DynAllocator, MAX_CHUNKS};
use super::liveness::Block;
use crate::backend::BufferType;
use crate::error::{Error, Result};

/// How the graph allocator assigns offsets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Best fit in execution order (ggml's graph allocator).
    BestFit,
    /// Largest first at the lowest free offset, knowing all lifetimes.
    #[default]
    GreedyBySize,
}

/// Assigns an address to every block; returns the addresses and each
/// buffer type's chunk sizes.
pub fn place(
    strategy: Strategy,
    blocks: &[Block],
    bufts: &[Arc<dyn BufferType>],
    name_of: &dyn Fn(usize) -> String,
) -> Result<(Vec<Addr>, Vec<Vec<u64>>)> {
    match strategy {
        Strategy::BestFit => best_fit(blocks, bufts, name_of),
        Strategy::GreedyBySize => greedy_by_size(blocks, bufts, name_of),
    }
}

fn best_fit(
    blocks: &[Block],
    bufts: &[Arc<dyn BufferType>],
    name_of: &dyn Fn(usize) -> String,
) -> Result<(Vec<Addr>, Vec<Vec<u64>>)> {
    let mut allocs: Vec<DynAllocator> = bufts
        .iter()
        .map(|b| DynAllocator::new(b.alignment(), b.max_size()))
        .collect();
    // blocks are in birth order already; frees wait in death order
    let mut deaths: Vec<u32> = (0..blocks.len() as u32).collect();
    deaths.sort_by_key(|&b| (blocks[b as usize].death, b));
    let mut next_death = 0;
    let mut addrs = vec![
        Addr {
            chunk: 0,
            offset: 0
        };
        blocks.len()
    ];
    for (i, b) in blocks.iter().enumerate() {
        // everything that died before this block's birth is free again
        while next_death < deaths.len() && blocks[deaths[next_death] as usize].death < b.birth {
            let d = deaths[next_death] as usize;
            allocs[blocks[d].buft as usize].free(addrs[d], blocks[d].size);
            next_death += 1;
        }
        let a = &mut allocs[b.buft as usize];
        addrs[i] = a
            .alloc(b.size, "")
            .map_err(|_| too_big(b, i, bufts, name_of))?;
    }
    Ok((addrs, allocs.iter().map(|a| a.chunk_peaks()).collect()))
}

fn too_big(
    b: &Block,
    i: usize,
    bufts: &[Arc<dyn BufferType>],
    name_of: &dyn Fn(usize) -> String,
) -> Error {
    let bt = &bufts[b.buft as usize];
    if b.size > bt.max_size() {
        return Error::TooLarge {
            what: "tensor",
            name: name_of(i),
            bytes: b.size,
            max_bytes: bt.max_size(),
        };
    }
    Error::OutOfMemory {
        buffer_type: format!(
            "{} (tensor '{}' fits in none of its {MAX_CHUNKS} buffers of at most {} bytes)",
            bt.name(),
            name_of(i),
            bt.max_size()
        ),
        requested_bytes: b.size,
        available_bytes: 0,
    }
}

fn greedy_by_size(
    blocks: &[Block],
    bufts: &[Arc<dyn BufferType>],
    name_of: &dyn Fn(usize) -> String,
) -> Result<(Vec<Addr>, Vec<Vec<u64>>)> {
    let n = blocks.len();
    const UNPLACED: u16 = u16::MAX;
    let mut addrs = vec![
        Addr {
            chunk: UNPLACED,
            offset: 0
        };
        n
    ];
    let mut peaks: Vec<Vec<u64>> = vec![Vec::new(); bufts.len()];
    let alignments: Vec<u64> = bufts.iter().map(|b| b.alignment().max(1)).collect();
    let max_sizes: Vec<u64> = bufts.iter().map(|b| b.max_size()).collect();
    // sizes rounded up to their alignment: every offset handed out stays
    // aligned, so no rounding is needed below
    let asize: Vec<u64> = blocks
        .iter()
        .map(|b| {
            let a = alignments[b.buft as usize];
            b.size.max(1).div_ceil(a) * a
        })
        .collect();
    // blocks that live through most of the graph, including its busiest
    // step, conflict with nearly everything: stack them at the bottom of
    // chunk 0 once and keep them out of the conflict lists. Every one of
    // them is live at the peak, so this keeps the peak of live bytes
    // reachable.
    let end = blocks.iter().map(|b| b.death).max().unwrap_or(0);
    let peak_time = busiest_steps(blocks, &asize, bufts.len(), end);
    let at_floor = |b: &Block| {
        let lifetime = (b.death - b.birth) as u64;
        let t = peak_time[b.buft as usize];
        lifetime * 4 > end as u64 * 3 && b.birth <= t && t <= b.death
    };
    let mut floor = vec![0u64; bufts.len()];
    for (i, b) in blocks.iter().enumerate().filter(|(_, b)| at_floor(b)) {
        let t = b.buft as usize;
        if floor[t] + asize[i] > max_sizes[t] {
            return Err(too_big(b, i, bufts, name_of));
        }
        addrs[i] = Addr {
            chunk: 0,
            offset: floor[t],
        };
        floor[t] += asize[i];
    }
    for (t, f) in floor.iter().enumerate() {
        if *f > 0 {
            peaks[t].push(*f);
        }
    }
    // blocks that live through most of the graph first (they conflict
    // with nearly everything, so they go to the bottom while little is
    // placed), then largest first, then earliest born; one integer per
    // block, so the sort is fast
    let long_lived = |b: &Block| (b.death - b.birth) as u64 * 2 > end as u64;
    let mut order: Vec<u128> = (0..n)
        .filter(|&i| !at_floor(&blocks[i]))
        .map(|i| {
            let b = &blocks[i];
            ((!long_lived(b) as u128) << 127)
                | (((!b.size >> 1) as u128) << 64)
                | ((b.birth as u128) << 32)
                | i as u128
        })
        .collect();
    order.sort_unstable();
    let mut rank = vec![u32::MAX; n];
    for (r, &key) in order.iter().enumerate() {
        rank[key as u32 as usize] = r as u32;
    }
    let conflicts = conflict_lists(blocks, &at_floor, &rank);
    let mut taken: Vec<(u64, u64)> = Vec::new();
    for &key in &order {
        let i = key as u32 as usize;
        let b = &blocks[i];
        let t = b.buft as usize;
        let size = asize[i];
        let max = max_sizes[t];
        if size > max {
            return Err(too_big(b, i, bufts, name_of));
        }
        let mut placed = None;
        for chunk in 0..MAX_CHUNKS as u16 {
            taken.clear();
            for &j in conflicts.of(i) {
                let j = j as usize;
                let a = addrs[j];
                if a.chunk == chunk && blocks[j].buft == b.buft {
                    taken.push((a.offset, a.offset + asize[j]));
                }
            }
            // the lowest offset clear of every taken range
            taken.sort_unstable();
            let mut offset = if chunk == 0 { floor[t] } else { 0 };
            for &(start, end) in &taken {
                if offset + size <= start {
                    break;
                }
                offset = offset.max(end);
            }
            if offset + size <= max {
                placed = Some(Addr { chunk, offset });
                break;
            }
        }
        let addr = placed.ok_or_else(|| too_big(b, i, bufts, name_of))?;
        let chunk_peaks = &mut peaks[t];
        if chunk_peaks.len() <= addr.chunk as usize {
            chunk_peaks.resize(addr.chunk as usize + 1, 0);
        }
        let c = &mut chunk_peaks[addr.chunk as usize];
        *c = (*c).max(addr.offset + size);
        addrs[i] = addr;
    }
    Ok((addrs, peaks))
}

/// The time step with the most live bytes, per buffer type.
fn busiest_steps(blocks: &[Block], asize: &[u64], n_bufts: usize, end: u32) -> Vec<u32> {
    let steps = end as usize + 2;
    let mut delta = vec![0i64; n_bufts * steps];
    for (b, &size) in blocks.iter().zip(asize) {
        let row = b.buft as usize * steps;
        delta[row + b.birth as usize] += size as i64;
        delta[row + b.death as usize + 1] -= size as i64;
    }
    delta
        .chunks(steps)
        .map(|row| {
            let (mut live, mut peak, mut at) = (0i64, 0i64, 0u32);
            for (t, d) in row.iter().enumerate() {
                live += d;
                if live > peak {
                    (peak, at) = (live, t as u32);
                }
            }
            at
        })
        .collect()
}

/// For each block, the blocks live at the same time that are placed
/// before it (compressed rows).
struct Conflicts {
    start: Vec<u32>,
    list: Vec<u32>,
}

impl Conflicts {
    fn of(&self, i: usize) -> &[u32] {
        &self.list[self.start[i] as usize..self.start[i + 1] as usize]
    }
}

/// Calls `visit(later, earlier)` for every pair of blocks live at the same
/// time, by a sweep over births (blocks come in birth order), skipping
/// the blocks `skip` selects.
fn sweep_conflicts(
    blocks: &[Block],
    skip: &impl Fn(&Block) -> bool,
    mut visit: impl FnMut(usize, usize),
) {
    let mut active: Vec<u32> = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        if skip(b) {
            continue;
        }
        active.retain(|&a| blocks[a as usize].death >= b.birth);
        for &a in &active {
            visit(i, a as usize);
        }
        active.push(i as u32);
    }
}

fn conflict_lists(blocks: &[Block], skip: &impl Fn(&Block) -> bool, rank: &[u32]) -> Conflicts {
    let n = blocks.len();
    // each pair once, in the list of the block placed later
    let later = |i: usize, a: usize| if rank[i] > rank[a] { (i, a) } else { (a, i) };
    let mut start = vec![0u32; n + 1];
    sweep_conflicts(blocks, skip, |i, a| {
        start[later(i, a).0 + 1] += 1;
    });
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut list = vec![0u32; start[n] as usize];
    sweep_conflicts(blocks, skip, |i, a| {
        let (l, e) = later(i, a);
        list[fill[l] as usize] = e as u32;
        fill[l] += 1;
    });
    Conflicts { start, list }
}
