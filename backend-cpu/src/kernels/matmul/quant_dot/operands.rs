//! What the panel path hands its kernels: the tile sizes, and the
//! per-thread scratch of its quantised activations.

use std::cell::RefCell;

/// Rows per interleaved panel (two zmm of 16 rows).
pub(super) const PANEL_R: usize = 32;
/// Columns per panel tile.
pub(super) const PANEL_C: usize = 4;

thread_local! {
    /// The quantised activations of a call on any of the three paths.
    pub(super) static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}
