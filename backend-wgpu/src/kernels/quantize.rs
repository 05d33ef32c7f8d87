//! Quantisation of one block on the device, for copies into quantised
//! tensors: the same algorithms, step for step, as the reference in
//! `ggraph_core::quant` (and so as ggml), so that results match it.
//!
//! Each generated `quant_block(x, o)` reads the block's values from
//! `x[0..block_size]` and writes its bytes to `o[0..type_size]` (one byte
//! per array entry).

use ggraph_core::DType;

const Q8_0: &str = r#"
fn round_away(v: f32) -> f32 { return sign(v) * floor(abs(v) + 0.5); }
fn quant_block(x: ptr<function, array<f32, 256>>, o: ptr<function, array<u32, 212>>) {
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) { amax = max(amax, abs((*x)[i])); }
    let d = amax / 127.0;
    var id = 0.0;
    if (d != 0.0) { id = 1.0 / d; }
    let dh = f32_to_f16(d);
    (*o)[0] = dh & 0xffu;
    (*o)[1] = dh >> 8u;
    for (var i = 0u; i < 32u; i++) {
        (*o)[2u + i] = bitcast<u32>(i32(round_away((*x)[i] * id))) & 0xffu;
    }
}
"#;

const Q4_0: &str = r#"
fn quant_block(x: ptr<function, array<f32, 256>>, o: ptr<function, array<u32, 212>>) {
    var mx = 0.0;
    for (var i = 0u; i < 32u; i++) {
        let v = (*x)[i];
        if (abs(v) > abs(mx)) { mx = v; }
    }
    let d = mx / -8.0;
    var id = 0.0;
    if (d != 0.0) { id = 1.0 / d; }
    let dh = f32_to_f16(d);
    (*o)[0] = dh & 0xffu;
    (*o)[1] = dh >> 8u;
    for (var j = 0u; j < 16u; j++) {
        let c0 = u32(clamp(i32((*x)[j] * id + 8.5), 0, 15));
        let c1 = u32(clamp(i32((*x)[j + 16u] * id + 8.5), 0, 15));
        (*o)[2u + j] = c0 | (c1 << 4u);
    }
}
"#;

const Q4_K: &str = r#"
var<private> codes: array<u32, 256>;
var<private> trial: array<u32, 32>;
// fits codes * scale - shift to x[base..base + 32] (ggml's make_qkx2_quants)
fn fit_scale_min(x: ptr<function, array<f32, 256>>, base: u32, w: ptr<function, array<f32, 32>>) -> vec2<f32> {
    let nmax = 15;
    var mn = (*x)[base];
    var mx = (*x)[base];
    var sum_w = 0.0;
    var sum_x = 0.0;
    for (var i = 0u; i < 32u; i++) {
        let v = (*x)[base + i];
        mn = min(mn, v);
        mx = max(mx, v);
        sum_w += (*w)[i];
        sum_x += (*w)[i] * v;
    }
    if (mn > 0.0) { mn = 0.0; }
    if (mx == mn) {
        for (var i = 0u; i < 32u; i++) { codes[base + i] = 0u; }
        return vec2<f32>(0.0, -mn);
    }
    var iscale = f32(nmax) / (mx - mn);
    var scale = 1.0 / iscale;
    var best_error = 0.0;
    for (var i = 0u; i < 32u; i++) {
        let v = (*x)[base + i];
        let l = clamp(i32(round(iscale * (v - mn))), 0, nmax);
        codes[base + i] = u32(l);
        let diff = scale * f32(l) + mn - v;
        best_error += (*w)[i] * diff * diff;
    }
    for (var step = 0; step <= 20; step++) {
        iscale = (-1.0 + 0.1 * f32(step) + f32(nmax)) / (mx - mn);
        var sum_l = 0.0;
        var sum_l2 = 0.0;
        var sum_xl = 0.0;
        for (var i = 0u; i < 32u; i++) {
            let v = (*x)[base + i];
            let l = clamp(i32(round(iscale * (v - mn))), 0, nmax);
            trial[i] = u32(l);
            let lf = f32(l);
            sum_l += (*w)[i] * lf;
            sum_l2 += (*w)[i] * lf * lf;
            sum_xl += (*w)[i] * lf * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0.0) {
            var this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            var this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0.0) {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            var err = 0.0;
            for (var i = 0u; i < 32u; i++) {
                let diff = this_scale * f32(trial[i]) + this_min - (*x)[base + i];
                err += (*w)[i] * diff * diff;
            }
            if (err < best_error) {
                for (var i = 0u; i < 32u; i++) { codes[base + i] = trial[i]; }
                best_error = err;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    return vec2<f32>(scale, -mn);
}
fn packed_scale_min(o: ptr<function, array<u32, 212>>, j: u32) -> vec2<u32> {
    if (j < 4u) { return vec2<u32>((*o)[4u + j] & 63u, (*o)[8u + j] & 63u); }
    return vec2<u32>(((*o)[8u + j] & 15u) | (((*o)[j] >> 6u) << 4u),
                     ((*o)[8u + j] >> 4u) | (((*o)[4u + j] >> 6u) << 4u));
}
fn quant_block(x: ptr<function, array<f32, 256>>, o: ptr<function, array<u32, 212>>) {
    var scales: array<f32, 8>;
    var mins: array<f32, 8>;
    var w: array<f32, 32>;
    for (var j = 0u; j < 8u; j++) {
        var ss = 0.0;
        for (var i = 0u; i < 32u; i++) { let v = (*x)[32u * j + i]; ss += v * v; }
        let av_x = sqrt(ss / 32.0);
        for (var i = 0u; i < 32u; i++) { w[i] = av_x + abs((*x)[32u * j + i]); }
        let f = fit_scale_min(x, 32u * j, &w);
        scales[j] = f.x;
        mins[j] = f.y;
    }
    var max_scale = 0.0;
    var max_min = 0.0;
    for (var j = 0u; j < 8u; j++) {
        max_scale = max(max_scale, scales[j]);
        max_min = max(max_min, mins[j]);
    }
    var inv_scale = 0.0;
    if (max_scale > 0.0) { inv_scale = 63.0 / max_scale; }
    var inv_min = 0.0;
    if (max_min > 0.0) { inv_min = 63.0 / max_min; }
    for (var i = 0u; i < 144u; i++) { (*o)[i] = 0u; }
    for (var j = 0u; j < 8u; j++) {
        let ls = u32(clamp(i32(round(inv_scale * scales[j])), 0, 63));
        let lm = u32(clamp(i32(round(inv_min * mins[j])), 0, 63));
        if (j < 4u) {
            (*o)[4u + j] = ls;
            (*o)[8u + j] = lm;
        } else {
            (*o)[8u + j] = (ls & 15u) | ((lm & 15u) << 4u);
            (*o)[j] |= (ls >> 4u) << 6u;
            (*o)[4u + j] |= (lm >> 4u) << 6u;
        }
    }
    let d16 = f32_to_f16(max_scale / 63.0);
    let dmin16 = f32_to_f16(max_min / 63.0);
    let d = f16_to_f32(d16);
    let dmin = f16_to_f32(dmin16);
    for (var j = 0u; j < 8u; j++) {
        let sm = packed_scale_min(o, j);
        let dj = d * f32(sm.x);
        if (dj == 0.0) { continue; }
        let mj = dmin * f32(sm.y);
        for (var i = 32u * j; i < 32u * j + 32u; i++) {
            codes[i] = u32(clamp(i32(round(((*x)[i] + mj) / dj)), 0, 15));
        }
    }
    (*o)[0] = d16 & 0xffu;
    (*o)[1] = d16 >> 8u;
    (*o)[2] = dmin16 & 0xffu;
    (*o)[3] = dmin16 >> 8u;
    for (var g = 0u; g < 4u; g++) {
        for (var l = 0u; l < 32u; l++) {
            (*o)[16u + 32u * g + l] = codes[64u * g + l] | (codes[64u * g + l + 32u] << 4u);
        }
    }
}
"#;

const Q6_K: &str = r#"
var<private> codes: array<u32, 256>;
// symmetric fit of x[base..base + 16] weighted by x^2 (ggml's make_qx_quants)
fn q6_code(iscale: f32, v: f32) -> i32 { return clamp(i32(round(iscale * v)), -32, 31); }
fn fit_symmetric(x: ptr<function, array<f32, 256>>, base: u32) -> f32 {
    var mx = 0.0;
    var amax = 0.0;
    for (var i = 0u; i < 16u; i++) {
        let v = (*x)[base + i];
        if (abs(v) > amax) { amax = abs(v); mx = v; }
    }
    if (amax < 1e-15) {
        for (var i = 0u; i < 16u; i++) { codes[base + i] = 0u; }
        return 0.0;
    }
    var iscale = -32.0 / mx;
    var sumlx = 0.0;
    var suml2 = 0.0;
    for (var i = 0u; i < 16u; i++) {
        let v = (*x)[base + i];
        let l = q6_code(iscale, v);
        codes[base + i] = u32(l + 32);
        let w = v * v;
        sumlx += w * v * f32(l);
        suml2 += w * f32(l) * f32(l);
    }
    var scale = 0.0;
    if (suml2 != 0.0) { scale = sumlx / suml2; }
    var best = scale * sumlx;
    for (var step = -9; step <= 9; step++) {
        if (step == 0) { continue; }
        iscale = -(32.0 + 0.1 * f32(step)) / mx;
        var sx = 0.0;
        var s2 = 0.0;
        for (var i = 0u; i < 16u; i++) {
            let v = (*x)[base + i];
            let l = f32(q6_code(iscale, v));
            let w = v * v;
            sx += w * v * l;
            s2 += w * l * l;
        }
        if (s2 > 0.0 && sx * sx > best * s2) {
            for (var i = 0u; i < 16u; i++) {
                codes[base + i] = u32(q6_code(iscale, (*x)[base + i]) + 32);
            }
            scale = sx / s2;
            best = scale * sx;
        }
    }
    return scale;
}
fn quant_block(x: ptr<function, array<f32, 256>>, o: ptr<function, array<u32, 212>>) {
    var scales: array<f32, 16>;
    var max_scale = 0.0;
    var max_abs = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let s = fit_symmetric(x, 16u * j);
        scales[j] = s;
        if (abs(s) > max_abs) { max_abs = abs(s); max_scale = s; }
    }
    for (var i = 0u; i < 210u; i++) { (*o)[i] = 0u; }
    if (max_abs < 1e-15) { return; }
    let iscale = -128.0 / max_scale;
    let d16 = f32_to_f16(1.0 / iscale);
    let d = f16_to_f32(d16);
    (*o)[208] = d16 & 0xffu;
    (*o)[209] = d16 >> 8u;
    for (var j = 0u; j < 16u; j++) {
        let s = min(i32(round(iscale * scales[j])), 127);
        (*o)[192u + j] = bitcast<u32>(s) & 0xffu;
        let dj = d * f32(s);
        if (dj == 0.0) { continue; }
        for (var i = 16u * j; i < 16u * j + 16u; i++) {
            codes[i] = u32(clamp(i32(round((*x)[i] / dj)), -32, 31) + 32);
        }
    }
    for (var h = 0u; h < 2u; h++) {
        for (var l = 0u; l < 32u; l++) {
            let c0 = codes[128u * h + l];
            let c1 = codes[128u * h + l + 32u];
            let c2 = codes[128u * h + l + 64u];
            let c3 = codes[128u * h + l + 96u];
            (*o)[64u * h + l] = (c0 & 15u) | ((c2 & 15u) << 4u);
            (*o)[64u * h + l + 32u] = (c1 & 15u) | ((c3 & 15u) << 4u);
            (*o)[128u + 32u * h + l] = (c0 >> 4u) | ((c1 >> 4u) << 2u) | ((c2 >> 4u) << 4u) | ((c3 >> 4u) << 6u);
        }
    }
}
"#;

/// WGSL of `quant_block` for a quantised type, if the device quantises
/// it.
pub(crate) fn quant_block(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::Q8_0 => Some(Q8_0),
        DType::Q4_0 => Some(Q4_0),
        DType::Q4_K => Some(Q4_K),
        DType::Q6_K => Some(Q6_K),
        DType::F32
        | DType::F16
        | DType::BF16
        | DType::I32
        | DType::Q4_1
        | DType::Q5_0
        | DType::Q5_1
        | DType::Q2_K
        | DType::Q3_K
        | DType::Q5_K
        | DType::IQ4_NL
        | DType::IQ4_XS
        | DType::MXFP4 => None,
    }
}
