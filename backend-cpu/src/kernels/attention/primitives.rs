//! The pieces both attention loops use: the call's parameters, the
//! multiply-add of the instruction set, a dot product and a row prefetch.

use crate::kernels::tensor_ref::TRef;

/// Value columns accumulated in registers at once.
pub(super) const ACC_W: usize = 64;

/// The scalar parameters of one call, and its attention sinks.
#[derive(Clone, Copy)]
pub(super) struct Params {
    pub(super) scale: f32,
    pub(super) max_bias: f32,
    pub(super) softcap: f32,
    /// One logit per query head (gpt-oss), where the call has them.
    pub(super) sinks: Option<TRef>,
}

impl Params {
    /// Head `h`'s attention sink, where the call has sinks.
    pub(super) fn sink(&self, h: usize) -> Option<f32> {
        // SAFETY: one packed F32 value per head (checked by the builder).
        self.sinks.map(|s| unsafe { *(s.ptr as *const f32).add(h) })
    }
}

/// A sink's logit `s` joined to one query's online softmax (its running
/// maximum, sum of exponentials and weighted values), as ggml joins it
/// after the keys: it raises the maximum or adds its exponential to the
/// sum, and adds no value. `M` rescales the sum: ggml's compiler fuses
/// that step in its tiled kernel and not after its one-query loop.
pub(super) fn join_sink<M: MulAdd>(s: f32, max: &mut f32, sum: &mut f32, values: &mut [f32]) {
    let (mut ms, mut vs) = (1f32, 1f32);
    if s > *max {
        ms = (*max - s).exp();
        *max = s;
        values.iter_mut().for_each(|v| *v *= ms);
    } else {
        vs = (s - *max).exp();
    }
    *sum = M::mul_add(*sum, ms, vs);
}

/// Starts loading row (i1, i2, i3) of `t` into the cache.
#[inline]
pub(super) fn prefetch_row(t: TRef, i1: usize, i2: usize, i3: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let bytes = t.dtype.row_size(t.ne[0]).unwrap_or(0);
        let p = t.row_ptr(i1, i2, i3);
        for off in (0..bytes).step_by(64) {
            // SAFETY: a prefetch never faults; the address is in the row.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (t, i1, i2, i3);
}

/// Multiply-add: fused where the instruction set has it, else a multiply
/// and an add (a fused call there would go through libm).
pub(super) trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

pub(super) struct Fused;
pub(super) struct Separate;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// Dot product with 16 independent partial sums, so that it vectorises
/// without reassociating a single running sum.
#[inline(always)]
pub(super) fn dot<M: MulAdd>(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let n = a.len().min(b.len());
    let mut part = [0f32; L];
    let split = n - n % L;
    for (ca, cb) in a[..split].chunks_exact(L).zip(b[..split].chunks_exact(L)) {
        for l in 0..L {
            part[l] = M::mul_add(ca[l], cb[l], part[l]);
        }
    }
    let mut total = 0f32;
    for (x, y) in a[split..n].iter().zip(&b[split..n]) {
        total += x * y;
    }
    total + part.iter().sum::<f32>()
}
