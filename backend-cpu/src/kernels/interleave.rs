//! The CPU's own layout for quantised weights (ggml's CPU_REPACK): rows in
//! groups of eight, each group's blocks side by side, so that a product
//! streams one run of memory per task and one 256-bit load holds four
//! codes of each of eight rows, the panel `block_gemm_avx2` otherwise
//! builds from ggml's rows on every call.
//!
//! Group `g`, block `b` of a matrix with `nblk` blocks a row sits at
//! `(g * nblk + b) * 8 * block_bytes`: the eight rows' f16 scales
//! (16 bytes), then their codes four bytes at a time, `[chunk][row][4]`.
//! For Q4_0 a chunk `j` of a row is its bytes `4j..4j + 4`: low nibbles
//! are codes `4j..4j + 4`, high nibbles codes `16 + 4j..16 + 4j + 4`. For
//! Q8_0 it is codes `4j..4j + 4`. The layout only moves bytes, so it
//! takes exactly the bytes of ggml's, and a fill is the same in both.

use ggraph_core::DType;

/// Rows per group.
pub(crate) const GROUP_ROWS: usize = 8;

/// Bytes of the scales at the start of an interleaved block.
const SCALES: usize = 2 * GROUP_ROWS;

/// A weight type in the interleaved layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interleaved {
    /// Q4_0 blocks (18 bytes: an f16 scale, 16 bytes of nibbles).
    Q4_0,
    /// Q8_0 blocks (34 bytes: an f16 scale, 32 signed codes).
    Q8_0,
}

impl Interleaved {
    /// The layout for a weight of `dtype` and `shape`, if it has one: a
    /// matrix (no third or fourth dimension above 1) of Q4_0 or Q8_0 with
    /// whole groups of rows.
    pub(crate) fn of(dtype: DType, shape: &[usize]) -> Option<Interleaved> {
        let layout = match dtype {
            DType::Q4_0 => Interleaved::Q4_0,
            DType::Q8_0 => Interleaved::Q8_0,
            _ => return None,
        };
        let rows = *shape.get(1)?;
        let k = shape[0];
        let matrix = shape.iter().skip(2).all(|&d| d == 1);
        (matrix && rows > 0 && rows % GROUP_ROWS == 0 && k > 0 && k % 32 == 0).then_some(layout)
    }

    /// The weight type.
    pub(crate) fn dtype(self) -> DType {
        match self {
            Interleaved::Q4_0 => DType::Q4_0,
            Interleaved::Q8_0 => DType::Q8_0,
        }
    }

    /// Bytes of one row's block.
    pub(crate) fn block_bytes(self) -> usize {
        self.dtype().type_size()
    }

    /// Bytes of one group's block: eight rows' blocks.
    pub(crate) fn group_block_bytes(self) -> usize {
        GROUP_ROWS * self.block_bytes()
    }

    /// Converts whole groups from ggml's rows (`src`, rows of `row_bytes`)
    /// into the interleaved layout (`dst`, as long).
    pub(crate) fn pack(self, src: &[u8], dst: &mut [u8], row_bytes: usize) {
        self.move_blocks(src.len(), row_bytes, |plain, inter, len| {
            dst[inter..inter + len].copy_from_slice(&src[plain..plain + len])
        });
    }

    /// Converts whole groups from the interleaved layout (`src`) back to
    /// ggml's rows of `row_bytes` (`dst`, as long).
    pub(crate) fn unpack(self, src: &[u8], dst: &mut [u8], row_bytes: usize) {
        self.move_blocks(src.len(), row_bytes, |plain, inter, len| {
            dst[plain..plain + len].copy_from_slice(&src[inter..inter + len])
        });
    }

    /// ggml's bytes of row `lane` of the group that starts at `group`
    /// (`nblk` blocks a row), into `out` (one row's bytes).
    pub(crate) fn unpack_row(self, group: &[u8], lane: usize, out: &mut [u8]) {
        let bb = self.block_bytes();
        let gb = self.group_block_bytes();
        for (b, block) in out.chunks_exact_mut(bb).enumerate() {
            let at = b * gb;
            block[..2].copy_from_slice(&group[at + 2 * lane..at + 2 * lane + 2]);
            for j in 0..(bb - 2) / 4 {
                let from = at + SCALES + (j * GROUP_ROWS + lane) * 4;
                block[2 + 4 * j..6 + 4 * j].copy_from_slice(&group[from..from + 4]);
            }
        }
    }

    /// Calls `copy(plain offset, interleaved offset, len)` for every run of
    /// bytes of `len` bytes of whole groups, rows of `row_bytes`.
    fn move_blocks(self, len: usize, row_bytes: usize, mut copy: impl FnMut(usize, usize, usize)) {
        let bb = self.block_bytes();
        let gb = self.group_block_bytes();
        let nblk = row_bytes / bb;
        let group_bytes = GROUP_ROWS * row_bytes;
        for g in 0..len / group_bytes {
            for b in 0..nblk {
                let inter = g * group_bytes + b * gb;
                for r in 0..GROUP_ROWS {
                    let plain = g * group_bytes + r * row_bytes + b * bb;
                    copy(plain, inter + 2 * r, 2);
                    for j in 0..(bb - 2) / 4 {
                        copy(
                            plain + 2 + 4 * j,
                            inter + SCALES + (j * GROUP_ROWS + r) * 4,
                            4,
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packing moves every byte once: unpacking gives ggml's rows back,
    /// any one row comes back alone, and the scales and codes sit where
    /// the kernels read them.
    #[test]
    fn packing_round_trips_and_puts_scales_and_codes_in_place() {
        for layout in [Interleaved::Q4_0, Interleaved::Q8_0] {
            let (bb, nblk) = (layout.block_bytes(), 3);
            let row_bytes = bb * nblk;
            let plain: Vec<u8> = (0..2 * GROUP_ROWS * row_bytes)
                .map(|i| (i * 7 + i / 251) as u8)
                .collect();
            let mut packed = vec![0u8; plain.len()];
            layout.pack(&plain, &mut packed, row_bytes);
            assert_ne!(packed, plain);
            let mut back = vec![0u8; plain.len()];
            layout.unpack(&packed, &mut back, row_bytes);
            assert_eq!(back, plain, "{layout:?}");
            let group_bytes = GROUP_ROWS * row_bytes;
            for row in 0..2 * GROUP_ROWS {
                let (g, lane) = (row / GROUP_ROWS, row % GROUP_ROWS);
                let mut one = vec![0u8; row_bytes];
                layout.unpack_row(&packed[g * group_bytes..], lane, &mut one);
                assert_eq!(one, plain[row * row_bytes..(row + 1) * row_bytes]);
            }
            // row 3's block 1: its scale, then its codes' second chunk
            let inter = layout.group_block_bytes();
            let plain_block = 3 * row_bytes + bb;
            assert_eq!(
                packed[inter + 6..inter + 8],
                plain[plain_block..plain_block + 2]
            );
            let chunk1 = inter + SCALES + (GROUP_ROWS + 3) * 4;
            assert_eq!(
                packed[chunk1..chunk1 + 4],
                plain[plain_block + 6..plain_block + 10]
            );
        }
    }

    #[test]
    fn only_matrices_of_whole_groups_of_q4_0_and_q8_0_rows_are_laid_out() {
        assert_eq!(
            Interleaved::of(DType::Q4_0, &[64, 16]),
            Some(Interleaved::Q4_0)
        );
        assert_eq!(
            Interleaved::of(DType::Q8_0, &[32, 8, 1]),
            Some(Interleaved::Q8_0)
        );
        assert_eq!(Interleaved::of(DType::Q4_0, &[64, 12]), None);
        assert_eq!(Interleaved::of(DType::Q4_0, &[64, 16, 2]), None);
        assert_eq!(Interleaved::of(DType::Q4_0, &[64]), None);
        assert_eq!(Interleaved::of(DType::F16, &[64, 16]), None);
        assert_eq!(Interleaved::of(DType::Q4_K, &[256, 16]), None);
    }
}
