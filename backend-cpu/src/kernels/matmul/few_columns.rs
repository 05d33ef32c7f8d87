//! The loop of a quantised mul_mat with one to eight columns around a
//! kernel that reads weight blocks in place (`block_dot_avx2`): rows
//! spread over the team, and the columns in
//! groups of at most [`MAX_C`].
//!
//! With one group, every task hands its whole range of rows to the kernel,
//! which streams each row once. With several, a task walks blocks of
//! [`ROW_BLOCK`] rows chunk by chunk, and each group in turn reads the
//! chunk, which stays in L1 between them.

use std::ops::Range;

use super::operands::{Cols, WeightRows};

/// Most columns per kernel call.
pub(crate) const MAX_C: usize = 4;
/// Rows per block when the columns come in several groups.
const ROW_BLOCK: usize = 8;

/// The arguments of a kernel call: blocks `b0..b0 + nb` of the weights'
/// rows (the kernel's unit: 32-value blocks or 256-value super-blocks),
/// times up to [`MAX_C`] columns of type `Col` (the kernel's count first).
pub(crate) struct Call<'a, Col> {
    pub a: &'a WeightRows,
    pub cols: [Col; MAX_C],
    /// Output column of each column.
    pub out: [*mut f32; MAX_C],
    pub b0: usize,
    pub nb: usize,
    /// Bytes ahead of each row's current block to prefetch.
    pub ahead: usize,
    /// Add to the outputs (a later chunk) instead of storing.
    pub add: bool,
}

/// `out[c][i] (+)= dot(row i, column c)` over the call's blocks, for the
/// rows `i` of the range (a multiple of the kernel's row count).
///
/// # Safety
/// The rows exist and hold blocks up to `b0 + nb`, as do the columns; the
/// outputs of those rows are the caller's alone.
pub(crate) type KernelFn<Col> = unsafe fn(&Call<Col>, Range<usize>);

/// The columns' groups: how many, and the columns in each (but the last),
/// as even as they come.
pub(crate) fn column_groups(n: usize) -> (usize, usize) {
    let groups = n.div_ceil(MAX_C);
    (groups, n.div_ceil(groups))
}

/// How a mul_mat is cut for its kernels.
pub(crate) struct Plan {
    /// Blocks per row.
    pub nb: usize,
    /// Blocks per chunk when the columns come in several groups.
    pub chunk: usize,
    /// Rows per kernel call (the rest of a range goes one at a time).
    pub rows_per_call: usize,
    pub ahead: usize,
}

/// Runs `kernel(r, c)` over the `m` rows of `a` and the `n` columns that
/// `column(j, b0)` gives (column `j` from block `b0` on), writing `out`.
///
/// # Safety
/// `a` holds `m` rows of `plan.nb` blocks, `column` returns columns of as
/// many blocks, `out` holds `n` columns of `m` values, and the kernels
/// `kernel` returns read and write only what [`KernelFn`] allows.
pub(crate) unsafe fn run<Col: Copy>(
    a: &WeightRows,
    m: usize,
    n: usize,
    out: &Cols<f32>,
    plan: Plan,
    column: impl Fn(usize, usize) -> Col + Sync,
    kernel: impl Fn(usize, usize) -> KernelFn<Col> + Sync,
) {
    let (groups, per_group) = column_groups(n);
    let rpc = plan.rows_per_call;
    // groups of rpc rows, then single rows
    let rows_of = |call: &Call<Col>, c: usize, rows: Range<usize>| {
        let whole = rows.start + (rows.len() / rpc) * rpc;
        // SAFETY: the caller's contract, for these rows.
        unsafe {
            kernel(rpc, c)(call, rows.start..whole);
            kernel(1, c)(call, whole..rows.end);
        }
    };
    crate::kernels::parallel::par_ranges(m, 16, |range| {
        if groups == 1 {
            let call = Call {
                a,
                cols: std::array::from_fn(|c| column(c.min(n - 1), 0)),
                out: std::array::from_fn(|c| out.0[c.min(n - 1)]),
                b0: 0,
                nb: plan.nb,
                ahead: plan.ahead,
                add: false,
            };
            rows_of(&call, n, range);
            return;
        }
        for i0 in range.clone().step_by(ROW_BLOCK) {
            let rows = i0..(i0 + ROW_BLOCK).min(range.end);
            for b0 in (0..plan.nb).step_by(plan.chunk) {
                for j0 in (0..n).step_by(per_group) {
                    let c = per_group.min(n - j0);
                    let call = Call {
                        a,
                        cols: std::array::from_fn(|cc| column(j0 + cc.min(c - 1), b0)),
                        out: std::array::from_fn(|cc| out.0[j0 + cc.min(c - 1)]),
                        b0,
                        nb: plan.chunk.min(plan.nb - b0),
                        ahead: plan.ahead,
                        add: b0 > 0,
                    };
                    rows_of(&call, c, rows.clone());
                }
            }
        }
    });
}
