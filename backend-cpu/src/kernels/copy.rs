//! Data movement: get_rows, cpy / cont (with type conversion), set_rows,
//! concat.

use ggraph_core::Result;

use super::indices::check_indices;
use super::interleave::{GROUP_ROWS, Interleaved};
use super::parallel::par_ranges;
use crate::kernels::tensor_ref::TRef;

/// Copies one element between tensors of the same non-quantised type.
///
/// # Safety
/// Both element pointers must be valid.
#[inline]
unsafe fn copy_elem(dst: *mut u8, src: *const u8, size: usize) {
    // SAFETY: caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, size) };
}

/// Copies row (s1, s2, s3) of `src` to row (d1, d2, d3) of `dst`,
/// converting type; exact bytes when the types match and are not quantised.
///
/// # Safety
/// Rows in bounds; the destination row is owned by the caller.
unsafe fn copy_row(
    dst: TRef,
    d: (usize, usize, usize),
    src: TRef,
    s: (usize, usize, usize),
    scratch: &mut [f32],
) {
    // SAFETY: caller's contract.
    unsafe {
        if dst.dtype == src.dtype && !dst.dtype.is_quantized() {
            let size = dst.dtype.type_size();
            let dp = dst.row_ptr(d.0, d.1, d.2);
            let sp = src.row_ptr(s.0, s.1, s.2);
            if dst.rows_packed() && src.rows_packed() {
                std::ptr::copy(sp, dp, size * dst.ne[0]);
            } else {
                for i in 0..dst.ne[0] {
                    copy_elem(dp.add(i * dst.nb[0]), sp.add(i * src.nb[0]), size);
                }
            }
        } else if dst.dtype == src.dtype && dst.rows_packed() && src.rows_packed() {
            let bytes = dst.dtype.row_size(dst.ne[0]).unwrap_or(0);
            std::ptr::copy(
                src.row_ptr(s.0, s.1, s.2),
                dst.row_ptr(d.0, d.1, d.2),
                bytes,
            );
        } else {
            src.load_row(s.0, s.1, s.2, scratch);
            dst.store_row(d.0, d.1, d.2, scratch);
        }
    }
}

pub fn get_rows(dst: TRef, a: TRef, idx: TRef) -> Result<()> {
    check_indices("get_rows", idx, a.ne[1])?;
    par_ranges(dst.nrows(), 8, |rows| {
        let mut scratch = vec![0f32; a.ne[0]];
        let mut plain = Vec::new();
        for r in rows {
            let (j, i1, i2) = dst.row_coords(r);
            // SAFETY: the index was checked; this task owns dst row r.
            unsafe {
                let row = idx.get_i32([j, i1, i2, 0]) as usize;
                match a.layout {
                    None => copy_row(dst, (j, i1, i2), a, (row, i1, i2), &mut scratch),
                    Some(layout) => {
                        let one = interleaved_row(a, layout, row, i1, &mut plain);
                        copy_row(dst, (j, i1, i2), one, (0, 0, 0), &mut scratch)
                    }
                }
            }
        }
    });
    Ok(())
}

/// Row `row` of matrix `i2` of an interleaved weight in ggml's bytes, in
/// `plain`, as a one-row tensor.
///
/// # Safety
/// `a` is a whole interleaved weight and `row`, `i2` in its bounds.
unsafe fn interleaved_row(
    a: TRef,
    layout: Interleaved,
    row: usize,
    i2: usize,
    plain: &mut Vec<u8>,
) -> TRef {
    let row_bytes = a.nb[1];
    plain.resize(row_bytes, 0);
    let group_bytes = GROUP_ROWS * row_bytes;
    // SAFETY: the group of `row` lies inside matrix i2 (caller's contract).
    let group = unsafe {
        let start = a.ptr.add(i2 * a.nb[2] + row / GROUP_ROWS * group_bytes);
        std::slice::from_raw_parts(start, group_bytes)
    };
    layout.unpack_row(group, row % GROUP_ROWS, plain);
    TRef {
        ptr: plain.as_mut_ptr(),
        ne: [a.ne[0], 1, 1, 1],
        nb: [a.nb[0], row_bytes, row_bytes, row_bytes],
        layout: None,
        ..a
    }
}

/// cpy and cont: src's values in logical order into dst (same count).
pub fn copy_values(dst: TRef, src: TRef) {
    if src.nelements() == 0 {
        return;
    }
    if src.ne[0] == dst.ne[0] {
        // rows correspond one to one in logical order
        par_ranges(dst.nrows(), 8, |rows| {
            let mut scratch = vec![0f32; dst.ne[0]];
            for r in rows {
                let d = dst.row_coords(r);
                let s = src.row_coords(r);
                // SAFETY: rows in bounds; this task owns dst row r.
                unsafe { copy_row(dst, d, src, s, &mut scratch) };
            }
        });
        return;
    }
    // different row lengths: element by element in logical order
    // (the builder guarantees dst is not quantised here)
    let n = src.nelements();
    let coords = |t: &TRef, k: usize| {
        let i0 = k % t.ne[0];
        let r = k / t.ne[0];
        let (i1, i2, i3) = t.row_coords(r);
        [i0, i1, i2, i3]
    };
    if src.dtype.is_quantized() {
        let mut flat = vec![0f32; n];
        for (r, chunk) in flat.chunks_exact_mut(src.ne[0]).enumerate() {
            let (i1, i2, i3) = src.row_coords(r);
            // SAFETY: row in bounds.
            unsafe { src.load_row(i1, i2, i3, chunk) };
        }
        for (k, v) in flat.into_iter().enumerate() {
            // SAFETY: element in bounds; single-threaded.
            unsafe {
                crate::kernels::tensor_ref::write_scalar(
                    dst.dtype,
                    dst.elem_ptr(coords(&dst, k)),
                    v,
                )
            };
        }
        return;
    }
    for k in 0..n {
        let s = src.elem_ptr(coords(&src, k));
        let d = dst.elem_ptr(coords(&dst, k));
        // SAFETY: elements in bounds; single-threaded.
        unsafe {
            if src.dtype == dst.dtype {
                copy_elem(d, s, dst.dtype.type_size());
            } else {
                let v = crate::kernels::tensor_ref::read_scalar(src.dtype, s);
                crate::kernels::tensor_ref::write_scalar(dst.dtype, d, v);
            }
        }
    }
}

pub fn set_rows(dst: TRef, src: TRef, idx: TRef) -> Result<()> {
    check_indices("set_rows", idx, dst.ne[1])?;
    let target = |r: usize| {
        let (i1, i2, i3) = src.row_coords(r);
        // SAFETY: index element in bounds.
        let t = unsafe { idx.get_i32([i1, i2 % idx.ne[1], i3 % idx.ne[2], 0]) } as usize;
        (t, i2, i3)
    };
    let n = src.nrows();
    if src.ne[0] == 0 || n == 0 {
        return Ok(());
    }
    // two source rows may name the same destination: then keep program
    // order (last write wins) by running in sequence
    let mut targets: Vec<(usize, usize, usize)> = (0..n).map(target).collect();
    targets.sort_unstable();
    let distinct = targets.windows(2).all(|w| w[0] != w[1]);
    let write = |r: usize, scratch: &mut [f32]| {
        // SAFETY: the index was checked; the destination row is owned by
        // this task (distinct targets) or we run single-threaded.
        unsafe { copy_row(dst, target(r), src, src.row_coords(r), scratch) };
    };
    if distinct {
        par_ranges(n, 8, |rows| {
            let mut scratch = vec![0f32; src.ne[0]];
            for r in rows {
                write(r, &mut scratch);
            }
        });
    } else {
        let mut scratch = vec![0f32; src.ne[0]];
        for r in 0..n {
            write(r, &mut scratch);
        }
    }
    Ok(())
}

pub fn concat(dst: TRef, a: TRef, b: TRef, dim: usize) {
    let na = a.ne[dim];
    let size = dst.dtype.type_size();
    par_ranges(dst.nrows(), 8, |rows| {
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            for i0 in 0..dst.ne[0] {
                let i = [i0, i1, i2, i3];
                let (t, mut j) = if i[dim] < na { (a, i) } else { (b, i) };
                if i[dim] >= na {
                    j[dim] -= na;
                }
                // SAFETY: elements in bounds; this task owns dst row r.
                unsafe {
                    if t.dtype == dst.dtype {
                        copy_elem(dst.elem_ptr(i), t.elem_ptr(j), size);
                    } else {
                        let v = t.get_f32(j);
                        crate::kernels::tensor_ref::write_scalar(dst.dtype, dst.elem_ptr(i), v);
                    }
                }
            }
        }
    });
}
