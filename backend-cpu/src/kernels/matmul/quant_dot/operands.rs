//! What the direct, fused and panel paths hand their kernels: decoded
//! weight rows, quantised columns, row pointers and the tile sizes; and
//! the per-thread scratch of their quantised activations.

use std::cell::RefCell;

/// Rows decoded together on the direct path.
pub(super) const DIRECT_R: usize = 4;
/// Columns per call of a direct kernel.
pub(super) const DIRECT_C: usize = 4;

/// Rows per interleaved panel (two zmm of 16 rows).
pub(super) const PANEL_R: usize = 32;
/// Columns per panel tile.
pub(super) const PANEL_C: usize = 4;

thread_local! {
    /// The quantised activations of a call on any of the three paths.
    pub(super) static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Decoded weight rows for a direct kernel: `R` rows of codes
/// `stride` bytes apart, scales and mins `sstride` floats apart.
pub(super) struct Decoded {
    pub(super) codes: *const u8,
    pub(super) stride: usize,
    pub(super) dw: *const f32,
    pub(super) mw: *const f32,
    pub(super) sstride: usize,
}

/// Column data of a direct kernel: for each of its C columns, the codes
/// and per-block values from block `blk0` on.
pub(super) struct ColsQ {
    pub(super) codes: [*const i8; DIRECT_C],
    pub(super) d: [*const f32; DIRECT_C],
    pub(super) bias: [*const i32; DIRECT_C],
    pub(super) sx: [*const f32; DIRECT_C],
}
