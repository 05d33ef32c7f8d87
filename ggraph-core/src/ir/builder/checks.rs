//! Shape and type rules the ops share: broadcasting, masks, conversions.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::tensor::Tensor;

/// `small` divides `big` (0 divides only 0).
pub(super) fn divides(small: usize, big: usize) -> bool {
    if small == 0 {
        big == 0
    } else {
        big % small == 0
    }
}

/// `b` repeats to `a`: every dim of b divides a's.
pub fn can_repeat(b: [usize; 4], a: [usize; 4]) -> bool {
    (0..4).all(|i| divides(b[i], a[i]))
}

pub(super) fn check_mask(
    op: &'static str,
    m: &Tensor,
    n_cols: usize,
    n_rows: usize,
    d2: usize,
    d3: usize,
) -> Result<()> {
    if m.ne[0] != n_cols || m.ne[1] < n_rows || !divides(m.ne[2], d2) || !divides(m.ne[3], d3) {
        return Err(Error::shape(
            op,
            format!(
                "mask {} must be [{n_cols}, >= {n_rows}, dividing {d2}, dividing {d3}]",
                m.shape_str()
            ),
        ));
    }
    Ok(())
}

pub(super) fn check_convertible(op: &'static str, src: &Tensor, to: DType) -> Result<()> {
    let int_src = src.dtype == DType::I32;
    let int_dst = to == DType::I32;
    if int_src != int_dst {
        return Err(Error::dtype(
            op,
            "a",
            src.dtype,
            format!("a type convertible to {to} (I32 converts only to I32)"),
        ));
    }
    if src.dtype.is_quantized() && !src.has_contiguous_rows() {
        return Err(Error::shape(op, "quantised source rows must be packed"));
    }
    Ok(())
}
