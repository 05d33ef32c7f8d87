//! Rotary position embedding, normal and NeoX layouts, with frequency
//! factors, frequency scaling and YaRN.
//!
//! The cos/sin table of a node depends only on its parameters, positions
//! and frequency factors; every rope of a model step shares them (two per
//! layer), so the last table is kept and reused when they match.

use std::sync::{Arc, Mutex};

use ggraph_core::ir::{RopeMode, RopeParams};

use super::parallel::par_ranges;
use super::scratch::with_rows;
use crate::kernels::tensor_ref::TRef;
use crate::team;

/// What a cos/sin table was computed from.
struct TableKey {
    params: RopeParams,
    positions: Vec<i32>,
    freq_factors: Option<Vec<u32>>,
}

/// (cos, sin) per (token, pair).
type Table = Arc<Vec<(f32, f32)>>;

static LAST: Mutex<Option<(TableKey, Table)>> = Mutex::new(None);

impl TableKey {
    /// Whether the table of this key serves these inputs (compared in
    /// place: a generation step's ropes all hit, and allocate nothing).
    fn serves(
        &self,
        pos: TRef,
        freq_factors: Option<TRef>,
        p: &RopeParams,
        n_tokens: usize,
    ) -> bool {
        let half = p.n_dims / 2;
        self.params == *p
            && self.positions.len() == n_tokens
            // SAFETY: positions hold n_tokens I32 values.
            && (0..n_tokens).all(|t| unsafe { pos.get_i32([t, 0, 0, 0]) } == self.positions[t])
            && match (&self.freq_factors, freq_factors) {
                (None, None) => true,
                (Some(mine), Some(f)) => {
                    mine.len() == half
                        // SAFETY: freq_factors holds at least n_dims / 2 values.
                        && (0..half).all(|i| unsafe { f.get_f32([i, 0, 0, 0]) }.to_bits() == mine[i])
                }
                _ => false,
            }
    }
}

fn table(pos: TRef, freq_factors: Option<TRef>, p: &RopeParams, n_tokens: usize) -> Table {
    let half = p.n_dims / 2;
    if let Some((_, t)) = LAST
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .filter(|(k, _)| k.serves(pos, freq_factors, p, n_tokens))
    {
        return t.clone();
    }
    let key = TableKey {
        params: *p,
        // SAFETY: positions hold n_tokens I32 values.
        positions: (0..n_tokens)
            .map(|t| unsafe { pos.get_i32([t, 0, 0, 0]) })
            .collect(),
        // SAFETY: freq_factors holds at least n_dims / 2 values.
        freq_factors: freq_factors.map(|f| {
            (0..half)
                .map(|i| unsafe { f.get_f32([i, 0, 0, 0]) }.to_bits())
                .collect()
        }),
    };
    let mut values = vec![(0f32, 0f32); n_tokens * half];
    team::for_each_chunk_mut(&mut values, half.max(1) * 16, |c, rows| {
        for (r, row) in rows.chunks_mut(half.max(1)).enumerate() {
            let t = c * 16 + r;
            let ff = |i: usize| {
                key.freq_factors
                    .as_ref()
                    .map_or(1.0, |f| f32::from_bits(f[i]))
            };
            ggml_rotations(p, key.positions[t] as f32, ff, row);
        }
    });
    let table = Arc::new(values);
    *LAST.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, table.clone()));
    table
}

/// cos and sin of every pair at position `pos`, as ggml's CPU backend
/// computes them (`ggml_rope_cache_init`, `rope_yarn`): in f32, each
/// pair's angle the previous one's times `theta_scale`. Rotated values
/// feed quantised products, where one ulp can move an 8-bit code, so the
/// kernel keeps ggml's arithmetic rather than the exact angle
/// ([`RopeParams::rotation`], the reference's).
fn ggml_rotations(p: &RopeParams, pos: f32, ff: impl Fn(usize) -> f32, out: &mut [(f32, f32)]) {
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let [low, high] = p.yarn_corr_dims();
    let mut theta = pos;
    for (i, cs) in out.iter_mut().enumerate() {
        let theta_extrap = theta / ff(i);
        let theta_interp = p.freq_scale * theta_extrap;
        let mut angle = theta_interp;
        let mut mscale = p.attn_factor;
        if p.ext_factor != 0.0 {
            let y = (i as f32 - low) / (high - low).max(0.001);
            let ramp_mix = (1.0 - y.clamp(0.0, 1.0)) * p.ext_factor;
            angle = theta_interp.mul_add(1.0 - ramp_mix, theta_extrap * ramp_mix);
            mscale *= 0.1f32.mul_add((1.0 / p.freq_scale).ln(), 1.0);
        }
        *cs = (angle.cos() * mscale, angle.sin() * mscale);
        theta *= theta_scale;
    }
}

/// Rotates the pairs of one row by `cs`, with ggml's products and
/// roundings (its compiler fuses one product of each pair into the sum):
/// on FMA instructions where the processor has them (a fused multiply-add
/// is a libm call otherwise).
fn rotate(x: &mut [f32], cs: &[(f32, f32)], mode: RopeMode) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::isa::active() >= crate::kernels::isa::Isa::Avx2 {
        #[target_feature(enable = "fma")]
        unsafe fn fma(x: &mut [f32], cs: &[(f32, f32)], mode: RopeMode) {
            rotate_body(x, cs, mode)
        }
        // SAFETY: the AVX2 level includes FMA (checked by `active`).
        return unsafe { fma(x, cs, mode) };
    }
    rotate_body(x, cs, mode)
}

#[inline(always)]
fn rotate_body(x: &mut [f32], cs: &[(f32, f32)], mode: RopeMode) {
    let half = cs.len();
    for (i, &(c, s)) in cs.iter().enumerate() {
        let (j0, j1) = match mode {
            RopeMode::Normal => (2 * i, 2 * i + 1),
            RopeMode::Neox => (i, i + half),
        };
        let (x0, x1) = (x[j0], x[j1]);
        // the products fused as GCC fuses ggml's `x0*cos - x1*sin` and
        // `x0*sin + x1*cos`
        x[j0] = x0.mul_add(c, -(x1 * s));
        x[j1] = x0.mul_add(s, x1 * c);
    }
}

pub fn rope(dst: TRef, a: TRef, pos: TRef, freq_factors: Option<TRef>, p: &RopeParams) {
    let n_tokens = dst.ne[2];
    let half = p.n_dims / 2;
    let table = table(pos, freq_factors, p, n_tokens);
    let n0 = dst.ne[0];
    par_ranges(dst.nrows(), 4, |range| {
        with_rows(n0, |x| {
            for r in range {
                let (i1, i2, i3) = dst.row_coords(r);
                // SAFETY: rows in bounds; this task owns dst row r.
                unsafe { a.load_row(i1, i2, i3, x) };
                rotate(x, &table[i2 * half..(i2 + 1) * half], p.mode);
                // SAFETY: as above.
                unsafe { dst.store_row(i1, i2, i3, x) };
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggraph_core::DType;

    /// A one-row tensor over `v`.
    fn row<T>(v: &mut [T], dtype: DType) -> TRef {
        let bytes = std::mem::size_of_val(v);
        TRef {
            ptr: v.as_mut_ptr() as *mut u8,
            dtype,
            ne: [v.len(), 1, 1, 1],
            nb: [std::mem::size_of::<T>(), bytes, bytes, bytes],
            layout: None,
        }
    }

    fn i32s(v: &mut [i32]) -> TRef {
        row(v, DType::I32)
    }

    fn f32s(v: &mut [f32]) -> TRef {
        row(v, DType::F32)
    }

    #[test]
    fn a_table_serves_only_the_inputs_it_was_made_from() {
        let p = RopeParams::new(4, RopeMode::Normal);
        let key = TableKey {
            params: p,
            positions: vec![3, 7],
            freq_factors: Some(vec![1f32.to_bits(), 0.5f32.to_bits()]),
        };
        let mut ff = [1.0f32, 0.5];
        assert!(key.serves(i32s(&mut [3, 7]), Some(f32s(&mut ff)), &p, 2));
        assert!(!key.serves(i32s(&mut [3, 8]), Some(f32s(&mut ff)), &p, 2));
        assert!(!key.serves(i32s(&mut [3]), Some(f32s(&mut ff)), &p, 1));
        assert!(!key.serves(i32s(&mut [3, 7]), None, &p, 2));
        assert!(!key.serves(i32s(&mut [3, 7]), Some(f32s(&mut [1.0, 0.25])), &p, 2));
        let neox = RopeParams::new(4, RopeMode::Neox);
        assert!(!key.serves(i32s(&mut [3, 7]), Some(f32s(&mut ff)), &neox, 2));
        let plain = TableKey {
            params: p,
            positions: vec![3, 7],
            freq_factors: None,
        };
        assert!(plain.serves(i32s(&mut [3, 7]), None, &p, 2));
        assert!(!plain.serves(i32s(&mut [3, 7]), Some(f32s(&mut ff)), &p, 2));
    }
}
