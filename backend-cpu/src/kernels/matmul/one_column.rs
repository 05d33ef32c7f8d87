//! The loop of a one-column product around a kernel that takes a group
//! of rows at a time.

use super::operands::{Cols, WeightRows};
use crate::kernels::parallel::par_ranges;

/// `out[0][i] = dot(a row i, ..)` for `i < m`: the rows spread over the
/// team, each task handing `kernel` groups of `R` rows (single rows at the
/// end of its range). `kernel(rows, count, results)` computes
/// `results[..count]` for the first `count` of `rows`.
pub(crate) fn matvec_rows<const R: usize>(
    a: WeightRows,
    m: usize,
    out: &Cols<f32>,
    kernel: impl Fn(&[*const u8; R], usize, &mut [f32; R]) + Sync,
) {
    par_ranges(m, 16, |range| {
        let mut i = range.start;
        while i < range.end {
            let r = if range.end - i >= R { R } else { 1 };
            let mut rows = [std::ptr::null::<u8>(); R];
            for (q, row) in rows.iter_mut().take(r).enumerate() {
                *row = a.row(i + q);
            }
            let mut res = [0f32; R];
            kernel(&rows, r, &mut res);
            // SAFETY: output column 0 holds m values; rows i..i + r are
            // this task's alone.
            unsafe { std::ptr::copy_nonoverlapping(res.as_ptr(), out.0[0].add(i), r) };
            i += r;
        }
    });
}
