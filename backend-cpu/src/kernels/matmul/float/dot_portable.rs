//! The dot path in plain Rust, and the f32 dot products it uses.

use std::sync::OnceLock;

use super::weight_values::load_row_segment;
use crate::kernels::matmul::operands::{Cols, WeightRows};

/// The dot path in plain Rust: rows widened to f32, then dotted.
pub(super) fn dot_range_portable(
    a: &WeightRows,
    b: &Cols<f32>,
    out: &Cols<f32>,
    range: std::ops::Range<usize>,
) {
    let dot = dot_fn();
    let k = a.k;
    let mut row = vec![0f32; k];
    for i in range {
        // SAFETY: row i < m.
        unsafe { load_row_segment(a, i, 0, &mut row) };
        for (j, col) in b.0.iter().enumerate() {
            // SAFETY: columns hold k values, outputs m.
            unsafe {
                let col = std::slice::from_raw_parts(*col as *const f32, k);
                *out.0[j].add(i) = dot(&row, col);
            }
        }
    }
}

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
