//! flash_attn_ext as ggml's CPU computes it, bit for bit, for F32 queries
//! and F16 keys and values (llama.cpp's default cache). ggml picks one of
//! three algorithms, and so does this module:
//!
//! - **one query at a time** (fewer than [`TILE_Q`] queries): the query
//!   rounded to F16; per key, its score by `ggml_vec_dot_f16`
//!   (`kernels::half_dot`), scaled, capped, masked; an online softmax with
//!   libm's `expf`, whose weighted sum of values is kept in F16 (each
//!   update `f16(fma(v, w, acc))`, each rescale `f16(acc * m)`) and the
//!   running sum as `fma(sum, m, w)`;
//! - **tiles** ([`TILE_Q`] queries or more): the query in F32; keys in
//!   tiles of [`TILE_KV`], each score summed over the dimensions in order
//!   (`fma(k, q, acc)`), scaled, capped and masked; per tile, the new
//!   maximum rescales the F32 sum of values, the tile's exponentials come
//!   from ggml's vectorised `expf` (softmax's `ggml_exp`) and their sum,
//!   in f64, is added to the running one; the values are added key by key
//!   in order;
//! - **keys split over the threads** (one query, [`SPLIT_KV_MIN`] keys or
//!   more): each thread's share of the keys as the first algorithm, and
//!   the shares merged in order, `acc * e^(m - m') + share * e^(m_s - m')`.
//!
//! Which threads ggml splits the keys over changes the result, so the last
//! takes as many shares as the team has threads: with llama.cpp's thread
//! count, its result.

use std::cell::RefCell;

use ggraph_core::DType;
use ggraph_core::quant::{f16_to_f32, f32_to_f16};

use super::primitives::{Fused, MulAdd, Params, Separate, join_sink};
use crate::kernels::alibi::alibi_slope;
use crate::kernels::half_dot::{HalfDot, half_dot};
use crate::kernels::isa::{Isa, active};
use crate::kernels::math::ggml_exp;
use crate::kernels::parallel::par_ranges;
use crate::kernels::tensor_ref::TRef;
use crate::team;

/// Queries from which ggml takes the tiles (`GGML_FA_TILE_Q`).
const TILE_Q: usize = 64;
/// Keys per tile (`GGML_FA_TILE_KV`).
const TILE_KV: usize = 64;
/// Queries of a tile scored side by side.
const GROUP: usize = 4;
/// Keys from which one query's attention splits over the threads.
const SPLIT_KV_MIN: usize = 512;

/// Whether ggml's algorithms take these operands: F32 queries, F16 keys
/// and values, each row's values side by side.
pub(super) fn takes(q: TRef, k: TRef, v: TRef) -> bool {
    q.dtype == DType::F32
        && k.dtype == DType::F16
        && v.dtype == DType::F16
        && q.rows_packed()
        && k.rows_packed()
        && v.rows_packed()
}

/// What every query of a call shares.
#[derive(Clone, Copy)]
struct Call {
    q: TRef,
    k: TRef,
    v: TRef,
    mask: Option<TRef>,
    /// The scores' scale (divided by the cap where there is one, as ggml
    /// divides it).
    scale: f32,
    softcap: f32,
    max_bias: f32,
    dot: HalfDot,
    isa: Isa,
    /// The call's parameters as given (its sinks).
    params: Params,
}

/// One query's attention over some keys, not yet divided by its sum: the
/// maximum score, the sum of exponentials and the weighted sum of values.
struct Partial {
    max: f32,
    sum: f32,
    values: Vec<f32>,
}

pub(super) fn flash_attn_ext(dst: TRef, q: TRef, k: TRef, v: TRef, mask: Option<TRef>, p: Params) {
    let (n_q, n_head, n_seq, n_kv) = (q.ne[1], q.ne[2], q.ne[3], k.ne[1]);
    let isa = active();
    let call = Call {
        q,
        k,
        v,
        mask,
        scale: if p.softcap != 0.0 {
            p.scale / p.softcap
        } else {
            p.scale
        },
        softcap: p.softcap,
        max_bias: p.max_bias,
        dot: half_dot(isa),
        isa,
        params: p,
    };
    if n_q == 1 && n_seq == 1 && n_kv >= SPLIT_KV_MIN {
        return keys_split(dst, &call);
    }
    if n_q >= TILE_Q {
        let tiles = n_q.div_ceil(TILE_Q);
        return par_ranges(tiles * n_head * n_seq, 1, |range| {
            for t in range {
                let (tile, h, is) = (t % tiles, t / tiles % n_head, t / (tiles * n_head));
                let rows = tile * TILE_Q..((tile + 1) * TILE_Q).min(n_q);
                for (iq, part) in rows.clone().zip(tiled(&call, rows, h, is)) {
                    finish(dst, with_sink::<Fused>(&call, part, h), h, iq, is);
                }
            }
        });
    }
    par_ranges(n_q * n_head * n_seq, 1, |range| {
        for r in range {
            let (iq, h, is) = (r % n_q, r / n_q % n_head, r / (n_q * n_head));
            let part = one_query(&call, iq, h, is, 0..n_kv);
            finish(dst, with_sink::<Separate>(&call, part, h), h, iq, is);
        }
    });
}

/// Head `h`'s sink, where the call has sinks, joined to a query's partial
/// after its keys (in ggml's split over the keys, to the first share's),
/// the sum rescaled as `M` says ([`join_sink`]).
fn with_sink<M: MulAdd>(c: &Call, mut part: Partial, h: usize) -> Partial {
    if let Some(s) = c.params.sink(h) {
        join_sink::<M>(s, &mut part.max, &mut part.sum, &mut part.values);
    }
    part
}

/// Divides a query's values by its sum and stores them: dst row (h, iq,
/// is), written by this task only.
fn finish(dst: TRef, mut part: Partial, h: usize, iq: usize, is: usize) {
    let inv = if part.sum == 0.0 { 0.0 } else { 1.0 / part.sum };
    part.values.iter_mut().for_each(|x| *x *= inv);
    // SAFETY: row (h, iq, is) of dst, this task's alone.
    unsafe { dst.store_row(h, iq, is, &part.values) };
}

/// The key and value head a query head reads.
fn kv_heads(c: &Call, h: usize) -> (usize, usize) {
    let n_head = c.q.ne[2];
    (
        h / (n_head / c.k.ne[2]).max(1),
        h / (n_head / c.v.ne[2]).max(1),
    )
}

/// Row `iq` of the mask for head `h` of sequence `is`, times the head's
/// ALiBi slope, into `out` (none without a mask).
fn mask_row(c: &Call, iq: usize, h: usize, is: usize, out: &mut Vec<f32>) -> bool {
    let Some(m) = c.mask else { return false };
    out.resize(m.ne[0], 0.0);
    // SAFETY: mask rows in bounds (checked by the builder).
    unsafe { m.load_row(iq, h % m.ne[2], is % m.ne[3], out) };
    let slope = alibi_slope(c.max_bias, c.q.ne[2], h);
    if slope != 1.0 {
        out.iter_mut().for_each(|x| *x *= slope);
    }
    true
}

thread_local! {
    static ROWS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The first algorithm: query `iq` of head `h` and sequence `is` over
/// `keys`.
fn one_query(c: &Call, iq: usize, h: usize, is: usize, keys: std::ops::Range<usize>) -> Partial {
    #[cfg(target_arch = "x86_64")]
    if c.isa >= Isa::Avx2 {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2(
            c: &Call,
            iq: usize,
            h: usize,
            is: usize,
            keys: std::ops::Range<usize>,
        ) -> Partial {
            one_query_body::<true>(c, iq, h, is, keys)
        }
        // SAFETY: the AVX2 level includes FMA and F16C.
        return unsafe { avx2(c, iq, h, is, keys) };
    }
    one_query_body::<false>(c, iq, h, is, keys)
}

/// [`one_query`] with the AVX2 kernels inlined (`AVX2`: the caller is
/// compiled for AVX2, FMA and F16C) or the portable ones.
#[inline(always)]
fn one_query_body<const AVX2: bool>(
    c: &Call,
    iq: usize,
    h: usize,
    is: usize,
    keys: std::ops::Range<usize>,
) -> Partial {
    let (dk, dv) = (c.q.ne[0], c.v.ne[0]);
    let (hk, hv) = kv_heads(c, h);
    // the rows are taken out of the thread's scratch and put back, so that
    // the loop runs here, in the caller's instruction set, not in a
    // closure compiled without it (where the kernels below are calls)
    let (mut query, mut mask) = ROWS.with_borrow_mut(std::mem::take);
    query.resize(dk, 0.0);
    // SAFETY: query rows in bounds (checked by the builder).
    unsafe { c.q.load_row(iq, h, is, &mut query) };
    // the keys' dot takes the query in F16
    query
        .iter_mut()
        .for_each(|x| *x = f16_to_f32(f32_to_f16(*x)));
    let masked = mask_row(c, iq, h, is, &mut mask);
    let mut acc = vec![0f32; dv];
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    for ic in keys {
        let mv = if masked { mask[ic] } else { 0.0 };
        if mv == f32::NEG_INFINITY {
            continue;
        }
        // SAFETY: key row ic holds dk F16 values, the query dk.
        let mut s = unsafe { dot::<AVX2>(c, c.k.row_ptr(ic, hk, is), query.as_ptr(), dk) };
        s *= c.scale;
        if c.softcap != 0.0 {
            s = c.softcap * s.tanh();
        }
        s += mv;
        let (mut ms, mut vs) = (1f32, 1f32);
        if s > max {
            ms = (max - s).exp();
            max = s;
            scale_half::<AVX2>(&mut acc, ms);
        } else {
            vs = (s - max).exp();
        }
        // SAFETY: value row ic holds dv F16 values.
        unsafe { add_half::<AVX2>(&mut acc, c.v.row_ptr(ic, hv, is), vs) };
        sum = sum.mul_add(ms, vs);
    }
    ROWS.with_borrow_mut(|rows| *rows = (query, mask));
    Partial {
        max,
        sum,
        values: acc,
    }
}

/// A key's score: the AVX2 kernel inlined, or the call's kernel.
///
/// # Safety
/// The key row holds `dk` F16 values, the query `dk`; with `AVX2`, the
/// caller is compiled for AVX2, FMA and F16C.
#[inline(always)]
unsafe fn dot<const AVX2: bool>(c: &Call, key: *const u8, query: *const f32, dk: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: caller's contract.
        return unsafe { crate::kernels::half_dot::half_dot_avx2(key, query, dk) };
    }
    // SAFETY: caller's contract.
    unsafe { (c.dot)(key, query, dk) }
}

/// `acc = f16(acc * m)`, each value kept in F16 as ggml keeps it.
#[inline(always)]
fn scale_half<const AVX2: bool>(acc: &mut [f32], m: f32) {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: the caller is compiled for AVX2 and F16C.
        return unsafe { x86::scale_half(acc, m) };
    }
    acc.iter_mut()
        .for_each(|a| *a = f16_to_f32(f32_to_f16(*a * m)));
}

/// `acc = f16(fma(v, w, acc))` over a row of F16 values `v`.
///
/// # Safety
/// `v` holds `acc.len()` F16 values; with `AVX2`, the caller is compiled
/// for AVX2, FMA and F16C.
#[inline(always)]
unsafe fn add_half<const AVX2: bool>(acc: &mut [f32], v: *const u8, w: f32) {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: caller's contract.
        return unsafe { x86::add_half(acc, v, w) };
    }
    for (i, a) in acc.iter_mut().enumerate() {
        // SAFETY: value i of the row exists.
        let x = f16_to_f32(unsafe { (v as *const u16).add(i).read_unaligned() });
        *a = f16_to_f32(f32_to_f16(x.mul_add(w, *a)));
    }
}

/// The second algorithm: queries `rows` of head `h` and sequence `is`.
fn tiled(c: &Call, rows: std::ops::Range<usize>, h: usize, is: usize) -> Vec<Partial> {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn avx512(
            c: &Call,
            rows: std::ops::Range<usize>,
            h: usize,
            is: usize,
        ) -> Vec<Partial> {
            tiled_body(c, rows, h, is)
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2(
            c: &Call,
            rows: std::ops::Range<usize>,
            h: usize,
            is: usize,
        ) -> Vec<Partial> {
            tiled_body(c, rows, h, is)
        }
        if c.isa >= Isa::Avx512 {
            // SAFETY: the AVX-512 level includes AVX2, FMA and F16C.
            return unsafe { avx512(c, rows, h, is) };
        }
        if c.isa >= Isa::Avx2 {
            // SAFETY: the AVX2 level includes FMA and F16C.
            return unsafe { avx2(c, rows, h, is) };
        }
    }
    tiled_body(c, rows, h, is)
}

/// [`tiled`]'s loops, written lane by lane so that each instruction set's
/// wrapper vectorises them: the scores across a tile's keys (the keys
/// transposed, `[dimension][key]`, as ggml lays them out), the values
/// across their dimensions.
#[inline(always)]
fn tiled_body(c: &Call, rows: std::ops::Range<usize>, h: usize, is: usize) -> Vec<Partial> {
    let (dk, dv, n_kv) = (c.q.ne[0], c.v.ne[0], c.k.ne[1]);
    let (hk, hv) = kv_heads(c, h);
    let n = rows.len();
    let mut queries = vec![0f32; n * dk];
    let mut masks = Vec::new();
    let mut masked = false;
    for (i, iq) in rows.clone().enumerate() {
        // SAFETY: query rows in bounds (checked by the builder).
        unsafe { c.q.load_row(iq, h, is, &mut queries[i * dk..(i + 1) * dk]) };
        let mut row = Vec::new();
        masked = mask_row(c, iq, h, is, &mut row);
        masks.push(row);
    }
    let mut parts: Vec<Partial> = (0..n)
        .map(|_| Partial {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            values: vec![0f32; dv],
        })
        .collect();
    let mut key_row = vec![0f32; dk];
    let mut keys_t = vec![0f32; dk * TILE_KV];
    let mut values = vec![0f32; TILE_KV * dv];
    for ic in (0..n_kv).step_by(TILE_KV) {
        let nk = TILE_KV.min(n_kv - ic);
        // a tile no query sees is skipped
        if masked
            && masks
                .iter()
                .all(|m| m[ic..ic + nk].iter().all(|&x| x == f32::NEG_INFINITY))
        {
            continue;
        }
        keys_t.fill(0.0);
        for t in 0..nk {
            // SAFETY: key and value rows in bounds (checked by the builder).
            unsafe {
                c.k.load_row(ic + t, hk, is, &mut key_row);
                c.v.load_row(ic + t, hv, is, &mut values[t * dv..(t + 1) * dv]);
            }
            for (d, &x) in key_row.iter().enumerate() {
                keys_t[d * TILE_KV + t] = x;
            }
        }
        // four queries at a time, so that each key and value loaded serves
        // four sums and the sums overlap; each query's arithmetic is its own
        for (g, group) in parts.chunks_mut(GROUP).enumerate() {
            let i0 = g * GROUP;
            let mut scores = [[0f32; TILE_KV]; GROUP];
            let q: [&[f32]; GROUP] = std::array::from_fn(|r| {
                let i = i0 + r.min(group.len() - 1);
                &queries[i * dk..(i + 1) * dk]
            });
            score_group(c.isa, &keys_t, q, &mut scores);
            for (r, (part, row)) in group.iter_mut().zip(scores.iter_mut()).enumerate() {
                row.iter_mut().for_each(|s| *s *= c.scale);
                if c.softcap != 0.0 {
                    row.iter_mut().for_each(|s| *s = s.tanh() * c.softcap);
                }
                row[nk..].fill(f32::NEG_INFINITY);
                if masked {
                    for (s, &m) in row.iter_mut().zip(&masks[i0 + r][ic..ic + nk]) {
                        *s += m;
                    }
                }
                let tile_max = row.iter().copied().fold(f32::NEG_INFINITY, max_as_ggml);
                if tile_max == f32::NEG_INFINITY {
                    // as ggml: the query's weights are zero for this tile
                    row.fill(0.0);
                    continue;
                }
                let new_max = part.max.max(tile_max);
                if new_max > part.max {
                    let ms = (part.max - new_max).exp();
                    part.values.iter_mut().for_each(|x| *x *= ms);
                    part.sum *= ms;
                }
                part.max = new_max;
                let mut sum = 0f64;
                for g in row.chunks_exact_mut(8) {
                    g.iter_mut().for_each(|x| *x = ggml_exp(*x - new_max));
                    sum +=
                        (((g[0] + g[4]) + (g[2] + g[6])) + ((g[1] + g[5]) + (g[3] + g[7]))) as f64;
                }
                part.sum = (part.sum as f64 + sum) as f32;
            }
            let mut acc: Vec<&mut [f32]> =
                group.iter_mut().map(|p| p.values.as_mut_slice()).collect();
            add_values(c.isa, &values[..nk * dv], dv, &scores, &mut acc);
        }
    }
    parts
}

/// `scores[r][t] = fma(key t, query r, ...)` over the dimensions in
/// order, from zero: the keys transposed, `[dimension][key]`.
#[inline(always)]
fn score_group(isa: Isa, keys_t: &[f32], q: [&[f32]; GROUP], scores: &mut [[f32; TILE_KV]; GROUP]) {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        // SAFETY: the AVX-512 level; the keys hold `q[r].len()` rows of
        // TILE_KV values.
        return unsafe { x86::score_group(keys_t, q, scores) };
    }
    let _ = isa;
    for d in 0..q[0].len() {
        let keys = &keys_t[d * TILE_KV..(d + 1) * TILE_KV];
        for (row, q) in scores.iter_mut().zip(q) {
            for (s, &kv) in row.iter_mut().zip(keys) {
                *s = kv.mul_add(q[d], *s);
            }
        }
    }
}

/// `acc[r][e] = fma(value t [e], weights[r][t], acc[r][e])` for each key
/// `t` in order: `values` holds the keys' values, `dv` each.
#[inline(always)]
fn add_values(
    isa: Isa,
    values: &[f32],
    dv: usize,
    weights: &[[f32; TILE_KV]; GROUP],
    acc: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 && dv % 64 == 0 {
        // SAFETY: the AVX-512 level; whole rows of dv values.
        return unsafe { x86::add_values(values, dv, weights, acc) };
    }
    let _ = isa;
    for (t, value) in values.chunks_exact(dv).enumerate() {
        for (a, w) in acc.iter_mut().zip(weights) {
            for (a, x) in a.iter_mut().zip(value) {
                *a = x.mul_add(w[t], *a);
            }
        }
    }
}

/// ggml's `MAX(a, b)`: `a > b ? a : b`.
fn max_as_ggml(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// The third algorithm: one query of every head, the keys split into as
/// many shares as the team has threads.
fn keys_split(dst: TRef, c: &Call) {
    let (n_head, n_kv, dv) = (c.q.ne[2], c.k.ne[1], c.v.ne[0]);
    let shares = team::current_threads().max(1);
    let share = n_kv.div_ceil(shares);
    let mut partials: Vec<Option<Partial>> = (0..shares * n_head).map(|_| None).collect();
    team::for_each_chunk_mut(&mut partials, n_head, |s, out| {
        let keys = (s * share).min(n_kv)..((s + 1) * share).min(n_kv);
        if keys.is_empty() {
            return;
        }
        for (h, o) in out.iter_mut().enumerate() {
            let part = one_query(c, 0, h, 0, keys.clone());
            *o = Some(if s == 0 {
                with_sink::<Separate>(c, part, h)
            } else {
                part
            });
        }
    });
    for h in 0..n_head {
        let mut merged = Partial {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            values: vec![0f32; dv],
        };
        for s in 0..shares {
            let Some(p) = &partials[s * n_head + h] else {
                continue;
            };
            if p.sum == 0.0 {
                continue;
            }
            let new_max = merged.max.max(p.max);
            let (old_w, new_w) = ((merged.max - new_max).exp(), (p.max - new_max).exp());
            for (a, x) in merged.values.iter_mut().zip(&p.values) {
                *a = a.mul_add(old_w, x * new_w);
            }
            merged.sum = merged.sum.mul_add(old_w, p.sum * new_w);
            merged.max = new_max;
        }
        finish(dst, merged, h, 0, 0);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::kernels::half_dot::half_at;

    /// # Safety
    /// AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scale_half(acc: &mut [f32], m: f32) {
        let whole = acc.len() - acc.len() % 8;
        let mv = _mm256_set1_ps(m);
        for chunk in acc[..whole].chunks_exact_mut(8) {
            // SAFETY: eight floats.
            unsafe {
                let x = _mm256_mul_ps(_mm256_loadu_ps(chunk.as_ptr()), mv);
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
                _mm256_storeu_ps(chunk.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for a in &mut acc[whole..] {
            *a = round_half(*a * m);
        }
    }

    /// # Safety
    /// AVX2, FMA and F16C; `v` holds `acc.len()` F16 values.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn add_half(acc: &mut [f32], v: *const u8, w: f32) {
        let whole = acc.len() - acc.len() % 8;
        let wv = _mm256_set1_ps(w);
        for (i, chunk) in acc[..whole].chunks_exact_mut(8).enumerate() {
            // SAFETY: eight floats and eight halves.
            unsafe {
                let x = _mm256_cvtph_ps(_mm_loadu_si128(v.add(16 * i) as *const __m128i));
                let y = _mm256_fmadd_ps(x, wv, _mm256_loadu_ps(chunk.as_ptr()));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(y);
                _mm256_storeu_ps(chunk.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for (i, a) in acc.iter_mut().enumerate().skip(whole) {
            // SAFETY: value i exists.
            *a = round_half(unsafe { half_at(v, i) }.mul_add(w, *a));
        }
    }

    #[inline]
    #[target_feature(enable = "f16c")]
    fn round_half(x: f32) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
            _mm_set_ss(x),
        )))
    }

    /// [`super::score_group`] on AVX-512: four queries' 64 scores in
    /// sixteen registers.
    ///
    /// # Safety
    /// AVX-512 F; the keys hold `q[r].len()` rows of 64 values.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn score_group(
        keys_t: &[f32],
        q: [&[f32]; super::GROUP],
        scores: &mut [[f32; super::TILE_KV]; super::GROUP],
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; super::GROUP];
        for d in 0..q[0].len() {
            // SAFETY: row d of the keys holds 64 values.
            let k: [__m512; 4] = std::array::from_fn(|j| unsafe {
                _mm512_loadu_ps(keys_t.as_ptr().add(d * 64 + 16 * j))
            });
            for (acc, q) in acc.iter_mut().zip(q) {
                let qv = _mm512_set1_ps(q[d]);
                for (a, k) in acc.iter_mut().zip(k) {
                    *a = _mm512_fmadd_ps(k, qv, *a);
                }
            }
        }
        for (row, acc) in scores.iter_mut().zip(acc) {
            for (j, a) in acc.iter().enumerate() {
                // SAFETY: 16 floats into the row's 64.
                unsafe { _mm512_storeu_ps(row.as_mut_ptr().add(16 * j), *a) };
            }
        }
    }

    /// [`super::add_values`] on AVX-512, `dv` a multiple of 64: each group
    /// of 64 output values of the four queries held in sixteen registers
    /// across the keys.
    ///
    /// # Safety
    /// AVX-512 F; `values` holds whole rows of `dv` values; every `acc`
    /// row `dv`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn add_values(
        values: &[f32],
        dv: usize,
        weights: &[[f32; super::TILE_KV]; super::GROUP],
        acc: &mut [&mut [f32]],
    ) {
        let n = values.len() / dv;
        let rows = acc.len();
        for e0 in (0..dv).step_by(64) {
            let mut a = [[_mm512_setzero_ps(); 4]; super::GROUP];
            for (r, a) in a.iter_mut().enumerate().take(rows) {
                for (j, a) in a.iter_mut().enumerate() {
                    // SAFETY: 16 of the row's dv values.
                    *a = unsafe { _mm512_loadu_ps(acc[r].as_ptr().add(e0 + 16 * j)) };
                }
            }
            for t in 0..n {
                // SAFETY: 16 of value row t's dv values.
                let v: [__m512; 4] = std::array::from_fn(|j| unsafe {
                    _mm512_loadu_ps(values.as_ptr().add(t * dv + e0 + 16 * j))
                });
                for (a, w) in a.iter_mut().zip(weights) {
                    let wv = _mm512_set1_ps(w[t]);
                    for (a, v) in a.iter_mut().zip(v) {
                        *a = _mm512_fmadd_ps(v, wv, *a);
                    }
                }
            }
            for (r, a) in a.iter().enumerate().take(rows) {
                for (j, a) in a.iter().enumerate() {
                    // SAFETY: 16 of the row's dv values.
                    unsafe { _mm512_storeu_ps(acc[r].as_mut_ptr().add(e0 + 16 * j), *a) };
                }
            }
        }
    }
}
