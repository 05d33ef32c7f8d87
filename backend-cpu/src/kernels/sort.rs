//! sum_rows, argsort, top_k.

use ggraph_core::ir::SortOrder;

use super::parallel::par_ranges;
use crate::kernels::tensor_ref::TRef;

pub fn sum_rows(dst: TRef, a: TRef) {
    par_ranges(dst.nrows(), 8, |range| {
        let mut x = vec![0f32; a.ne[0]];
        for r in range {
            let (i1, i2, i3) = dst.row_coords(r);
            // SAFETY: rows in bounds; this task owns dst row r.
            unsafe {
                a.load_row(i1, i2, i3, &mut x);
                let s: f64 = x.iter().map(|v| *v as f64).sum();
                dst.store_row(i1, i2, i3, &[s as f32]);
            }
        }
    });
}

fn sorted_indices(x: &[f32], descending: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    if descending {
        idx.sort_by(|a, b| x[*b].total_cmp(&x[*a]));
    } else {
        idx.sort_by(|a, b| x[*a].total_cmp(&x[*b]));
    }
    idx
}

fn write_indices(dst: TRef, c: (usize, usize, usize), idx: &[usize]) {
    for (i0, v) in idx.iter().enumerate() {
        // SAFETY: element in bounds; this task owns the row.
        unsafe { (dst.elem_ptr([i0, c.0, c.1, c.2]) as *mut i32).write_unaligned(*v as i32) };
    }
}

pub fn argsort(dst: TRef, a: TRef, order: SortOrder) {
    par_ranges(dst.nrows(), 8, |range| {
        let mut x = vec![0f32; a.ne[0]];
        for r in range {
            let c = dst.row_coords(r);
            // SAFETY: row in bounds.
            unsafe { a.load_row(c.0, c.1, c.2, &mut x) };
            write_indices(dst, c, &sorted_indices(&x, order == SortOrder::Descending));
        }
    });
}

pub fn top_k(dst: TRef, a: TRef, k: usize) {
    par_ranges(dst.nrows(), 8, |range| {
        let mut x = vec![0f32; a.ne[0]];
        for r in range {
            let c = dst.row_coords(r);
            // SAFETY: row in bounds.
            unsafe { a.load_row(c.0, c.1, c.2, &mut x) };
            let mut idx: Vec<usize> = (0..x.len()).collect();
            if k < idx.len() && k > 0 {
                idx.select_nth_unstable_by(k - 1, |p, q| x[*q].total_cmp(&x[*p]));
            }
            idx.truncate(k);
            idx.sort_by(|p, q| x[*q].total_cmp(&x[*p]));
            write_indices(dst, c, &idx);
        }
    });
}
