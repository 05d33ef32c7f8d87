//! Index tensors checked before a kernel uses them.

use ggraph_core::{Error, Result};

use crate::kernels::tensor_ref::TRef;

/// Checks that every I32 index in `idx` lies in 0..limit, before a kernel
/// uses them, so that a bad index is an error and never a wild access.
pub(crate) fn check_indices(op: &str, idx: TRef, limit: usize) -> Result<()> {
    for r in 0..idx.nrows() {
        let (i1, i2, i3) = idx.row_coords(r);
        for i0 in 0..idx.ne[0] {
            // SAFETY: in-bounds element of the index tensor.
            let v = unsafe { idx.get_i32([i0, i1, i2, i3]) };
            if v < 0 || v as usize >= limit {
                return Err(Error::InvalidArgument(format!(
                    "{op}: index {v} at [{i0}, {i1}, {i2}, {i3}] is outside 0..{limit}"
                )));
            }
        }
    }
    Ok(())
}
