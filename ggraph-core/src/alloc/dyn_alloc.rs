//! The dynamic offset allocator: plans offsets in chunks of memory that do
//! not exist yet. It touches no memory; the graph allocator turns its chunk
//! peaks into real buffers.
//!
//! Best fit over free blocks, a freed block merges with its free
//! neighbours, sizes rounded up to the alignment, a new chunk when nothing
//! fits (each at most `max_chunk_size`, at most [`MAX_CHUNKS`]), and the
//! peak of every chunk tracked.

use crate::error::{Error, Result};

/// Most chunks one buffer type may be split into.
pub const MAX_CHUNKS: usize = 16;

/// An address in planned memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addr {
    /// Which chunk (one future buffer), below [`MAX_CHUNKS`].
    pub chunk: u16,
    /// Bytes from the chunk's start, a multiple of the alignment.
    pub offset: u64,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    offset: u64,
    size: u64,
}

#[derive(Clone, Debug, Default)]
struct Chunk {
    /// Free blocks sorted by offset; the last one runs to the chunk's end.
    free: Vec<Block>,
    /// Highest end offset ever handed out.
    peak: u64,
}

/// Plans offsets for one buffer type.
#[derive(Clone, Debug)]
pub struct DynAllocator {
    alignment: u64,
    max_chunk_size: u64,
    chunks: Vec<Chunk>,
}

impl DynAllocator {
    /// An empty plan whose offsets are multiples of `alignment` bytes, in
    /// chunks of at most `max_chunk_size` bytes (the buffer type's
    /// `max_size`). Zeros count as 1.
    pub fn new(alignment: u64, max_chunk_size: u64) -> DynAllocator {
        DynAllocator {
            alignment: alignment.max(1),
            max_chunk_size: max_chunk_size.max(1),
            chunks: Vec::new(),
        }
    }

    /// Alignment of every offset and size, in bytes (at least 1).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// `size` rounded up to the alignment.
    pub fn aligned(&self, size: u64) -> u64 {
        size.div_ceil(self.alignment) * self.alignment
    }

    fn new_chunk(&self) -> Chunk {
        Chunk {
            free: vec![Block {
                offset: 0,
                size: self.max_chunk_size,
            }],
            peak: 0,
        }
    }

    /// Plans `size` bytes for the tensor `name` (named in errors).
    pub fn alloc(&mut self, size: u64, name: &str) -> Result<Addr> {
        let size = self.aligned(size.max(1));
        if size > self.max_chunk_size {
            return Err(Error::TooLarge {
                what: "tensor",
                name: name.to_string(),
                bytes: size,
                max_bytes: self.max_chunk_size,
            });
        }
        // best fit: the smallest free block that holds `size`; a chunk's
        // last block (which grows the chunk's peak) only when nothing else
        // fits, and then the one that grows the peak least
        let mut best: Option<(usize, usize, u64)> = None;
        let mut best_tail: Option<(usize, usize, u64)> = None;
        for (c, chunk) in self.chunks.iter().enumerate() {
            let n = chunk.free.len();
            for (b, block) in chunk.free.iter().enumerate() {
                if block.size < size {
                    continue;
                }
                let is_tail = b + 1 == n && block.offset + block.size == self.max_chunk_size;
                if is_tail {
                    let growth = (block.offset + size).saturating_sub(chunk.peak);
                    if best_tail.is_none_or(|(_, _, g)| growth < g) {
                        best_tail = Some((c, b, growth));
                    }
                } else if best.is_none_or(|(_, _, s)| block.size < s) {
                    best = Some((c, b, block.size));
                }
            }
        }
        let (c, b) = match best.or(best_tail) {
            Some((c, b, _)) => (c, b),
            None => {
                if self.chunks.len() >= MAX_CHUNKS {
                    return Err(Error::OutOfMemory {
                        buffer_type: format!(
                            "{MAX_CHUNKS} chunks of {} bytes (tensor '{name}' fits in none)",
                            self.max_chunk_size
                        ),
                        requested_bytes: size,
                        available_bytes: 0,
                    });
                }
                self.chunks.push(self.new_chunk());
                (self.chunks.len() - 1, 0)
            }
        };
        let chunk = &mut self.chunks[c];
        let block = &mut chunk.free[b];
        let offset = block.offset;
        block.offset += size;
        block.size -= size;
        if block.size == 0 {
            chunk.free.remove(b);
        }
        chunk.peak = chunk.peak.max(offset + size);
        Ok(Addr {
            chunk: c as u16,
            offset,
        })
    }

    /// Returns `size` bytes at `addr` to the free list, merging with free
    /// neighbours.
    pub fn free(&mut self, addr: Addr, size: u64) {
        let size = self.aligned(size.max(1));
        let Some(chunk) = self.chunks.get_mut(addr.chunk as usize) else {
            return;
        };
        let free = &mut chunk.free;
        let i = free.partition_point(|b| b.offset < addr.offset);
        let merges_prev = i > 0 && free[i - 1].offset + free[i - 1].size == addr.offset;
        let merges_next = i < free.len() && addr.offset + size == free[i].offset;
        match (merges_prev, merges_next) {
            (true, true) => {
                free[i - 1].size += size + free[i].size;
                free.remove(i);
            }
            (true, false) => free[i - 1].size += size,
            (false, true) => {
                free[i].offset = addr.offset;
                free[i].size += size;
            }
            (false, false) => free.insert(
                i,
                Block {
                    offset: addr.offset,
                    size,
                },
            ),
        }
    }

    /// Peak bytes of each chunk.
    pub fn chunk_peaks(&self) -> Vec<u64> {
        self.chunks.iter().map(|c| c.peak).collect()
    }

    /// Forgets every allocation (chunks and peaks too).
    pub fn reset(&mut self) {
        self.chunks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_neighbours_merge_and_are_reused() {
        let mut a = DynAllocator::new(16, 1 << 20);
        let x = a.alloc(100, "x").unwrap();
        let y = a.alloc(100, "y").unwrap();
        let z = a.alloc(100, "z").unwrap();
        assert_eq!((x.offset, y.offset, z.offset), (0, 112, 224));
        a.free(x, 100);
        a.free(y, 100);
        // x and y merged into one block of 224 bytes
        let w = a.alloc(200, "w").unwrap();
        assert_eq!(w.offset, 0);
        assert_eq!(a.chunk_peaks(), vec![336]);
    }

    #[test]
    fn best_fit_prefers_the_smallest_hole() {
        let mut a = DynAllocator::new(1, 1 << 20);
        let big = a.alloc(1000, "big").unwrap();
        let _sep = a.alloc(10, "sep").unwrap();
        let small = a.alloc(100, "small").unwrap();
        let _sep2 = a.alloc(10, "sep2").unwrap();
        a.free(big, 1000);
        a.free(small, 100);
        let t = a.alloc(90, "t").unwrap();
        assert_eq!(t.offset, small.offset, "the 100-byte hole fits best");
    }

    #[test]
    fn a_full_chunk_opens_another_and_oversized_is_an_error() {
        let mut a = DynAllocator::new(1, 1000);
        let x = a.alloc(800, "x").unwrap();
        let y = a.alloc(800, "y").unwrap();
        assert_eq!((x.chunk, y.chunk), (0, 1));
        let err = a.alloc(1001, "huge").unwrap_err().to_string();
        assert!(
            err.contains("huge") && err.contains("1001") && err.contains("1000"),
            "{err}"
        );
        for _ in 2..MAX_CHUNKS {
            a.alloc(800, "fill").unwrap();
        }
        assert!(a.alloc(800, "one too many").is_err());
    }
}
