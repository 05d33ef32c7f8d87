//! The CPU's own layout for quantised weights (ggml's CPU_REPACK): rows in
//! groups of eight, each group's blocks side by side, so that a product
//! streams one run of memory per task and one 256-bit load holds four
//! codes of each of eight rows, the panel `block_gemm_avx2` otherwise
//! builds from ggml's rows on every call.
//!
//! A block of one row is a few head units (its scales: f16 `d`, and
//! Q4_K's `dmin`, 2 bytes each; MXFP4's E8M0 exponent, 1 byte) and then
//! 4-byte chunks (Q4_K's 12 bytes of packed scales and mins, then the
//! codes). Group `g`, block `b` of a matrix of `nblk` blocks a row sits at
//! `(g * nblk + b) * 8 * block_bytes`: head unit `u` of the eight rows side
//! by side (`[u][row]`), then every chunk of the eight rows side by side
//! (`[chunk][row][4]`). So one 256-bit load of chunk `j` holds chunk `j`
//! of each row in its own 32-bit lane:
//!
//! - Q4_0, IQ4_NL and MXFP4: bytes `4j..4j + 4` of the nibbles: low
//!   nibbles are codes `4j..4j + 4`, high nibbles codes `16 + 4j..16 + 4j
//!   + 4` (IQ4_NL's and MXFP4's index their tables).
//! - Q4_K: chunks 0..3 are the packed scales and mins, chunk `3 + c` the
//!   nibble bytes `4c..4c + 4`: low nibbles are codes `64 (c / 8) + 4 (c %
//!   8)..+4` (sub-block `2 (c / 8)`), high nibbles the same step of
//!   sub-block `2 (c / 8) + 1`.
//!
//! The layout only moves bytes, so it takes exactly the bytes of ggml's,
//! and a fill is the same in both.

use ggraph_core::DType;
use ggraph_core::quant::{IQ4_VALUES, MXFP4_VALUES};

/// Rows per group.
pub(crate) const GROUP_ROWS: usize = 8;

/// A weight type in the interleaved layout.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interleaved {
    /// Q4_0 blocks (18 bytes: an f16 scale, 16 bytes of nibbles).
    Q4_0,
    /// Q4_K super-blocks (144 bytes: f16 `d` and `dmin`, 12 bytes of
    /// 6-bit scales and mins, 128 bytes of nibbles).
    Q4_K,
    /// IQ4_NL blocks (18 bytes, as Q4_0's: an f16 scale, 16 bytes of
    /// nibbles that index the IQ4 table).
    IQ4_NL,
    /// MXFP4 blocks (17 bytes: an E8M0 exponent, 16 bytes of nibbles that
    /// index E2M1's values, doubled).
    MXFP4,
}

impl Interleaved {
    /// The layout for a weight of `dtype` and `shape`, if it has one: a
    /// matrix or a stack of them (experts: no fourth dimension above 1) of
    /// Q4_0, Q4_K, IQ4_NL or MXFP4 with whole groups of rows. A stack is
    /// laid out as one matrix of all its rows: its matrices start on group
    /// bounds.
    pub(crate) fn of(dtype: DType, shape: &[usize]) -> Option<Interleaved> {
        let layout = match dtype {
            DType::Q4_0 => Interleaved::Q4_0,
            DType::Q4_K => Interleaved::Q4_K,
            DType::IQ4_NL => Interleaved::IQ4_NL,
            DType::MXFP4 => Interleaved::MXFP4,
            _ => return None,
        };
        let rows = *shape.get(1)?;
        let k = shape[0];
        let matrix = shape.iter().skip(3).all(|&d| d == 1) && shape.get(2).is_none_or(|&e| e > 0);
        let whole = k > 0 && k % dtype.block_size() == 0;
        (matrix && rows > 0 && rows % GROUP_ROWS == 0 && whole).then_some(layout)
    }

    /// The weight type.
    pub(crate) fn dtype(self) -> DType {
        match self {
            Interleaved::Q4_0 => DType::Q4_0,
            Interleaved::Q4_K => DType::Q4_K,
            Interleaved::IQ4_NL => DType::IQ4_NL,
            Interleaved::MXFP4 => DType::MXFP4,
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

    /// The head units at the start of a block.
    fn head_units(self) -> usize {
        match self {
            Interleaved::Q4_0 | Interleaved::IQ4_NL | Interleaved::MXFP4 => 1,
            Interleaved::Q4_K => 2,
        }
    }

    /// Bytes of one head unit: an f16, or MXFP4's exponent byte.
    fn unit_bytes(self) -> usize {
        match self {
            Interleaved::MXFP4 => 1,
            _ => 2,
        }
    }

    /// The 4-byte chunks after them.
    fn chunks(self) -> usize {
        (self.block_bytes() - self.unit_bytes() * self.head_units()) / 4
    }

    /// Where, in a group's block, the chunks start.
    pub(crate) fn chunks_at(self) -> usize {
        self.unit_bytes() * GROUP_ROWS * self.head_units()
    }

    /// The table a code indexes (IQ4_NL's, MXFP4's); `None` where the
    /// code is the value.
    pub(crate) fn code_table(self) -> Option<&'static [i8; 16]> {
        match self {
            Interleaved::IQ4_NL => Some(&IQ4_VALUES),
            Interleaved::MXFP4 => Some(&MXFP4_VALUES),
            Interleaved::Q4_0 | Interleaved::Q4_K => None,
        }
    }

    /// Converts whole groups from ggml's rows (`src`, rows of `row_bytes`)
    /// into the interleaved layout (`dst`, as long).
    pub(crate) fn pack(self, src: &[u8], dst: &mut [u8], row_bytes: usize) {
        self.pack_strided(src, row_bytes, dst, row_bytes)
    }

    /// As [`pack`](Self::pack) for the first `row_bytes` (whole blocks) of
    /// rows `stride` bytes apart in `src`: as many groups as `dst` holds
    /// (`dst.len()` a multiple of eight rows of `row_bytes`), as the
    /// products that lay out GGUF's rows a group at a time take them.
    pub(crate) fn pack_strided(self, src: &[u8], stride: usize, dst: &mut [u8], row_bytes: usize) {
        match self {
            Interleaved::Q4_0 | Interleaved::IQ4_NL => {
                pack_as::<18, 1, 2>(src, stride, dst, row_bytes)
            }
            Interleaved::Q4_K => pack_as::<144, 2, 2>(src, stride, dst, row_bytes),
            Interleaved::MXFP4 => pack_as::<17, 1, 1>(src, stride, dst, row_bytes),
        }
    }

    /// Converts whole groups from the interleaved layout (`src`) back to
    /// ggml's rows of `row_bytes` (`dst`, as long).
    pub(crate) fn unpack(self, src: &[u8], dst: &mut [u8], row_bytes: usize) {
        match self {
            Interleaved::Q4_0 | Interleaved::IQ4_NL => unpack_as::<18, 1, 2>(src, dst, row_bytes),
            Interleaved::Q4_K => unpack_as::<144, 2, 2>(src, dst, row_bytes),
            Interleaved::MXFP4 => unpack_as::<17, 1, 1>(src, dst, row_bytes),
        }
    }

    /// ggml's bytes of row `lane` of the group that starts at `group`,
    /// into `out` (one row's bytes).
    pub(crate) fn unpack_row(self, group: &[u8], lane: usize, out: &mut [u8]) {
        let gb = self.group_block_bytes();
        for (b, block) in out.chunks_exact_mut(self.block_bytes()).enumerate() {
            self.move_block(lane, |plain, inter, len| {
                block[plain..plain + len]
                    .copy_from_slice(&group[b * gb + inter..b * gb + inter + len])
            });
        }
    }

    /// Calls `copy(offset in the row's block, offset in the group's block,
    /// len)` for each head unit and chunk of row `r`'s block.
    fn move_block(self, r: usize, mut copy: impl FnMut(usize, usize, usize)) {
        let (head, unit) = (self.head_units(), self.unit_bytes());
        for u in 0..head {
            copy(unit * u, (u * GROUP_ROWS + r) * unit, unit);
        }
        let at = self.chunks_at();
        for j in 0..self.chunks() {
            copy(unit * head + 4 * j, at + (j * GROUP_ROWS + r) * 4, 4);
        }
    }
}

/// [`Interleaved::pack_strided`] for blocks of `BB` bytes that start with
/// `HEAD` units of `UNIT` bytes. The sizes are constants, so every move is
/// one load and one store of a known width at a known offset (loading a
/// model is mostly this loop).
fn pack_as<const BB: usize, const HEAD: usize, const UNIT: usize>(
    src: &[u8],
    stride: usize,
    dst: &mut [u8],
    row_bytes: usize,
) {
    let group_bytes = GROUP_ROWS * row_bytes;
    for (g, inter) in dst.chunks_exact_mut(group_bytes).enumerate() {
        // a row at a time: one sequential read, where the rows come
        // straight from a matrix in memory
        for r in 0..GROUP_ROWS {
            let plain = &src[(g * GROUP_ROWS + r) * stride..][..row_bytes];
            for (row, out) in plain
                .chunks_exact(BB)
                .zip(inter.chunks_exact_mut(GROUP_ROWS * BB))
            {
                for u in 0..HEAD {
                    let at = (u * GROUP_ROWS + r) * UNIT;
                    out[at..at + UNIT].copy_from_slice(&row[UNIT * u..UNIT * (u + 1)]);
                }
                for (j, chunk) in row[UNIT * HEAD..].chunks_exact(4).enumerate() {
                    let at = UNIT * GROUP_ROWS * HEAD + (j * GROUP_ROWS + r) * 4;
                    out[at..at + 4].copy_from_slice(chunk);
                }
            }
        }
    }
}

/// [`Interleaved::unpack`], as [`pack_as`].
fn unpack_as<const BB: usize, const HEAD: usize, const UNIT: usize>(
    src: &[u8],
    dst: &mut [u8],
    row_bytes: usize,
) {
    let group_bytes = GROUP_ROWS * row_bytes;
    for (inter, plain) in src
        .chunks_exact(group_bytes)
        .zip(dst.chunks_exact_mut(group_bytes))
    {
        for (b, block) in inter.chunks_exact(GROUP_ROWS * BB).enumerate() {
            for r in 0..GROUP_ROWS {
                let row = &mut plain[r * row_bytes + b * BB..][..BB];
                for u in 0..HEAD {
                    let at = (u * GROUP_ROWS + r) * UNIT;
                    row[UNIT * u..UNIT * (u + 1)].copy_from_slice(&block[at..at + UNIT]);
                }
                for (j, chunk) in row[UNIT * HEAD..].chunks_exact_mut(4).enumerate() {
                    let at = UNIT * GROUP_ROWS * HEAD + (j * GROUP_ROWS + r) * 4;
                    chunk.copy_from_slice(&block[at..at + 4]);
                }
            }
        }
    }
}

/// The eight rows' scales of a Q4_0, IQ4_NL or MXFP4 group block at
/// `block`, one row a lane: the f16 `d`s, or MXFP4's exponents as ggml's
/// `E8M0_TO_FP32_HALF` (`2^(e - 128)`, exactly).
///
/// # Safety
/// AVX2 and F16C; `block` holds a group block of `layout`, not Q4_K.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn block_scales(
    layout: Interleaved,
    block: *const u8,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: caller's contract: the block starts with its eight rows'
    // head units.
    unsafe {
        if layout != Interleaved::MXFP4 {
            return _mm256_cvtph_ps(_mm_loadu_si128(block as *const __m128i));
        }
        let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(block as *const __m128i));
        // e >= 2: (e - 1) << 23; e < 2: the subnormals 2^-128 and 2^-127
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
        let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let below_two = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        _mm256_castsi256_ps(_mm256_blendv_epi8(normal, small, below_two))
    }
}

/// The 6-bit scales and mins of the eight rows of a Q4_K group block at
/// `block`, one row a 32-bit lane, four values a lane: scales of
/// sub-blocks 0..4 and 4..8, then mins of 0..4 and 4..8, one a byte (see
/// `quant_format::q4k_scales_mins`).
///
/// # Safety
/// AVX2; `block` holds a Q4_K group block.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q4_k_scale_words(block: *const u8) -> [std::arch::x86_64::__m256i; 4] {
    use std::arch::x86_64::*;
    let at = Interleaved::Q4_K.chunks_at();
    // SAFETY: caller's contract: the three scale chunks lie in the block.
    unsafe {
        let low = _mm256_set1_epi8(0x0f);
        let six = _mm256_set1_epi8(0x3f);
        let top = _mm256_set1_epi8(0x03);
        let s0 = _mm256_loadu_si256(block.add(at) as *const __m256i);
        let s1 = _mm256_loadu_si256(block.add(at + 32) as *const __m256i);
        let s2 = _mm256_loadu_si256(block.add(at + 64) as *const __m256i);
        // the top two bits of each byte, moved to bits 4 and 5
        let high0 = _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(s0), top));
        let high1 = _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(s1), top));
        [
            _mm256_and_si256(s0, six),
            _mm256_or_si256(_mm256_and_si256(s2, low), high0),
            _mm256_and_si256(s1, six),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32::<4>(s2), low), high1),
        ]
    }
}

/// `d * scale` and `dmin * min` of each sub-block of a Q4_K group block at
/// `block`, `[sub-block][row]`: the eight rows' 6-bit values
/// ([`q4_k_scale_words`]) side by side, one row a lane.
///
/// # Safety
/// AVX2 and F16C; `block` holds a Q4_K group block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn q4_k_scales(
    block: *const u8,
    dw: &mut [[f32; GROUP_ROWS]; 8],
    mw: &mut [[f32; GROUP_ROWS]; 8],
) {
    use std::arch::x86_64::*;
    // SAFETY: caller's contract; the stores go to arrays of eight floats.
    unsafe {
        let byte = _mm256_set1_epi32(0xff);
        let d = _mm256_cvtph_ps(_mm_loadu_si128(block as *const __m128i));
        let dmin = _mm256_cvtph_ps(_mm_loadu_si128(block.add(16) as *const __m128i));
        let [sc_lo, sc_hi, mn_lo, mn_hi] = q4_k_scale_words(block);
        let (scales, mins) = ([sc_lo, sc_hi], [mn_lo, mn_hi]);
        for sub in 0..8 {
            let shift = _mm256_set1_epi32(8 * (sub % 4) as i32);
            let sc = _mm256_and_si256(_mm256_srlv_epi32(scales[sub / 4], shift), byte);
            let mn = _mm256_and_si256(_mm256_srlv_epi32(mins[sub / 4], shift), byte);
            _mm256_storeu_ps(
                dw[sub].as_mut_ptr(),
                _mm256_mul_ps(_mm256_cvtepi32_ps(sc), d),
            );
            _mm256_storeu_ps(
                mw[sub].as_mut_ptr(),
                _mm256_mul_ps(_mm256_cvtepi32_ps(mn), dmin),
            );
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
        for layout in [
            Interleaved::Q4_0,
            Interleaved::Q4_K,
            Interleaved::IQ4_NL,
            Interleaved::MXFP4,
        ] {
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
            // row 3's block 1: its scale, then its second chunk
            let inter = layout.group_block_bytes();
            let plain_block = 3 * row_bytes + bb;
            let unit = layout.unit_bytes();
            assert_eq!(
                packed[inter + 3 * unit..inter + 4 * unit],
                plain[plain_block..plain_block + unit]
            );
            let head = unit * layout.head_units();
            let chunk1 = inter + layout.chunks_at() + (GROUP_ROWS + 3) * 4;
            assert_eq!(
                packed[chunk1..chunk1 + 4],
                plain[plain_block + head + 4..plain_block + head + 8]
            );
            // blocks 1 and 2 of the same rows, read in place: the same
            // bytes as those blocks of rows cut out first
            let part = 2 * bb;
            let cut: Vec<u8> = plain
                .chunks_exact(row_bytes)
                .flat_map(|row| &row[bb..])
                .copied()
                .collect();
            let (mut whole, mut strided) = (vec![0u8; cut.len()], vec![0u8; cut.len()]);
            layout.pack(&cut, &mut whole, part);
            layout.pack_strided(&plain[bb..], row_bytes, &mut strided, part);
            assert_eq!(strided, whole, "{layout:?}");
        }
    }

    /// MXFP4's exponents become ggml's `E8M0_TO_FP32_HALF`, the
    /// subnormal ones and 255 included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn mxfp4_scales_are_e8m0_halves() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
            return;
        }
        for first in (0..=255u8).step_by(8) {
            let mut block = [0u8; 136];
            for (r, e) in block[..8].iter_mut().enumerate() {
                *e = first.wrapping_add(r as u8);
            }
            let mut got = [0f32; 8];
            // SAFETY: AVX2 and F16C checked; the block is whole.
            unsafe {
                let v = block_scales(Interleaved::MXFP4, block.as_ptr());
                std::arch::x86_64::_mm256_storeu_ps(got.as_mut_ptr(), v);
            }
            for (r, g) in got.iter().enumerate() {
                let want = ggraph_core::quant::e8m0_to_f32_half(block[r]);
                assert_eq!(g.to_bits(), want.to_bits(), "e = {}", block[r]);
            }
        }
    }

    #[test]
    fn only_matrices_of_whole_groups_of_q4_0_q4_k_iq4_nl_and_mxfp4_rows_are_laid_out() {
        assert_eq!(
            Interleaved::of(DType::Q4_0, &[64, 16]),
            Some(Interleaved::Q4_0)
        );
        // Q8_0 rows stay ggml's: their kernels sum in ggml's lanes
        assert_eq!(Interleaved::of(DType::Q8_0, &[32, 8, 1]), None);
        assert_eq!(Interleaved::of(DType::Q4_0, &[64, 12]), None);
        assert_eq!(
            Interleaved::of(DType::Q4_0, &[64, 16, 2]),
            Some(Interleaved::Q4_0)
        );
        assert_eq!(Interleaved::of(DType::Q4_0, &[64, 16, 2, 2]), None);
        assert_eq!(Interleaved::of(DType::Q4_0, &[64]), None);
        assert_eq!(Interleaved::of(DType::F16, &[64, 16]), None);
        assert_eq!(
            Interleaved::of(DType::Q4_K, &[256, 16]),
            Some(Interleaved::Q4_K)
        );
        assert_eq!(
            Interleaved::of(DType::IQ4_NL, &[64, 8]),
            Some(Interleaved::IQ4_NL)
        );
        assert_eq!(
            Interleaved::of(DType::MXFP4, &[64, 8, 4]),
            Some(Interleaved::MXFP4)
        );
        assert_eq!(Interleaved::of(DType::Q6_K, &[256, 16]), None);
        assert_eq!(Interleaved::of(DType::IQ4_XS, &[256, 16]), None);
    }
}
