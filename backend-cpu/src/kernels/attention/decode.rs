//! Attention for a few queries (generation). The keys are split into
//! ranges and one task takes a range for every head, so each task reads
//! whole K/V rows front to back (the heads of a cache row lie side by
//! side) instead of one head's slice of every row; the ranges' partial
//! softmax states are merged at the end.
//!
//! With F16 caches and head sizes of 64 or 128 on AVX-512 or AVX2 the
//! chunks are read straight from the cache (`f16_chunks`,
//! `f16_chunks_avx2`): scores and weighted values convert the rows in
//! registers, and a chunk's 16 scores come out of one lane-summing step
//! for the softmax update.

use std::cell::RefCell;

use super::super::isa::{Isa, active};
use super::super::math::exp_nonpositive as exp;
use super::primitives::{ACC_W, Fused, MulAdd, Params, Separate, dot, join_sink, prefetch_row};
use crate::kernels::tensor_ref::TRef;
use crate::team;

/// Keys per chunk: the unit the keys are split into among the tasks, and
/// the keys scored together.
const CHUNK: usize = 16;

thread_local! {
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::empty()) };
}

/// One task's working memory, reused between calls.
struct Scratch {
    /// Scaled queries: [head][query][d].
    q: Vec<f32>,
    /// One block of one mask row, times the head's slope.
    row: Vec<f32>,
    /// One chunk of every KV head: keys [CHUNK][heads][d], values [CHUNK][heads][dv].
    k: Vec<f32>,
    v: Vec<f32>,
    /// Scores, then exponentials, of one (head, query) over a block.
    s: Vec<f32>,
    /// The alibi slope of every head.
    slopes: Vec<f32>,
}

impl Scratch {
    const fn empty() -> Scratch {
        Scratch {
            q: Vec::new(),
            row: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            s: Vec::new(),
            slopes: Vec::new(),
        }
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// flash_attn_ext for `q.ne[1]` (a few) queries.
pub(super) fn decode(dst: TRef, q: TRef, k: TRef, v: TRef, mask: Option<TRef>, p: Params) {
    let (dv, n_kv) = (v.ne[0], k.ne[1]);
    let (n_q, n_head, n_seq) = (q.ne[1], q.ne[2], q.ne[3]);
    let blocks = n_kv.div_ceil(CHUNK);
    // the mask rows, [seq][mask head][query][key], and per sequence the
    // chunks some query sees: only those are split among the tasks
    let mask_heads = mask.map_or(1, |m| m.ne[2].min(n_head).max(1));
    let mut mask_values = Vec::new();
    let mut visible: Vec<Vec<usize>> = vec![(0..blocks).collect(); n_seq];
    if let Some(m) = mask {
        mask_values = vec![0f32; n_seq * mask_heads * n_q * n_kv];
        for (is, seen) in visible.iter_mut().enumerate() {
            let mut any = vec![false; blocks];
            for mh in 0..mask_heads {
                for i in 0..n_q {
                    let at = ((is * mask_heads + mh) * n_q + i) * n_kv;
                    let row = &mut mask_values[at..at + n_kv];
                    // SAFETY: mask rows in bounds (checked by the builder).
                    unsafe { m.load_row(i, mh, is % m.ne[3], row) };
                    for (b, block) in row.chunks(CHUNK).enumerate() {
                        any[b] |= block.iter().any(|&x| x != f32::NEG_INFINITY);
                    }
                }
            }
            seen.retain(|&b| any[b]);
        }
    }
    let most = visible.iter().map(Vec::len).max().unwrap_or(0).max(1);
    // the chunks cost the same, so one equal part per thread
    let parts = team::current_threads().clamp(1, most);
    let per = most.div_ceil(parts);
    // per (seq, part, head, query): the weighted value sum, the running
    // maximum and the sum of exponentials
    let state = dv + 2;
    let per_task = n_head * n_q * state;
    let mut partial = vec![0f32; n_seq * parts * per_task];
    let isa = active();
    let work = Work {
        q,
        k,
        v,
        p,
        mask: mask.map(|_| (mask_values.as_slice(), mask_heads)),
    };
    team::for_each_chunk_mut(&mut partial, per_task, |task, out| {
        let (part, is) = (task % parts, task / parts);
        let list = &visible[is];
        let mine = &list[(part * per).min(list.len())..((part + 1) * per).min(list.len())];
        SCRATCH.with_borrow_mut(|sc| work.run_part(isa, sc, is, mine, out));
    });
    let mut row = vec![0f32; dv];
    for is in 0..n_seq {
        for h in 0..n_head {
            for i in 0..n_q {
                let at = |part: usize| ((is * parts + part) * n_head + h) * n_q + i;
                let mut max = (0..parts)
                    .map(|t| partial[at(t) * state + dv])
                    .fold(f32::NEG_INFINITY, f32::max);
                row.fill(0.0);
                let mut sum = 0f32;
                if max != f32::NEG_INFINITY {
                    for t in 0..parts {
                        let s = &partial[at(t) * state..(at(t) + 1) * state];
                        let w = exp(s[dv] - max);
                        sum += s[dv + 1] * w;
                        row.iter_mut().zip(&s[..dv]).for_each(|(o, a)| *o += a * w);
                    }
                }
                if let Some(s) = p.sink(h) {
                    join_sink::<Fused>(s, &mut max, &mut sum, &mut row);
                }
                let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                row.iter_mut().for_each(|o| *o *= inv);
                // SAFETY: row (h, i, is) of dst, written by this thread only.
                unsafe { dst.store_row(h, i, is, &row) };
            }
        }
    }
}

/// Row `j` of sequence `is` of a K or V tensor, every head, as f32
/// ([head][width]): one conversion when the heads lie side by side.
fn load_heads(t: TRef, j: usize, is: usize, out: &mut [f32]) {
    let (width, heads) = (t.ne[0], t.ne[2]);
    let side_by_side = t.rows_packed() && t.dtype.row_size(width) == Some(t.nb[2]);
    if side_by_side {
        let all = TRef {
            ne: [width * heads, t.ne[1], 1, t.ne[3]],
            nb: [t.nb[0], t.nb[1], t.nb[2] * heads, t.nb[3]],
            ..t
        };
        // SAFETY: the heads' rows are contiguous, so row j of every head
        // is one run of width * heads values inside the tensor.
        unsafe { all.load_row(j, 0, is, &mut out[..width * heads]) };
    } else {
        for h in 0..heads {
            // SAFETY: row (j, h, is) is in bounds (checked by the builder).
            unsafe { t.load_row(j, h, is, &mut out[h * width..(h + 1) * width]) };
        }
    }
}

/// What every task reads.
struct Work<'a> {
    q: TRef,
    k: TRef,
    v: TRef,
    p: Params,
    /// The mask rows ([seq][mask head][query][key]) and the mask heads.
    mask: Option<(&'a [f32], usize)>,
}

/// The head layout the chunk loops walk: `n_q` queries in each of
/// `n_head` heads against `n_kv` keys in each of `n_kv_head` heads, `group`
/// query heads per key head.
#[derive(Clone, Copy)]
struct Heads {
    n_kv: usize,
    n_q: usize,
    n_head: usize,
    n_kv_head: usize,
    group: usize,
}

impl Heads {
    /// The query heads that read key head `hk`.
    fn reading(&self, hk: usize) -> std::ops::Range<usize> {
        hk * self.group..((hk + 1) * self.group).min(self.n_head)
    }
}

impl Work<'_> {
    fn heads(&self) -> Heads {
        let (n_q, n_head) = (self.q.ne[1], self.q.ne[2]);
        let n_kv_head = self.k.ne[2].max(1);
        Heads {
            n_kv: self.k.ne[1],
            n_q,
            n_head,
            n_kv_head,
            group: (n_head / n_kv_head).max(1),
        }
    }

    /// The mask values of sequence `is`, head `h`, query `i`, from key `j0`
    /// to the last key.
    fn mask_row(&self, hd: &Heads, is: usize, h: usize, i: usize, j0: usize) -> Option<&[f32]> {
        let (values, heads) = self.mask?;
        let at = ((is * heads + h % heads) * hd.n_q + i) * hd.n_kv;
        Some(&values[at + j0..at + hd.n_kv])
    }
}

impl Work<'_> {
    /// Chunks `chunks` of sequence `is`, every head and query; writes the
    /// partial states into `out` ([head][query][dv + 2]).
    fn run_part(&self, isa: Isa, sc: &mut Scratch, is: usize, chunks: &[usize], out: &mut [f32]) {
        let (q, k, v, p) = (self.q, self.k, self.v, self.p);
        let (d, dv) = (q.ne[0], v.ne[0]);
        let Heads {
            n_kv,
            n_q,
            n_head,
            n_kv_head,
            ..
        } = self.heads();
        let state = dv + 2;
        grow(&mut sc.q, n_head * n_q * d);
        grow(&mut sc.s, CHUNK);
        grow(&mut sc.row, CHUNK);
        sc.slopes.clear();
        sc.slopes
            .extend((0..n_head).map(|h| super::super::alibi::alibi_slope(p.max_bias, n_head, h)));
        for h in 0..n_head {
            for i in 0..n_q {
                let row = &mut sc.q[(h * n_q + i) * d..(h * n_q + i + 1) * d];
                // SAFETY: rows in bounds (checked by the builder).
                unsafe { q.load_row(i, h, is, row) };
                row.iter_mut().for_each(|x| *x *= p.scale);
            }
        }
        for st in out.chunks_mut(state) {
            st[..dv].fill(0.0);
            st[dv] = f32::NEG_INFINITY;
            st[dv + 1] = 0.0;
        }
        // the cache rows are usually out of cache (the weights streamed
        // through since the last token): ask for the first chunk's rows
        // all at once rather than miss on them row by row
        if let Some(&first) = chunks.first() {
            for j in first * CHUNK..(first * CHUNK + CHUNK).min(n_kv) {
                for hk in 0..n_kv_head {
                    prefetch_row(k, j, hk, is);
                    prefetch_row(v, j, hk, is);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx512 && f16_rows(k) && f16_rows(v) {
            // SAFETY: the processor has AVX-512 F (checked by `active`);
            // K and V are F16 with packed rows.
            match (d, dv) {
                (64, 64) => return unsafe { self.f16_chunks::<4, 4>(sc, is, chunks, out) },
                (128, 128) => return unsafe { self.f16_chunks::<8, 8>(sc, is, chunks, out) },
                _ => {}
            }
        }
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 && f16_rows(k) && f16_rows(v) {
            // SAFETY: the processor has AVX2, FMA and F16C (checked by
            // `active`); K and V are F16 with packed rows.
            match (d, dv) {
                (64, 64) => return unsafe { self.f16_chunks_avx2::<8, 8>(sc, is, chunks, out) },
                (128, 128) => {
                    return unsafe { self.f16_chunks_avx2::<16, 16>(sc, is, chunks, out) };
                }
                _ => {}
            }
        }
        self.converted_chunks(isa, sc, is, chunks, out);
    }

    /// `run_part` for any K/V type: each chunk's rows converted to f32
    /// first.
    fn converted_chunks(
        &self,
        isa: Isa,
        sc: &mut Scratch,
        is: usize,
        chunks: &[usize],
        out: &mut [f32],
    ) {
        let (k, v, p) = (self.k, self.v, self.p);
        let (d, dv) = (self.q.ne[0], v.ne[0]);
        let hd = self.heads();
        let Heads {
            n_kv,
            n_q,
            n_kv_head,
            ..
        } = hd;
        let state = dv + 2;
        for (n, &c) in chunks.iter().enumerate() {
            let j0 = c * CHUNK;
            let nk = CHUNK.min(n_kv - j0);
            // ask for the next chunk's rows (every head) now
            if let Some(&next) = chunks.get(n + 1) {
                for j in next * CHUNK..(next * CHUNK + CHUNK).min(n_kv) {
                    for hk in 0..n_kv_head {
                        prefetch_row(k, j, hk, is);
                        prefetch_row(v, j, hk, is);
                    }
                }
            }
            // every head's part of the chunk's rows, [key][kv head][d]
            let (ks, vs) = (n_kv_head * d, n_kv_head * dv);
            grow(&mut sc.k, nk * ks);
            grow(&mut sc.v, nk * vs);
            for j in 0..nk {
                load_heads(k, j0 + j, is, &mut sc.k[j * ks..(j + 1) * ks]);
                load_heads(v, j0 + j, is, &mut sc.v[j * vs..(j + 1) * vs]);
            }
            for hk in 0..n_kv_head {
                for h in hd.reading(hk) {
                    let slope = sc.slopes[h];
                    for i in 0..n_q {
                        if let Some(m) = self.mask_row(&hd, is, h, i, j0) {
                            for (o, x) in sc.row[..nk].iter_mut().zip(m) {
                                *o = x * slope;
                            }
                        }
                        let r = h * n_q + i;
                        let row = RowStep {
                            d,
                            dv,
                            nk,
                            k_stride: ks,
                            v_stride: vs,
                            softcap: p.softcap,
                            mask: self.mask.map(|_| &sc.row[..nk]),
                        };
                        row.run(
                            isa,
                            &sc.q[r * d..(r + 1) * d],
                            &sc.k[hk * d..],
                            &sc.v[hk * dv..],
                            &mut sc.s,
                            &mut out[r * state..(r + 1) * state],
                        );
                    }
                }
            }
        }
    }

    /// `run_part` for F16 K and V with `16 * DQ` values per key head and
    /// `16 * DV` per value head: the rows are read from the cache once per
    /// chunk and head, widened in registers.
    ///
    /// # Safety
    /// The processor has AVX-512 F; K and V are F16 with packed rows of
    /// `16 * DQ` and `16 * DV` values; `sc.q` holds the scaled queries and
    /// `out` the initial states.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
    unsafe fn f16_chunks<const DQ: usize, const DV: usize>(
        &self,
        sc: &Scratch,
        is: usize,
        chunks: &[usize],
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let (k, v) = (self.k, self.v);
        let (d, dv) = (16 * DQ, 16 * DV);
        let hd = self.heads();
        let Heads {
            n_kv,
            n_q,
            n_kv_head,
            ..
        } = hd;
        let state = dv + 2;
        for &c in chunks {
            let j0 = c * CHUNK;
            let nk = CHUNK.min(n_kv - j0);
            let live: __mmask16 = if nk == CHUNK { !0 } else { (1 << nk) - 1 };
            for hk in 0..n_kv_head {
                let krow = |j: usize| k.row_ptr(j0 + j, hk, is) as *const u16;
                let vrow = |j: usize| v.row_ptr(j0 + j, hk, is) as *const u16;
                for h in hd.reading(hk) {
                    for i in 0..n_q {
                        let r = h * n_q + i;
                        let st = &mut out[r * state..(r + 1) * state];
                        // SAFETY: the chunk's keys j0..j0 + nk exist, each
                        // row holds d (K) or dv (V) f16 values; sc.q row r
                        // holds d values, st dv + 2, the mask row n_kv.
                        unsafe {
                            let qr = sc.q.as_ptr().add(r * d);
                            let qv: [__m512; DQ] =
                                std::array::from_fn(|c| _mm512_loadu_ps(qr.add(16 * c)));
                            let score = |j: usize| {
                                let kp = krow(j);
                                let mut a = _mm512_setzero_ps();
                                for (c, q) in qv.iter().enumerate() {
                                    let kx = _mm512_cvtph_ps(_mm256_loadu_si256(
                                        kp.add(16 * c) as *const __m256i
                                    ));
                                    a = _mm512_fmadd_ps(kx, *q, a);
                                }
                                a
                            };
                            let parts: [__m512; CHUNK] = if nk == CHUNK {
                                std::array::from_fn(score)
                            } else {
                                std::array::from_fn(|j| {
                                    if j < nk {
                                        score(j)
                                    } else {
                                        _mm512_setzero_ps()
                                    }
                                })
                            };
                            let mut sums = lane_sums(&parts);
                            if self.p.softcap != 0.0 {
                                let mut a = [0f32; 16];
                                _mm512_storeu_ps(a.as_mut_ptr(), sums);
                                softcap(&mut a, self.p.softcap);
                                sums = _mm512_loadu_ps(a.as_ptr());
                            }
                            let mut sv =
                                _mm512_mask_blend_ps(live, _mm512_set1_ps(f32::NEG_INFINITY), sums);
                            let mut scores = [0f32; CHUNK];
                            if let Some(m) = self.mask_row(&hd, is, h, i, j0) {
                                let m = _mm512_maskz_loadu_ps(live, m.as_ptr());
                                sv = _mm512_fmadd_ps(m, _mm512_set1_ps(sc.slopes[h]), sv);
                            }
                            let old = st[dv];
                            let max = old.max(_mm512_reduce_max_ps(sv));
                            if max == f32::NEG_INFINITY {
                                continue;
                            }
                            _mm512_storeu_ps(
                                scores.as_mut_ptr(),
                                _mm512_sub_ps(sv, _mm512_set1_ps(max)),
                            );
                            scores.iter_mut().for_each(|x| *x = exp(*x));
                            let rescale = exp(old - max);
                            st[dv] = max;
                            st[dv + 1] = st[dv + 1] * rescale
                                + _mm512_reduce_add_ps(_mm512_loadu_ps(scores.as_ptr()));
                            let sp = st.as_mut_ptr();
                            let r16 = _mm512_set1_ps(rescale);
                            let mut acc: [__m512; DV] = std::array::from_fn(|c| {
                                _mm512_mul_ps(_mm512_loadu_ps(sp.add(16 * c)), r16)
                            });
                            for (j, &pj) in scores.iter().enumerate().take(nk) {
                                let vp = vrow(j);
                                let w = _mm512_set1_ps(pj);
                                for (c, a) in acc.iter_mut().enumerate() {
                                    let vx = _mm512_cvtph_ps(_mm256_loadu_si256(
                                        vp.add(16 * c) as *const __m256i
                                    ));
                                    *a = _mm512_fmadd_ps(vx, w, *a);
                                }
                            }
                            for (c, a) in acc.iter().enumerate() {
                                _mm512_storeu_ps(sp.add(16 * c), *a);
                            }
                        }
                    }
                }
            }
        }
    }
}

impl Work<'_> {
    /// [`Self::f16_chunks`] on AVX2, with `8 * DQ` values per key head and
    /// `8 * DV` per value head: each key's score is a vector of partial
    /// sums whose lanes are summed eight keys at a time
    /// ([`lane_sums8`]), and the weighted values are accumulated eight
    /// registers at a time.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C; K and V are F16 with packed
    /// rows of `8 * DQ` and `8 * DV` values; `sc.q` holds the scaled
    /// queries and `out` the initial states.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn f16_chunks_avx2<const DQ: usize, const DV: usize>(
        &self,
        sc: &Scratch,
        is: usize,
        chunks: &[usize],
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let (k, v) = (self.k, self.v);
        let (d, dv) = (8 * DQ, 8 * DV);
        let hd = self.heads();
        let Heads {
            n_kv,
            n_q,
            n_kv_head,
            ..
        } = hd;
        let state = dv + 2;
        for &c in chunks {
            let j0 = c * CHUNK;
            let nk = CHUNK.min(n_kv - j0);
            for hk in 0..n_kv_head {
                let krow = |j: usize| k.row_ptr(j0 + j, hk, is) as *const u16;
                let vrow = |j: usize| v.row_ptr(j0 + j, hk, is) as *const u16;
                for h in hd.reading(hk) {
                    for i in 0..n_q {
                        let r = h * n_q + i;
                        let st = &mut out[r * state..(r + 1) * state];
                        // SAFETY: the chunk's keys j0..j0 + nk exist, each
                        // row holds d (K) or dv (V) f16 values; sc.q row r
                        // holds d values, st dv + 2, the mask row n_kv.
                        unsafe {
                            let qr = sc.q.as_ptr().add(r * d);
                            let mut scores = [f32::NEG_INFINITY; CHUNK];
                            for half in 0..CHUNK / 8 {
                                // per key a vector of partial sums, two
                                // keys' chains interleaved
                                let mut parts = [_mm256_setzero_ps(); 8];
                                for j in (0..8).filter(|j| 8 * half + j < nk) {
                                    let kp = krow(8 * half + j);
                                    for c in 0..DQ {
                                        let kx = _mm256_cvtph_ps(_mm_loadu_si128(
                                            kp.add(8 * c) as *const __m128i
                                        ));
                                        parts[j] = _mm256_fmadd_ps(
                                            kx,
                                            _mm256_loadu_ps(qr.add(8 * c)),
                                            parts[j],
                                        );
                                    }
                                }
                                _mm256_storeu_ps(
                                    scores[8 * half..].as_mut_ptr(),
                                    lane_sums8(&parts),
                                );
                            }
                            if self.p.softcap != 0.0 {
                                softcap(&mut scores[..nk], self.p.softcap);
                            }
                            scores[nk..].fill(f32::NEG_INFINITY);
                            if let Some(m) = self.mask_row(&hd, is, h, i, j0) {
                                let slope = sc.slopes[h];
                                for (x, m) in scores.iter_mut().zip(m) {
                                    *x += m * slope;
                                }
                            }
                            let old = st[dv];
                            let max = scores.iter().copied().fold(old, f32::max);
                            if max == f32::NEG_INFINITY {
                                continue;
                            }
                            scores.iter_mut().for_each(|x| *x = exp(*x - max));
                            let rescale = exp(old - max);
                            st[dv] = max;
                            st[dv + 1] = st[dv + 1] * rescale + scores.iter().sum::<f32>();
                            let sp = st.as_mut_ptr();
                            let r8 = _mm256_set1_ps(rescale);
                            // eight registers of values at a time
                            for c0 in (0..DV).step_by(8) {
                                let mut acc: [__m256; 8] = std::array::from_fn(|c| {
                                    if c0 + c < DV {
                                        _mm256_mul_ps(_mm256_loadu_ps(sp.add(8 * (c0 + c))), r8)
                                    } else {
                                        _mm256_setzero_ps()
                                    }
                                });
                                for (j, &pj) in scores.iter().enumerate().take(nk) {
                                    let vp = vrow(j);
                                    let w = _mm256_set1_ps(pj);
                                    for (c, a) in acc.iter_mut().enumerate().take(DV - c0) {
                                        let vx = _mm256_cvtph_ps(_mm_loadu_si128(
                                            vp.add(8 * (c0 + c)) as *const __m128i,
                                        ));
                                        *a = _mm256_fmadd_ps(vx, w, *a);
                                    }
                                }
                                for (c, a) in acc.iter().enumerate().take(DV - c0) {
                                    _mm256_storeu_ps(sp.add(8 * (c0 + c)), *a);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The sums of the lanes of 8 vectors: lane `j` of the result is the sum
/// of `a[j]`.
///
/// # Safety
/// The processor has AVX.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx")]
unsafe fn lane_sums8(a: &[std::arch::x86_64::__m256; 8]) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // within each 128-bit half: pairs, then quads of lanes
    let p: [__m256; 4] = std::array::from_fn(|i| _mm256_hadd_ps(a[2 * i], a[2 * i + 1]));
    let q = [_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3])];
    // q[0] lanes: a0..a3 over the low halves, then over the high halves;
    // q[1] likewise for a4..a7
    let lo = _mm256_permute2f128_ps::<0x20>(q[0], q[1]);
    let hi = _mm256_permute2f128_ps::<0x31>(q[0], q[1]);
    _mm256_add_ps(lo, hi)
}

/// The sums of the lanes of 16 vectors: lane `j` of the result is the
/// sum of `a[j]`. Halves, then quarters, then pairs of lanes are added
/// across pairs of vectors, so that each step halves the vector count.
///
/// # Safety
/// The processor has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn lane_sums(a: &[std::arch::x86_64::__m512; 16]) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // 256-bit halves: b[i] holds 8 partial sums of a[2i], then of a[2i + 1]
    let b: [__m512; 8] = std::array::from_fn(|i| {
        let (x, y) = (a[2 * i], a[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(x, y),
            _mm512_shuffle_f32x4::<0xEE>(x, y),
        )
    });
    // 128-bit quarter t of c[i] holds 4 partial sums of a[4i + t]
    let c: [__m512; 4] = std::array::from_fn(|i| {
        let (x, y) = (b[2 * i], b[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(x, y),
            _mm512_shuffle_f32x4::<0xDD>(x, y),
        )
    });
    // quarter t of d[i]: 2 partial sums of a[8i + t], then of a[8i + 4 + t]
    let d: [__m512; 2] = std::array::from_fn(|i| {
        let (x, y) = (c[2 * i], c[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x88>(x, y),
            _mm512_shuffle_ps::<0xDD>(x, y),
        )
    });
    // lane 4t + s: the sum of a[4s + t]
    let e = _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(d[0], d[1]),
        _mm512_shuffle_ps::<0xDD>(d[0], d[1]),
    );
    let order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_permutexvar_ps(order, e)
}

/// Whether `t` is F16 with packed rows.
fn f16_rows(t: TRef) -> bool {
    t.dtype == ggraph_core::DType::F16 && t.rows_packed()
}

/// One (head, query) over one block of keys.
struct RowStep<'a> {
    d: usize,
    dv: usize,
    nk: usize,
    /// Distance between the rows of consecutive keys in `k` and `v`.
    k_stride: usize,
    v_stride: usize,
    softcap: f32,
    mask: Option<&'a [f32]>,
}

impl RowStep<'_> {
    fn run(&self, isa: Isa, q: &[f32], k: &[f32], v: &[f32], s: &mut [f32], st: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if isa >= Isa::Avx512 {
                // SAFETY: the processor has AVX-512 F (checked by `active`).
                return unsafe { self.run_avx512(q, k, v, s, st) };
            }
            if isa >= Isa::Avx2 {
                // SAFETY: the processor has AVX2 and FMA (checked by `active`).
                return unsafe { self.run_avx2(q, k, v, s, st) };
            }
        }
        let _ = isa;
        self.body::<Separate>(q, k, v, s, st)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn run_avx512(&self, q: &[f32], k: &[f32], v: &[f32], s: &mut [f32], st: &mut [f32]) {
        self.body::<Fused>(q, k, v, s, st)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, q: &[f32], k: &[f32], v: &[f32], s: &mut [f32], st: &mut [f32]) {
        self.body::<Fused>(q, k, v, s, st)
    }

    /// Scores, the online softmax update of the state
    /// `st = [acc (dv) | max | sum]`, and the weighted values.
    #[inline(always)]
    fn body<M: MulAdd>(&self, q: &[f32], k: &[f32], v: &[f32], s: &mut [f32], st: &mut [f32]) {
        let (d, dv, nk) = (self.d, self.dv, self.nk);
        let (ks, vs) = (self.k_stride, self.v_stride);
        let s = &mut s[..nk];
        for (j, sj) in s.iter_mut().enumerate() {
            *sj = dot::<M>(q, &k[j * ks..j * ks + d]);
        }
        if self.softcap != 0.0 {
            softcap(s, self.softcap);
        }
        if let Some(m) = self.mask {
            s.iter_mut().zip(m).for_each(|(x, m)| *x += m);
        }
        let (acc, rest) = st.split_at_mut(dv);
        let block_max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let m = rest[0].max(block_max);
        let base = if m == f32::NEG_INFINITY { 0.0 } else { m };
        let rescale = exp(rest[0] - base);
        rest[0] = m;
        s.iter_mut().for_each(|x| *x = exp(*x - base));
        rest[1] = rest[1] * rescale + s.iter().sum::<f32>();
        if rescale != 1.0 {
            acc.iter_mut().for_each(|a| *a *= rescale);
        }
        for (c, chunk) in acc.chunks_mut(ACC_W).enumerate() {
            let c0 = c * ACC_W;
            if chunk.len() == ACC_W {
                let mut a = [0f32; ACC_W];
                a.copy_from_slice(chunk);
                for (j, &pj) in s.iter().enumerate() {
                    let vj: &[f32; ACC_W] = v[j * vs + c0..j * vs + c0 + ACC_W]
                        .try_into()
                        .expect("ACC_W values");
                    for l in 0..ACC_W {
                        a[l] = M::mul_add(pj, vj[l], a[l]);
                    }
                }
                chunk.copy_from_slice(&a);
            } else {
                for (j, &pj) in s.iter().enumerate() {
                    let vj = &v[j * vs + c0..j * vs + c0 + chunk.len()];
                    for (a, x) in chunk.iter_mut().zip(vj) {
                        *a = M::mul_add(pj, *x, *a);
                    }
                }
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::arch::x86_64::*;

    #[test]
    fn lane_sums_puts_the_sum_of_vector_j_in_lane_j() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let values: Vec<[f32; 16]> = (0..16)
            .map(|j| std::array::from_fn(|l| (j * 100 + l * l) as f32))
            .collect();
        let mut got = [0f32; 16];
        // SAFETY: AVX-512 F checked above.
        unsafe {
            let a: [__m512; 16] = std::array::from_fn(|j| _mm512_loadu_ps(values[j].as_ptr()));
            _mm512_storeu_ps(got.as_mut_ptr(), super::lane_sums(&a));
        }
        for (j, v) in values.iter().enumerate() {
            assert_eq!(got[j], v.iter().sum::<f32>(), "lane {j}");
        }
    }

    #[test]
    fn lane_sums8_puts_the_sum_of_vector_j_in_lane_j() {
        if !is_x86_feature_detected!("avx") {
            return;
        }
        let values: Vec<[f32; 8]> = (0..8)
            .map(|j| std::array::from_fn(|l| (j * 100 + l * l) as f32))
            .collect();
        let mut got = [0f32; 8];
        // SAFETY: AVX checked above.
        unsafe {
            let a: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(values[j].as_ptr()));
            _mm256_storeu_ps(got.as_mut_ptr(), super::lane_sums8(&a));
        }
        for (j, v) in values.iter().enumerate() {
            assert_eq!(got[j], v.iter().sum::<f32>(), "lane {j}");
        }
    }
}

/// Scaled scores capped as `cap * tanh(s / cap)` (ggml's logit soft-cap).
#[inline]
fn softcap(scores: &mut [f32], cap: f32) {
    scores.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
}
