//! Row reductions: rms_norm, norm, soft_max.

use super::alibi::alibi_slope;
use super::math;
use super::parallel::par_ranges;
use super::scratch::with_rows;
use crate::kernels::tensor_ref::TRef;

fn rows(dst: TRef, a: TRef, f: impl Fn(&mut [f32], (usize, usize, usize)) + Sync + Send) {
    let n0 = dst.ne[0];
    if n0 == 0 {
        return;
    }
    par_ranges(dst.nrows(), 4, |range| {
        with_rows(n0, |x| {
            for r in range {
                let c = dst.row_coords(r);
                // SAFETY: rows in bounds; this task owns dst row r.
                unsafe { a.load_row(c.0, c.1, c.2, x) };
                f(x, c);
                // SAFETY: as above.
                unsafe { dst.store_row(c.0, c.1, c.2, x) };
            }
        })
    });
}

/// The f64 sum of `f(v)` over `x`, in eight lanes: one running sum is a
/// chain of dependent additions, eight are vectorised (measured faster
/// per row; docs/performance.md).
#[inline]
fn lane_sum(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    const LANES: usize = 8;
    let mut lanes = [0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += f(*v as f64);
        }
    }
    lanes.iter().sum::<f64>() + tail.iter().map(|v| f(*v as f64)).sum::<f64>()
}

/// ggml's arithmetic, so that the same row gives the same bits (a norm
/// feeds quantised products, whose 8-bit rounding turns one ulp into a
/// code): the squares in f32, summed in f64, the mean rounded to f32 and
/// the scale `1 / sqrt(mean + eps)` in f32.
pub fn rms_norm(dst: TRef, a: TRef, eps: f32) {
    rows(dst, a, |x, _| {
        let ss = lane_sum(x, |v| ((v as f32) * (v as f32)) as f64);
        let mean = (ss / x.len() as f64) as f32;
        let s = 1.0 / (mean + eps).sqrt();
        x.iter_mut().for_each(|v| *v *= s);
    });
}

/// LayerNorm without its weight, in ggml's arithmetic (its AVX2 build's
/// `ggml_vec_cvar_f32`): the mean of the f64 sum rounded to f32, each
/// value minus the mean in f32, the squares of each group of eight summed
/// as its horizontal add pairs them and added in f64, the rest one by one,
/// and every value times the f32 `1 / sqrt(variance + eps)`.
pub fn norm(dst: TRef, a: TRef, eps: f32) {
    rows(dst, a, |x, _| {
        let n = x.len();
        let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
        let mean = sum as f32 / n as f32;
        let whole = n - n % 8;
        let (groups, rest) = x.split_at_mut(whole);
        let mut var = 0f64;
        for g in groups.chunks_exact_mut(8) {
            g.iter_mut().for_each(|v| *v -= mean);
            let sq: [f32; 8] = std::array::from_fn(|i| g[i] * g[i]);
            let pairs: [f32; 4] = std::array::from_fn(|i| sq[i + 4] + sq[i]);
            var += f64::from((pairs[0] + pairs[2]) + (pairs[1] + pairs[3]));
        }
        for v in rest {
            *v -= mean;
            var += f64::from(*v * *v);
        }
        let variance = (var / n as f64) as f32;
        let scale = 1.0 / (variance + eps).sqrt();
        x.iter_mut().for_each(|v| *v *= scale);
    });
}

/// In-place softmax of a row, bit for bit as ggml computes it: the
/// exponentials of whole groups of eight from its vector form, each
/// group's sum (its lanes paired as ggml's horizontal add pairs them)
/// added in f64, the rest from libm one by one, and every value times the
/// f32 of the f64 reciprocal. A row with no finite value becomes zeros.
/// With a `sink` (an attention sink's logit), the sink joins the row's
/// maximum and its sum of exponentials, as ggml's soft_max adds it.
pub fn softmax_row(x: &mut [f32], sink: Option<f32>) {
    #[cfg(target_arch = "x86_64")]
    if super::isa::active() >= super::isa::Isa::Avx2 {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn fma(x: &mut [f32], sink: Option<f32>) {
            softmax_row_body(x, sink)
        }
        // SAFETY: the AVX2 level includes FMA (checked by `active`).
        return unsafe { fma(x, sink) };
    }
    softmax_row_body(x, sink)
}

#[inline(always)]
fn softmax_row_body(x: &mut [f32], sink: Option<f32>) {
    let mut max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if let Some(sink) = sink {
        // ggml's MAX(max, sink)
        max = if max > sink { max } else { sink };
    }
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return;
    }
    let whole = x.len() - x.len() % 8;
    let (groups, rest) = x.split_at_mut(whole);
    let mut sum = 0f64;
    for g in groups.chunks_exact_mut(8) {
        g.iter_mut().for_each(|v| *v = math::ggml_exp(*v - max));
        sum += (((g[0] + g[4]) + (g[2] + g[6])) + ((g[1] + g[5]) + (g[3] + g[7]))) as f64;
    }
    for v in rest {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    if let Some(sink) = sink {
        sum += (sink - max).exp() as f64;
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// softmax(a * scale + mask * slope) along rows, with `sinks` (F32, one
/// per head `i2`) joining each row's maximum and sum.
pub fn soft_max(
    dst: TRef,
    a: TRef,
    mask: Option<TRef>,
    sinks: Option<TRef>,
    scale: f32,
    max_bias: f32,
) {
    let n_head = dst.ne[2];
    let n0 = dst.ne[0];
    rows(dst, a, |x, (i1, i2, i3)| {
        x.iter_mut().for_each(|v| *v *= scale);
        if let Some(m) = mask {
            let slope = alibi_slope(max_bias, n_head, i2);
            let mut mrow = vec![0f32; n0];
            // SAFETY: mask row in bounds (checked by the builder).
            unsafe { m.load_row(i1, i2 % m.ne[2], i3 % m.ne[3], &mut mrow) };
            if slope == 1.0 {
                // the fused form's result, without a libm call per value
                x.iter_mut().zip(&mrow).for_each(|(v, mv)| *v += mv);
            } else {
                // fused, as GCC fuses ggml's `wp[i] += slope*mp[i]`
                x.iter_mut()
                    .zip(&mrow)
                    .for_each(|(v, mv)| *v = slope.mul_add(*mv, *v));
            }
        }
        // SAFETY: one packed value per head (checked by the builder).
        let sink = sinks.map(|s| unsafe { *(s.ptr as *const f32).add(i2) });
        softmax_row(x, sink);
    });
}
