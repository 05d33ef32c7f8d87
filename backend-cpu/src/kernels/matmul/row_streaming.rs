//! How the kernels stream weight rows from memory: which rows are short,
//! and how far ahead to prefetch.

/// Weight bytes the one-column mat-vec kernels keep in flight ahead of
/// the ones they read. A mat-vec streams each weight once, mostly from
/// memory, so the prefetch must cover the memory latency at the rate one
/// core consumes: with weights larger than the L3, 4-8 KiB ahead measured
/// faster than 2 KiB (one group of four 544-byte rows) and than 16-32 KiB
/// (docs/performance.md).
pub(crate) const PREFETCH_BYTES: usize = 8 << 10;

/// Asks for the `len` bytes from `at`, a cache line at a time (a hint:
/// any address will do).
#[inline(always)]
pub(crate) fn prefetch_lines(at: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..len).step_by(64) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line) as *const i8) };
    }
    let _ = (at, len);
}

/// How far ahead of a group of short rows (`group_bytes` apart, the
/// rows of one kernel call) the kernel prefetches: whole groups, at least
/// one, covering [`PREFETCH_BYTES`].
pub(crate) fn short_rows_ahead(group_bytes: usize) -> usize {
    let group = group_bytes.max(1);
    PREFETCH_BYTES.div_ceil(group) * group
}

/// Rows of at most this many bytes are short: read whole, they are
/// prefetched a group of rows at a time ([`short_rows_ahead`]), and on
/// AVX2 a single float column streams them one at a time.
pub(crate) const SHORT_ROW_BYTES: usize = 4096;

/// With VNNI, one-column products of the block formats read rows of at
/// most this many bytes one at a time, one sequential stream: up to
/// twice as fast as four rows side by side on 4-15 KiB rows, level on
/// Q8_0's 20-30 KiB rows (docs/performance.md).
pub(crate) const STREAMED_ROW_BYTES: usize = 16 << 10;

/// One-column products of F32, F16 and BF16 rows of at most this many
/// bytes read them one at a time: 8-40% ahead of several side by side
/// on 8 KiB rows; on 12-28 KiB rows, whose f32 column no longer stays in
/// L1 beside the stream, a third slower (docs/performance.md).
pub(crate) const FLOAT_STREAMED_ROW_BYTES: usize = 8 << 10;

/// [`STREAMED_ROW_BYTES`] for the formats whose one-row kernel also reads
/// a lane start per four activations (Q5_0, Q4_0, IQ4_NL): those loads
/// crowd L1 on longer rows, where four rows side by side, sharing them,
/// were ahead (measured on Q8_0 before it stopped reading them).
pub(crate) const STREAMED_ROW_BYTES_WITH_LANE_STARTS: usize = 12 << 10;

/// The prefetch distance of a kernel call that reads whole rows of
/// `row_bytes`, `group_bytes` per group of rows: whole groups for short
/// rows, else `along` bytes further along each row.
pub(crate) fn rows_ahead(row_bytes: usize, group_bytes: usize, along: usize) -> usize {
    if row_bytes <= SHORT_ROW_BYTES {
        short_rows_ahead(group_bytes)
    } else {
        along
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_rows_prefetch_whole_groups_at_least_prefetch_bytes_ahead() {
        // four 544-byte Q8_0 rows: four groups; eight 288-byte Q4_0 rows:
        // four groups; a group longer than the distance: one group
        assert_eq!(short_rows_ahead(4 * 544), 4 * 4 * 544);
        assert_eq!(short_rows_ahead(8 * 288), 4 * 8 * 288);
        assert_eq!(short_rows_ahead(16 << 10), 16 << 10);
        for group in [1, 100, 2176, 4096, 8191, 8192, 8193] {
            let ahead = short_rows_ahead(group);
            assert_eq!(ahead % group, 0);
            assert!(ahead >= PREFETCH_BYTES && ahead < PREFETCH_BYTES + group);
        }
        assert!(short_rows_ahead(0) >= PREFETCH_BYTES);
    }
}
