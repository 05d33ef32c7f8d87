//! How the kernels split a loop over the team: guided chunks of rows, and
//! the split of a GEMM's column tiles into groups.

use std::ops::Range;

use crate::team;

/// Runs `f` over `0..n` in parallel chunks of at least `min_chunk` items
/// (see [`GuidedChunks`]).
pub(crate) fn par_ranges(n: usize, min_chunk: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    let chunks = GuidedChunks::new(n, team::current_threads(), min_chunk);
    team::for_each(chunks.len(), |c| f(chunks.get(c)));
}

/// The chunks of a parallel loop over `0..n`, shrinking as the loop goes
/// (guided scheduling): each takes a `2 * threads`-th part of what the
/// chunks before it left, and none fewer than `min` items. The team
/// claims few tasks, and the last ones are small, so a thread that runs
/// out of work waits at most one small chunk for the others. Equal
/// chunks of an eighth of the loop left the leader waiting for its helper
/// for a measurable share of a small model's token, most of it on the
/// 32000-row output projection (4 MiB a chunk; docs/performance.md).
pub(crate) struct GuidedChunks {
    ends: [usize; GuidedChunks::MAX],
    len: usize,
}

impl GuidedChunks {
    const MAX: usize = 96;

    pub(crate) fn new(n: usize, threads: usize, min: usize) -> GuidedChunks {
        let mut chunks = GuidedChunks {
            ends: [0; GuidedChunks::MAX],
            len: 0,
        };
        let parts = 2 * threads.max(1);
        let min = min.max(1);
        let mut start = 0;
        while start < n {
            let left = n - start;
            let size = if chunks.len + 1 == GuidedChunks::MAX || threads <= 1 {
                left
            } else {
                left.div_ceil(parts).max(min).min(left)
            };
            start += size;
            chunks.ends[chunks.len] = start;
            chunks.len += 1;
        }
        chunks
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Chunk `c` (below `len`).
    pub(crate) fn get(&self, c: usize) -> Range<usize> {
        let start = if c == 0 { 0 } else { self.ends[c - 1] };
        start..self.ends[c]
    }
}

/// How a GEMM with `row_blocks` blocks of rows splits its `tiles` column
/// tiles into groups: one group when the row blocks alone give every
/// thread of the team two tasks, else enough groups to. Returns the
/// number of groups and the tiles per group (the last may have fewer).
pub(crate) fn column_split(row_blocks: usize, tiles: usize) -> (usize, usize) {
    let threads = team::current_threads();
    let groups = if row_blocks >= 2 * threads {
        1
    } else {
        (2 * threads).div_ceil(row_blocks.max(1)).min(tiles).max(1)
    };
    let per_group = tiles.div_ceil(groups).max(1);
    (tiles.div_ceil(per_group), per_group)
}

#[cfg(test)]
mod tests {
    use super::GuidedChunks;

    #[test]
    fn guided_chunks_cover_the_loop_once_and_shrink_to_the_minimum() {
        for threads in 1..=4 {
            for min in [1, 4, 16] {
                for n in [0, 1, 5, 16, 17, 512, 1408, 32000, 128_256, 10_000_000] {
                    let chunks = GuidedChunks::new(n, threads, min);
                    let mut next = 0;
                    let mut last_size = usize::MAX;
                    for c in 0..chunks.len() {
                        let r = chunks.get(c);
                        assert_eq!(r.start, next, "{n} items, {threads} threads: contiguous");
                        assert!(!r.is_empty());
                        let is_last = c + 1 == chunks.len();
                        assert!(r.len() <= last_size || is_last, "sizes shrink");
                        assert!(r.len() >= min || is_last, "no chunk under the minimum");
                        last_size = r.len();
                        next = r.end;
                    }
                    assert_eq!(next, n, "{n} items, {threads} threads: covered");
                    if threads == 1 {
                        assert!(chunks.len() <= 1, "one thread, one chunk");
                    }
                }
            }
        }
        // the output projection of a small model: few tasks, a small tail
        let chunks = GuidedChunks::new(32000, 2, 16);
        assert!(chunks.len() < 40, "{} tasks", chunks.len());
        assert_eq!(chunks.get(0).len(), 8000);
        assert!(chunks.get(chunks.len() - 1).len() <= 16);
    }

    #[test]
    fn column_split_covers_every_tile_once() {
        // outside a team: one thread, so two tasks are enough
        assert_eq!(super::column_split(2, 10), (1, 10));
        assert_eq!(super::column_split(1, 10), (2, 5));
        assert_eq!(super::column_split(1, 3), (2, 2));
        assert_eq!(super::column_split(1, 1), (1, 1));
        // nothing to split, and no division by zero
        assert_eq!(super::column_split(0, 0), (0, 1));
        assert_eq!(super::column_split(0, 5), (2, 3));
        for blocks in 0..5 {
            for tiles in 0..20 {
                let (groups, per) = super::column_split(blocks, tiles);
                assert!(groups * per >= tiles && (groups == 0 || (groups - 1) * per < tiles));
            }
        }
    }
}
