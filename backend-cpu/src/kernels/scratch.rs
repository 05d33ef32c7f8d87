//! Per-thread scratch for the kernels: buffers kept between calls, so
//! that the hot path allocates only when a call needs more than any before.

use std::cell::RefCell;
use std::thread::LocalKey;

thread_local! {
    /// Rows in f32 for the row-at-a-time kernels (elementwise, norms,
    /// rope): generation runs a few hundred one-row ops per token, where
    /// allocating them per task showed.
    static ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` floats of this thread's scratch, 64-byte aligned and
/// kept between calls, so the hot path allocates only when a matrix is
/// larger than any before. A fresh buffer, aligned the same way, is used
/// if the scratch is already in use (a nested call stolen by this thread
/// while it waited).
pub(crate) fn with_scratch<T: Copy + Default, R>(
    key: &'static LocalKey<RefCell<Vec<T>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let pad = 64 / std::mem::size_of::<T>().max(1);
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len + pad {
                v.resize(len + pad, T::default());
            }
            let off = v.as_ptr().align_offset(64).min(pad);
            f(&mut v[off..off + len])
        }
        Err(_) => {
            let mut v = vec![T::default(); len + pad];
            let off = v.as_ptr().align_offset(64).min(pad);
            f(&mut v[off..off + len])
        }
    })
}

/// [`with_scratch`] on this thread's f32 rows scratch.
pub(crate) fn with_rows<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    with_scratch(&ROWS, len, f)
}
