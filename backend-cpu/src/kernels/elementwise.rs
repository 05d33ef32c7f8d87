//! Elementwise kernels: binary ops with broadcasting, scale, unary, GLU.
//! Rows are read into f32 scratch and written back converted, so every
//! float type and every stride is handled the same way, and a destination
//! that aliases its source (in-place) is safe. The scratch is the
//! thread's own, kept between calls (`scratch::with_rows`).

use std::sync::OnceLock;

use ggraph_core::Result;
use ggraph_core::ir::{BinaryOp, GluOp, UnaryOp};

use super::convert;
use super::isa::{Isa, active};
use super::math;
use super::parallel::par_ranges;
use super::scratch::with_rows;
use crate::kernels::indices::check_indices;
use crate::kernels::tensor_ref::TRef;

const MIN_ROWS: usize = 4;

pub fn binary(dst: TRef, a: TRef, b: TRef, op: BinaryOp) {
    let n0 = dst.ne[0];
    let nb0 = b.ne[0];
    par_ranges(dst.nrows(), MIN_ROWS, |rows| {
        with_rows(n0 + nb0, |buf| {
            let (x, y) = buf.split_at_mut(n0);
            for r in rows {
                let (i1, i2, i3) = dst.row_coords(r);
                // SAFETY: rows in bounds; this task owns dst row r.
                unsafe {
                    a.load_row(i1, i2, i3, x);
                    b.load_row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3], y);
                }
                if nb0 == n0 {
                    apply(op, x, y);
                } else {
                    for (i, v) in x.iter_mut().enumerate() {
                        let w = y[i % nb0];
                        *v = match op {
                            BinaryOp::Add => *v + w,
                            BinaryOp::Sub => *v - w,
                            BinaryOp::Mul => *v * w,
                            BinaryOp::Div => *v / w,
                        };
                    }
                }
                // SAFETY: as above.
                unsafe { dst.store_row(i1, i2, i3, x) };
            }
        });
    });
}

fn apply(op: BinaryOp, x: &mut [f32], y: &[f32]) {
    match op {
        BinaryOp::Add => x.iter_mut().zip(y).for_each(|(a, b)| *a += b),
        BinaryOp::Sub => x.iter_mut().zip(y).for_each(|(a, b)| *a -= b),
        BinaryOp::Mul => x.iter_mut().zip(y).for_each(|(a, b)| *a *= b),
        BinaryOp::Div => x.iter_mut().zip(y).for_each(|(a, b)| *a /= b),
    }
}

/// Applies `f` to every row of `a`, writing `dst` (same shape).
fn map_rows(dst: TRef, a: TRef, f: impl Fn(&mut [f32]) + Sync + Send) {
    let n0 = dst.ne[0];
    par_ranges(dst.nrows(), MIN_ROWS, |rows| {
        with_rows(n0, |x| {
            for r in rows {
                let (i1, i2, i3) = dst.row_coords(r);
                // SAFETY: rows in bounds; this task owns dst row r.
                unsafe { a.load_row(i1, i2, i3, x) };
                f(x);
                // SAFETY: as above.
                unsafe { dst.store_row(i1, i2, i3, x) };
            }
        })
    });
}

pub fn scale(dst: TRef, a: TRef, s: f32, bias: f32) {
    map_rows(dst, a, |x| x.iter_mut().for_each(|v| *v = *v * s + bias));
}

/// `x[i] = silu(x[i]) * g[i]` (or `silu(x[i])` without `g`), in place, a
/// row at a time and bit for bit as ggml computes it, vectorised for the
/// instruction set at hand.
fn silu_in_place(x: &mut [f32], g: Option<&[f32]>) {
    // as ggml's row loops: the vector form on whole groups of eight, the
    // scalar (libm) form on the rest
    #[inline(always)]
    fn body(x: &mut [f32], g: Option<&[f32]>) {
        math::ggml_rows_of_eight(x, math::ggml_silu, math::libm_silu);
        if let Some(g) = g {
            x.iter_mut().zip(g).for_each(|(v, gv)| *v *= gv);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn avx512(x: &mut [f32], g: Option<&[f32]>) {
            body(x, g)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &mut [f32], g: Option<&[f32]>) {
            body(x, g)
        }
        let isa = active();
        if isa >= Isa::Avx512 {
            // SAFETY: the processor has AVX-512 F (checked by `active`).
            return unsafe { avx512(x, g) };
        }
        if isa >= Isa::Avx2 {
            // SAFETY: the processor has AVX2 and FMA (checked by `active`).
            return unsafe { avx2(x, g) };
        }
    }
    body(x, g)
}

/// `ln(1 + e^x)`, and `x` itself above 20, as ggml computes it.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { (1.0 + x.exp()).ln() }
}

/// GELU's tanh form in f32, as ggml writes it (`ggml_gelu_f32`) and its
/// compiler contracts it with FMA: `1 + a*x*x` in one rounding.
#[inline]
fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let inner = (0.044715 * x).mul_add(x, 1.0);
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * inner).tanh())
}

/// `gelu_f32` of every f16 value, rounded to f16 (ggml's
/// `ggml_table_gelu_f16`), made once.
fn gelu_table() -> &'static [half::f16] {
    static TABLE: OnceLock<Box<[half::f16]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| half::f16::from_f32(gelu_f32(half::f16::from_bits(bits).to_f32())))
            .collect()
    })
}

/// GELU as ggml's CPU backend computes it (`GGML_GELU_FP16`): 0 at or
/// below -10, `x` at or above 10, and between them the f16 table of
/// `gelu_f32` at `x` rounded to f16.
#[inline]
pub fn gelu(x: f32) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    gelu_table()[half::f16::from_f32(x).to_bits() as usize].to_f32()
}

/// [`gelu`] of a row in place, the f16 conversions vectorised: `half`
/// holds the row's values as f16 on the way.
fn gelu_row(x: &mut [f32], half: &mut [half::f16]) {
    let table = gelu_table();
    let half = &mut half[..x.len()];
    convert::f32_to_f16(x, half);
    for h in half.iter_mut() {
        *h = table[h.to_bits() as usize];
    }
    let looked_up = &*half;
    for (v, h) in x.iter_mut().zip(looked_up) {
        *v = if *v <= -10.0 {
            0.0
        } else if *v >= 10.0 {
            *v
        } else {
            h.to_f32()
        };
    }
}

pub fn unary_fn(u: UnaryOp) -> fn(f32) -> f32 {
    match u {
        UnaryOp::Silu => math::ggml_silu,
        UnaryOp::Gelu => gelu,
        UnaryOp::Relu => |x| x.max(0.0),
        UnaryOp::Neg => |x| -x,
        UnaryOp::Exp => f32::exp,
        UnaryOp::Sigmoid => |x| 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Tanh => f32::tanh,
        UnaryOp::Sqr => |x| x * x,
        UnaryOp::Sqrt => f32::sqrt,
        UnaryOp::Softplus => softplus,
    }
}

pub fn unary(dst: TRef, a: TRef, u: UnaryOp) {
    if u == UnaryOp::Silu {
        return map_rows(dst, a, |x| silu_in_place(x, None));
    }
    let f = unary_fn(u);
    map_rows(dst, a, |x| x.iter_mut().for_each(|v| *v = f(*v)));
}

/// ggml's `swiglu_oai` of gate `x` and value `y`: `std::min`, `std::clamp`
/// and libm's `expf`, in its order.
fn swiglu_oai(x: f32, y: f32, alpha: f32, limit: f32) -> f32 {
    let x = if limit < x { limit } else { x };
    let y = if y < -limit {
        -limit
    } else if limit < y {
        limit
    } else {
        y
    };
    x / (1.0 + (alpha * -x).exp()) * (y + 1.0)
}

pub fn glu(dst: TRef, a: TRef, b: Option<TRef>, op: GluOp, swapped: bool) {
    let n0 = dst.ne[0];
    let na = a.ne[0];
    par_ranges(dst.nrows(), MIN_ROWS, |rows| {
        let mut halves = match op {
            GluOp::Geglu => vec![half::f16::ZERO; n0],
            _ => Vec::new(),
        };
        with_rows(na + 2 * n0, |buf| {
            let (x, rest) = buf.split_at_mut(na);
            let (g, out) = rest.split_at_mut(n0);
            for r in rows {
                let (i1, i2, i3) = dst.row_coords(r);
                // SAFETY: rows in bounds; this task owns dst row r.
                unsafe { a.load_row(i1, i2, i3, x) };
                let (xs, gs): (&[f32], &[f32]) = match b {
                    Some(b) => {
                        // SAFETY: as above.
                        unsafe { b.load_row(i1, i2, i3, g) };
                        (&x[..n0], g)
                    }
                    None if swapped => (&x[n0..], &x[..n0]),
                    None => (&x[..n0], &x[n0..]),
                };
                match op {
                    GluOp::Swiglu => {
                        out.copy_from_slice(xs);
                        silu_in_place(out, Some(gs));
                    }
                    GluOp::Geglu => {
                        out.copy_from_slice(xs);
                        gelu_row(out, &mut halves);
                        out.iter_mut().zip(gs).for_each(|(o, gv)| *o *= gv);
                    }
                    GluOp::SwigluOai { alpha, limit } => {
                        for ((o, xv), gv) in out.iter_mut().zip(xs).zip(gs) {
                            *o = swiglu_oai(*xv, *gv, alpha, limit);
                        }
                    }
                }
                // SAFETY: as above.
                unsafe { dst.store_row(i1, i2, i3, out) };
            }
        });
    });
}

/// `a[:, e, t] + b[:, ids[e, t]]` (ggml's `add_id`: a bias per selected
/// expert); an id outside b's rows is an error and nothing is written.
pub fn add_id(dst: TRef, a: TRef, b: TRef, ids: TRef) -> Result<()> {
    check_indices("add_id", ids, b.ne[1])?;
    let n = dst.ne[0];
    par_ranges(dst.nrows(), MIN_ROWS, |rows| {
        with_rows(2 * n, |buf| {
            let (x, bias) = buf.split_at_mut(n);
            for r in rows {
                let (i1, i2, i3) = dst.row_coords(r);
                // SAFETY: rows in bounds and the id checked; this task
                // owns dst row r.
                unsafe {
                    a.load_row(i1, i2, i3, x);
                    let e = ids.get_i32([i1, i2, 0, 0]) as usize;
                    b.load_row(e, 0, 0, bias);
                    x.iter_mut().zip(&*bias).for_each(|(v, w)| *v += w);
                    dst.store_row(i1, i2, i3, x);
                }
            }
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row kernel takes every value as [`gelu`] does: every f16
    /// value, the edges at ±10 and values between f16 steps.
    #[test]
    fn a_gelu_row_is_gelu_of_each_value() {
        let mut xs: Vec<f32> = (0..=u16::MAX)
            .map(|b| half::f16::from_bits(b).to_f32())
            .filter(|x| !x.is_nan())
            .collect();
        xs.extend([-10.0, 10.0, -10.000001, 9.999999, 1.0e-3 / 3.0, -1.9994075]);
        let want: Vec<f32> = xs.iter().map(|&x| gelu(x)).collect();
        let mut got = xs.clone();
        let mut halves = vec![half::f16::ZERO; got.len()];
        gelu_row(&mut got, &mut halves);
        for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
            assert_eq!(g.to_bits(), w.to_bits(), "gelu({x})");
        }
    }
}
