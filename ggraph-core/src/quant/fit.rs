//! Least-squares fits of a group of values to integer codes and a scale,
//! shared by the K-quant and IQ4 reference quantisers.

/// Rounds half to even, as ggml's `nearest_int` does for the K-quants.
#[inline]
pub(super) fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// Below this magnitude a group quantises to zeros.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;
/// Most values one fit takes.
const MAX_GROUP: usize = 32;

/// The candidate scales [`fit_scale_min`] tries.
#[derive(Clone, Copy)]
pub(super) struct ScaleSearch {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
}

/// Fits `codes * scale - min_shift` to `x` with codes in 0..=nmax, by a
/// weighted least-squares search over a few candidate scales (ggml's
/// `make_qkx2_quants`): the inverse scales tried are
/// `(nmax + search.rmin + search.rdelta * step) / (max - min)` for steps
/// 0..=nstep. Returns `(scale, min_shift)`; min_shift >= 0. At most 32
/// values.
pub(super) fn fit_scale_min(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    search: ScaleSearch,
    codes: &mut [u8],
) -> (f32, f32) {
    debug_assert!(x.len() <= MAX_GROUP);

    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = 0f32;
    let mut sum_x = 0f32;
    for (v, w) in x.iter().zip(weights) {
        min = min.min(*v);
        max = max.max(*v);
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        codes.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for ((v, w), c) in x.iter().zip(weights).zip(codes.iter_mut()) {
        let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
        *c = l as u8;
        let diff = scale * l as f32 + min - v;
        best_error += w * diff * diff;
    }
    let mut trial = [0u8; MAX_GROUP];
    for step in 0..=search.nstep {
        iscale = (search.rmin + search.rdelta * step as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((v, w), t) in x.iter().zip(weights).zip(trial.iter_mut()) {
            let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
            *t = l as u8;
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut err = 0f32;
            for ((v, w), t) in x.iter().zip(weights).zip(&trial) {
                let diff = this_scale * *t as f32 + this_min - v;
                err += w * diff * diff;
            }
            if err < best_error {
                codes[..x.len()].copy_from_slice(&trial[..x.len()]);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Symmetric fit of `x` to codes in -nmax..nmax-1 weighted by x², trying a
/// few scales around the first guess (ggml's `make_qx_quants`, rmse type 1).
/// Returns the scale; codes are stored offset by nmax.
pub(super) fn fit_symmetric(x: &[f32], nmax: i32, codes: &mut [u8]) -> f32 {
    let mut max = 0f32;
    let mut amax = 0f32;
    for v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = *v;
        }
    }
    if amax < GROUP_MAX_EPS {
        codes.fill(0);
        return 0.0;
    }
    let code = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for v in x {
            let l = code(iscale, *v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let iscale = -(nmax as f32) / max;
    for (c, v) in codes.iter_mut().zip(x) {
        *c = (code(iscale, *v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in -9..=9 {
        if step == 0 {
            continue;
        }
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (c, v) in codes.iter_mut().zip(x) {
                *c = (code(iscale, *v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}
