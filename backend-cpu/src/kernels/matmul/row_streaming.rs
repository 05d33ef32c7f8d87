//! How the kernels stream weight rows from memory: which rows are short,
//! how far ahead to prefetch, and how many rows a one-column call takes.

/// Weight bytes the one-column mat-vec kernels keep in flight ahead of
/// the ones they read. A mat-vec streams each weight once, mostly from
/// memory, so the prefetch must cover the memory latency at the rate one
/// core consumes: measured on `runner_bench --types Q8_0 --gen 128`
/// (weights twice the L3), one group of four 544-byte rows ahead (2 KiB)
/// gave 370-410 tokens/s, 4-8 KiB 505-590, 16-32 KiB less again.
pub(crate) const PREFETCH_BYTES: usize = 8 << 10;

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

/// The prefetch distance of a one-column kernel call that reads groups
/// of rows of `group_bytes`: whole groups ahead, however long the rows.
/// Fetching the same place in the next group of rows beat fetching
/// further along each row for long rows too: Zen 5, 2 threads,
/// `cpu_mul_mat --n 1` (4096 x 14336), the two builds alternated, median
/// of 7: Q4_0 171 -> 221 GFLOP/s, Q8_0 105 -> 123, Q4_K 181 -> 249, Q6_K
/// 119 -> 183. With 8 columns the same rule cost Q6_K a quarter, so
/// kernels for several columns keep [`rows_ahead`], as do the AVX2
/// kernels (no AVX2 machine was there to measure them with this rule).
pub(crate) fn matvec_ahead(group_bytes: usize) -> usize {
    short_rows_ahead(group_bytes)
}

/// Whether a quantised one-column kernel reads rows of `row_bytes` one
/// per call (else four): rows of 2 KiB or more, so that each task streams
/// its rows in order. Four rows side by side (four streams a row apart)
/// share the column's loads but stream slower. Zen 5, 2 threads, eight
/// copies of the weights, median GFLOP/s of alternated rounds: Q4_0
/// (eight rounds) 14336 x 4096 143 -> 164, 4096 x 14336 139 -> 151; five
/// rounds, 14336 x 4096 / 4096 x 14336: Q8_0 70.0 -> 88.9 / 101.5 ->
/// 115.8, Q4_K 139.4 -> 173.7 / 206.0 -> 210.7, Q6_K 88.0 -> 109.1 /
/// 137.2 -> 165.8. Shorter rows keep four per call: the small model's
/// Q8_0 rows (544 and 1496 bytes) generated 1037 against 956 tokens/s one
/// per call (median of six).
pub(crate) fn matvec_one_row(row_bytes: usize) -> bool {
    row_bytes >= 2048
}

/// The prefetch distance of the quantised one-column kernels over rows
/// `stride` bytes apart: [`matvec_ahead`] of four rows, the distance
/// measured when four rows went per call.
pub(crate) fn matvec_prefetch(stride: usize) -> usize {
    matvec_ahead(4 * stride)
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
