//! Rotary position embedding, normal and NeoX layouts, with frequency
//! factors, frequency scaling and YaRN.

use ggraph_core::ir::{RopeMode, RopeParams};

use super::par_ranges;
use crate::tensor_ref::TRef;

pub fn rope(dst: TRef, a: TRef, pos: TRef, freq_factors: Option<TRef>, p: &RopeParams) {
    let n_tokens = dst.ne[2];
    let half = p.n_dims / 2;
    // cos and sin per (token, pair), computed once per node
    let mut table = vec![(0f32, 0f32); n_tokens * half];
    for t in 0..n_tokens {
        // SAFETY: positions hold n_tokens I32 values.
        let position = unsafe { pos.get_i32([t, 0, 0, 0]) } as f64;
        for i in 0..half {
            // SAFETY: freq_factors holds at least n_dims / 2 values.
            let ff = freq_factors.map_or(1.0, |f| unsafe { f.get_f32([i, 0, 0, 0]) } as f64);
            let (c, s) = p.rotation(position, 2 * i, ff);
            table[t * half + i] = (c as f32, s as f32);
        }
    }
    let n0 = dst.ne[0];
    par_ranges(dst.nrows(), 4, |range| {
        let mut x = vec![0f32; n0];
        for r in range {
            let (i1, i2, i3) = dst.row_coords(r);
            // SAFETY: rows in bounds; this task owns dst row r.
            unsafe { a.load_row(i1, i2, i3, &mut x) };
            let cs = &table[i2 * half..(i2 + 1) * half];
            for (i, (c, s)) in cs.iter().enumerate() {
                let (j0, j1) = match p.mode {
                    RopeMode::Normal => (2 * i, 2 * i + 1),
                    RopeMode::Neox => (i, i + half),
                };
                let (x0, x1) = (x[j0], x[j1]);
                x[j0] = x0 * c - x1 * s;
                x[j1] = x0 * s + x1 * c;
            }
            // SAFETY: as above.
            unsafe { dst.store_row(i1, i2, i3, &x) };
        }
    });
}
