//! mul_mat and mul_mat_id: weights of any type times f32 activations.
//!
//! Weight rows are converted to f32 once per tile (straight from the
//! buffer when they already are f32) and dotted with every activation
//! column of the tile. The dot product is compiled for AVX-512, AVX2+FMA
//! and plain x86-64 and chosen at run time.

use std::cell::RefCell;
use std::sync::OnceLock;

use ggraph_core::{DType, Result};
use rayon::prelude::*;

use super::check_indices;
use crate::tensor_ref::TRef;

/// Rows of a weight matrix: `m` rows of `k` values, `stride` bytes apart.
#[derive(Clone, Copy)]
struct WeightRows {
    ptr: *const u8,
    stride: usize,
    /// Bytes between values of a row (the type size when packed).
    elem_stride: usize,
    dtype: DType,
    k: usize,
}

/// Column pointers (k-long f32 inputs, m-long f32 outputs).
struct Cols<T>(Vec<*mut T>);

// SAFETY: the pointers address buffers alive for the whole call; output
// columns are written by exactly one task each (tiles are disjoint).
unsafe impl<T> Sync for Cols<T> {}
unsafe impl<T> Send for Cols<T> {}
unsafe impl Sync for WeightRows {}
unsafe impl Send for WeightRows {}

const ROW_BLOCK: usize = 16;
const COL_BLOCK: usize = 64;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// out[j][i] = dot(a row i, b[j]) for i < m, j < b.len().
fn gemm(a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    if m == 0 || n == 0 {
        return;
    }
    let row_blocks = m.div_ceil(ROW_BLOCK);
    let col_blocks = n.div_ceil(COL_BLOCK);
    let k = a.k;
    let dot = dot_fn();
    (0..row_blocks * col_blocks)
        .into_par_iter()
        .for_each(|task| {
            let (rb, cb) = (task % row_blocks, task / row_blocks);
            let rows = rb * ROW_BLOCK..((rb + 1) * ROW_BLOCK).min(m);
            let cols = cb * COL_BLOCK..((cb + 1) * COL_BLOCK).min(n);
            SCRATCH.with(|s| {
                let mut scratch = s.borrow_mut();
                let direct = a.dtype == DType::F32 && a.elem_stride == 4;
                if !direct {
                    scratch.resize(ROW_BLOCK * k, 0.0);
                    for (r, i) in rows.clone().enumerate() {
                        // SAFETY: row i of the weights is in bounds.
                        unsafe { load_weight_row(a, i, &mut scratch[r * k..(r + 1) * k]) };
                    }
                }
                for j in cols.clone() {
                    // SAFETY: column j holds k values.
                    let bj = unsafe { std::slice::from_raw_parts(b.0[j] as *const f32, k) };
                    let oj = out.0[j];
                    for (r, i) in rows.clone().enumerate() {
                        let ai: &[f32] = if direct {
                            // SAFETY: packed f32 row i of k values.
                            unsafe {
                                std::slice::from_raw_parts(a.ptr.add(i * a.stride) as *const f32, k)
                            }
                        } else {
                            &scratch[r * k..(r + 1) * k]
                        };
                        // SAFETY: output column j has m entries; this task owns (i, j).
                        unsafe { *oj.add(i) = dot(ai, bj) };
                    }
                }
            });
        });
}

/// # Safety
/// Row `i` of `a` must be in bounds.
unsafe fn load_weight_row(a: WeightRows, i: usize, out: &mut [f32]) {
    let t = TRef {
        // SAFETY: caller's contract.
        ptr: unsafe { a.ptr.add(i * a.stride) } as *mut u8,
        dtype: a.dtype,
        ne: [a.k, 1, 1, 1],
        nb: [a.elem_stride, a.stride, a.stride, a.stride],
    };
    // SAFETY: caller's contract.
    unsafe { t.load_row(0, 0, 0, out) };
}

/// Activation columns as f32: straight pointers when `b` rows are packed
/// f32, otherwise converted into `store`.
fn activation_cols(b: TRef, coords: &[(usize, usize, usize)], store: &mut Vec<f32>) -> Cols<f32> {
    let k = b.ne[0];
    if b.dtype == DType::F32 && b.rows_packed() {
        return Cols(
            coords
                .iter()
                .map(|&(j, i2, i3)| b.row_ptr(j, i2, i3) as *mut f32)
                .collect(),
        );
    }
    store.resize(coords.len() * k, 0.0);
    for (c, &(j, i2, i3)) in coords.iter().enumerate() {
        // SAFETY: row in bounds.
        unsafe { b.load_row(j, i2, i3, &mut store[c * k..(c + 1) * k]) };
    }
    Cols(
        (0..coords.len())
            .map(|c| store[c * k..].as_mut_ptr())
            .collect(),
    )
}

pub fn mul_mat(dst: TRef, a: TRef, b: TRef) {
    let (m, n) = (dst.ne[0], dst.ne[1]);
    if m == 0 || n == 0 || dst.ne[2] == 0 || dst.ne[3] == 0 {
        return;
    }
    let r2 = b.ne[2] / a.ne[2];
    let r3 = b.ne[3] / a.ne[3];
    let mut store = Vec::new();
    for i3 in 0..dst.ne[3] {
        for i2 in 0..dst.ne[2] {
            let w = WeightRows {
                ptr: a.row_ptr(0, i2 / r2, i3 / r3),
                stride: a.nb[1],
                elem_stride: a.nb[0],
                dtype: a.dtype,
                k: a.ne[0],
            };
            let coords: Vec<_> = (0..n).map(|j| (j, i2, i3)).collect();
            let bc = activation_cols(b, &coords, &mut store);
            let out = Cols((0..n).map(|j| dst.row_ptr(j, i2, i3) as *mut f32).collect());
            gemm(w, m, &bc, &out);
        }
    }
}

pub fn mul_mat_id(dst: TRef, experts: TRef, b: TRef, ids: TRef) -> Result<()> {
    let n_expert = experts.ne[2];
    check_indices("mul_mat_id", ids, n_expert)?;
    let (m, n_used, n_tokens) = (dst.ne[0], dst.ne[1], dst.ne[2]);
    let n_b = b.ne[1];
    // group (slot, token) pairs by expert, so each expert's rows are read once
    let mut by_expert: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n_expert];
    for t in 0..n_tokens {
        for e in 0..n_used {
            // SAFETY: in-bounds index element.
            let x = unsafe { ids.get_i32([e, t, 0, 0]) } as usize;
            by_expert[x].push((e, t));
        }
    }
    let mut store = Vec::new();
    for (x, pairs) in by_expert.iter().enumerate() {
        if pairs.is_empty() {
            continue;
        }
        let w = WeightRows {
            ptr: experts.row_ptr(0, x, 0),
            stride: experts.nb[1],
            elem_stride: experts.nb[0],
            dtype: experts.dtype,
            k: experts.ne[0],
        };
        let coords: Vec<_> = pairs.iter().map(|&(e, t)| (e % n_b, t, 0)).collect();
        let bc = activation_cols(b, &coords, &mut store);
        let out = Cols(
            pairs
                .iter()
                .map(|&(e, t)| dst.row_ptr(e, t, 0) as *mut f32)
                .collect(),
        );
        gemm(w, m, &bc, &out);
    }
    Ok(())
}

// ---- dot products ------------------------------------------------------

type DotFn = fn(&[f32], &[f32]) -> f32;

/// The fastest dot product this processor runs.
pub fn dot_fn() -> DotFn {
    static DOT: OnceLock<DotFn> = OnceLock::new();
    *DOT.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return dot_avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return dot_avx2;
            }
        }
        dot_portable
    })
}

macro_rules! dot_body {
    ($a:expr, $b:expr, $lanes:literal, $fma:expr) => {{
        let (a, b) = ($a, $b);
        let n = a.len().min(b.len());
        let mut acc = [0f32; $lanes];
        let chunks = n / $lanes;
        for c in 0..chunks {
            let x = &a[c * $lanes..c * $lanes + $lanes];
            let y = &b[c * $lanes..c * $lanes + $lanes];
            for l in 0..$lanes {
                acc[l] = $fma(x[l], y[l], acc[l]);
            }
        }
        let mut s = 0f32;
        for v in acc {
            s += v;
        }
        for i in chunks * $lanes..n {
            s = $fma(a[i], b[i], s);
        }
        s
    }};
}

fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    dot_body!(a, b, 16, |x: f32, y: f32, z: f32| x * y + z)
}

#[cfg(target_arch = "x86_64")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn inner(a: &[f32], b: &[f32]) -> f32 {
        dot_body!(a, b, 32, f32::mul_add)
    }
    // SAFETY: chosen only when the processor has AVX2 and FMA.
    unsafe { inner(a, b) }
}

#[cfg(target_arch = "x86_64")]
fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn inner(a: &[f32], b: &[f32]) -> f32 {
        dot_body!(a, b, 64, f32::mul_add)
    }
    // SAFETY: chosen only when the processor has AVX-512F.
    unsafe { inner(a, b) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dot_products_agree() {
        let a: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.11).cos()).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let got = super::dot_fn()(&a, &b) as f64;
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
        let p = super::dot_portable(&a, &b) as f64;
        assert!((p - want).abs() < 1e-3);
    }
}
