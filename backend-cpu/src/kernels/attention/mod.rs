//! Fused attention (flash_attn_ext) with an online softmax, so the score
//! matrix never exists in memory.
//!
//! F16 keys and values (llama.cpp's default cache) take ggml's own
//! algorithms, so that the result is llama.cpp's bit for bit
//! (`in_ggml_order`); the kernels below take the other cache types.
//!
//! Work is cut into tiles of up to [`TILE_Q`] query rows of one head. A
//! tile walks the keys in blocks of [`BLOCK_K`]: the block's keys and values
//! are converted to f32 once for all the tile's queries, and a block the
//! mask hides from every query of the tile is skipped (most of the upper
//! half under a causal mask).
//!
//! Two shapes of inner loop:
//! - wide (a prompt: at least [`WIDE_MIN`] queries): the tile's queries are
//!   held transposed, so one key's scores for all queries are `d`
//!   broadcast multiply-adds over [`TILE_Q`] lanes, and the softmax runs
//!   across queries lane by lane;
//! - narrow (the last few queries of a prompt): one dot product per
//!   (query, key).
//!
//! Fewer than [`WIDE_MIN`] queries in all (generation) take the
//! [decode] path instead, split over the keys.
//!
//! Both are plain loops over fixed-width arrays that each instruction-set
//! wrapper vectorises, with the running sums held in registers; on AVX2
//! (16 registers) the wide loop's scores are written with intrinsics,
//! which the compiler otherwise keeps on the stack.

mod decode;
mod in_ggml_order;
mod primitives;

use super::alibi::alibi_slope;
use super::isa::{Isa, active};
use super::math::exp_nonpositive as exp;
use super::parallel::par_ranges;
use crate::kernels::tensor_ref::TRef;
use primitives::{ACC_W, Fused, MulAdd, Params, Separate, dot, join_sink, prefetch_row};

/// Query rows per tile (the lanes of the wide loop).
const TILE_Q: usize = 32;
/// Keys per block.
const BLOCK_K: usize = 64;
/// Tiles of at least this many queries take the wide loop.
const WIDE_MIN: usize = 8;

/// The attention's tensors, as the node holds them: q, k, v, and the
/// optional mask and sinks.
pub struct Operands {
    pub q: TRef,
    pub k: TRef,
    pub v: TRef,
    pub mask: Option<TRef>,
    pub sinks: Option<TRef>,
}

pub fn flash_attn_ext(dst: TRef, ops: Operands, scale: f32, max_bias: f32, softcap: f32) {
    let Operands {
        q,
        k,
        v,
        mask,
        sinks,
    } = ops;
    let n_q = q.ne[1];
    let n_head = q.ne[2];
    let n_seq = q.ne[3];
    if dst.nelements() == 0 {
        return;
    }
    let params = Params {
        scale,
        max_bias,
        softcap,
        sinks,
    };
    if in_ggml_order::takes(q, k, v) {
        return in_ggml_order::flash_attn_ext(dst, q, k, v, mask, params);
    }
    if n_q < WIDE_MIN {
        return decode::decode(dst, q, k, v, mask, params);
    }
    let tiles_per_head = n_q.div_ceil(TILE_Q);
    let isa = active();
    let mask_len = if mask.is_some() { k.ne[1] } else { 0 };
    par_ranges(tiles_per_head * n_head * n_seq, 1, |range| {
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.fit(q.ne[0], v.ne[0], mask_len);
            for t in range.clone() {
                let tile = t % tiles_per_head;
                let h = (t / tiles_per_head) % n_head;
                let is = t / (tiles_per_head * n_head);
                let q0 = tile * TILE_Q;
                let rows = q0..(q0 + TILE_Q).min(n_q);
                run_tile(isa, scratch, dst, q, k, v, mask, params, h, is, rows);
            }
        })
    });
}

thread_local! {
    /// Each thread's attention scratch, kept between calls.
    static SCRATCH: std::cell::RefCell<Scratch> = const { std::cell::RefCell::new(Scratch::empty()) };
}

/// One thread's working memory, reused from tile to tile.
struct Scratch {
    /// Queries, scaled: rows [TILE_Q][d] (narrow) or columns [d][TILE_Q]
    /// (wide, zero beyond the tile's queries).
    q: Vec<f32>,
    /// Mask values times the ALiBi slope: rows [TILE_Q][n_kv].
    mask: Vec<f32>,
    /// The current block's mask, transposed for the wide loop:
    /// [BLOCK_K][TILE_Q], -inf beyond the tile's queries.
    mask_block: Vec<f32>,
    /// Per key block: some query of the tile sees some key of it.
    visible: Vec<bool>,
    /// One row as read, before it is put in place.
    row: Vec<f32>,
    /// One block of keys and of values: [BLOCK_K][d], [BLOCK_K][dv].
    k: Vec<f32>,
    v: Vec<f32>,
    /// Scores of the block, then their exponentials: [TILE_Q][BLOCK_K]
    /// (narrow) or [BLOCK_K][TILE_Q] (wide).
    s: Vec<f32>,
    /// Running weighted sums of values: [TILE_Q][dv].
    acc: Vec<f32>,
    /// Running maximum and sum of exponentials per query.
    max: [f32; TILE_Q],
    sum: [f32; TILE_Q],
}

impl Scratch {
    const fn empty() -> Scratch {
        Scratch {
            q: Vec::new(),
            mask: Vec::new(),
            mask_block: Vec::new(),
            visible: Vec::new(),
            row: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            s: Vec::new(),
            acc: Vec::new(),
            max: [0.0; TILE_Q],
            sum: [0.0; TILE_Q],
        }
    }

    /// Room for queries of width `d`, values of width `dv` and mask rows
    /// of `mask_len`; grows only.
    fn fit(&mut self, d: usize, dv: usize, mask_len: usize) {
        let grow = |v: &mut Vec<f32>, n: usize| {
            if v.len() < n {
                v.resize(n, 0.0);
            }
        };
        grow(&mut self.q, TILE_Q * d);
        grow(&mut self.mask, TILE_Q * mask_len);
        grow(&mut self.mask_block, BLOCK_K * TILE_Q);
        if self.visible.len() < mask_len.div_ceil(BLOCK_K) {
            self.visible.resize(mask_len.div_ceil(BLOCK_K), false);
        }
        grow(&mut self.row, d.max(mask_len));
        grow(&mut self.k, BLOCK_K * d);
        grow(&mut self.v, BLOCK_K * dv);
        grow(&mut self.s, TILE_Q * BLOCK_K);
        grow(&mut self.acc, TILE_Q * dv);
    }
}

fn run_tile(
    isa: Isa,
    sc: &mut Scratch,
    dst: TRef,
    q: TRef,
    k: TRef,
    v: TRef,
    mask: Option<TRef>,
    p: Params,
    h: usize,
    is: usize,
    rows: std::ops::Range<usize>,
) {
    let (d, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    let nq = rows.len();
    let wide = nq >= WIDE_MIN;
    let hk = h / (q.ne[2] / k.ne[2].max(1)).max(1);
    let slope = alibi_slope(p.max_bias, q.ne[2], h);
    let mask_len = if mask.is_some() { n_kv } else { 0 };
    if wide {
        sc.q[..TILE_Q * d].fill(0.0);
    }
    let n_blocks = n_kv.div_ceil(BLOCK_K);
    let n_flags = n_blocks.min(sc.visible.len());
    sc.visible[..n_flags].fill(false);
    for (i, iq) in rows.clone().enumerate() {
        let row = &mut sc.row[..d];
        // SAFETY: rows in bounds (checked by the builder).
        unsafe { q.load_row(iq, h, is, row) };
        for (c, &x) in row.iter().enumerate() {
            let at = if wide { c * TILE_Q + i } else { i * d + c };
            sc.q[at] = x * p.scale;
        }
        if let Some(m) = mask {
            let row = &mut sc.mask[i * n_kv..(i + 1) * n_kv];
            // SAFETY: mask rows in bounds (checked by the builder).
            unsafe { m.load_row(iq, h % m.ne[2], is % m.ne[3], row) };
            if slope != 1.0 {
                row.iter_mut().for_each(|x| *x *= slope);
            }
            for (b, block) in row.chunks(BLOCK_K).enumerate() {
                if !sc.visible[b] {
                    sc.visible[b] = block.iter().any(|&x| x != f32::NEG_INFINITY);
                }
            }
        }
    }
    sc.acc[..TILE_Q * dv].fill(0.0);
    sc.max.fill(f32::NEG_INFINITY);
    sc.sum.fill(0.0);
    for j0 in (0..n_kv).step_by(BLOCK_K) {
        let nk = BLOCK_K.min(n_kv - j0);
        if mask.is_some() && !sc.visible[j0 / BLOCK_K] {
            continue;
        }
        if wide && mask.is_some() {
            let mb = &mut sc.mask_block[..BLOCK_K * TILE_Q];
            mb.fill(f32::NEG_INFINITY);
            for i in 0..nq {
                let mrow = &sc.mask[i * n_kv + j0..i * n_kv + j0 + nk];
                for (j, &x) in mrow.iter().enumerate() {
                    mb[j * TILE_Q + i] = x;
                }
            }
        }
        // ask for the whole block at once: rows of one head are a cache
        // row apart, too far for the hardware prefetcher to follow
        for j in 0..nk {
            prefetch_row(k, j0 + j, hk, is);
            prefetch_row(v, j0 + j, hk, is);
        }
        for j in 0..nk {
            // SAFETY: key and value rows in bounds (checked by the builder).
            unsafe {
                k.load_row(j0 + j, hk, is, &mut sc.k[j * d..(j + 1) * d]);
                v.load_row(j0 + j, hk, is, &mut sc.v[j * dv..(j + 1) * dv]);
            }
        }
        let step = Step {
            d,
            dv,
            nq,
            nk,
            softcap: p.softcap,
            j0,
            mask_len,
        };
        step.run(isa, wide, sc);
    }
    for (i, iq) in rows.enumerate() {
        if let Some(s) = p.sink(h) {
            let values = &mut sc.acc[i * dv..(i + 1) * dv];
            join_sink::<Fused>(s, &mut sc.max[i], &mut sc.sum[i], values);
        }
        let inv = if sc.sum[i] > 0.0 {
            1.0 / sc.sum[i]
        } else {
            0.0
        };
        let out = &mut sc.acc[i * dv..(i + 1) * dv];
        out.iter_mut().for_each(|a| *a *= inv);
        // SAFETY: this task owns the tile's dst rows.
        unsafe { dst.store_row(h, iq, is, out) };
    }
}

/// One (tile, key block) step.
struct Step {
    d: usize,
    dv: usize,
    nq: usize,
    nk: usize,
    softcap: f32,
    /// The block's first key.
    j0: usize,
    /// Length of a mask row (0 without a mask).
    mask_len: usize,
}

impl Step {
    fn run(&self, isa: Isa, wide: bool, sc: &mut Scratch) {
        #[cfg(target_arch = "x86_64")]
        {
            if isa >= Isa::Avx512 {
                // SAFETY: the processor has AVX-512 F (checked by `active`).
                return unsafe { self.run_avx512(wide, sc) };
            }
            if isa >= Isa::Avx2 {
                // SAFETY: the processor has AVX2 and FMA (checked by `active`).
                return unsafe { self.run_avx2(wide, sc) };
            }
        }
        let _ = isa;
        self.body::<Separate>(wide, sc)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn run_avx512(&self, wide: bool, sc: &mut Scratch) {
        self.body::<Fused>(wide, sc)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, wide: bool, sc: &mut Scratch) {
        if wide {
            // SAFETY: the processor has AVX2 and FMA (the caller's contract).
            unsafe { self.wide_avx2(sc) };
            self.accumulate_values::<Fused, { ACC_W / 2 }>(wide, sc);
        } else {
            self.body::<Fused>(wide, sc)
        }
    }

    #[inline(always)]
    fn body<M: MulAdd>(&self, wide: bool, sc: &mut Scratch) {
        if wide {
            self.wide::<M>(sc);
        } else {
            self.narrow::<M>(sc);
        }
        self.accumulate_values::<M, ACC_W>(wide, sc);
    }

    /// [`Self::wide`] on AVX2: two keys at a time over the tile's 32
    /// queries, the scores in eight ymm registers (the generic loop keeps
    /// its accumulators on the stack with 16 registers).
    ///
    /// # Safety
    /// The processor has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn wide_avx2(&self, sc: &mut Scratch) {
        use std::arch::x86_64::*;
        let (d, nk) = (self.d, self.nk);
        let mut j = 0;
        while j < nk {
            let n = 2.min(nk - j);
            // a lone last key is scored twice; the copy is dropped
            let k0 = sc.k[j * d..(j + 1) * d].as_ptr();
            let k1 = sc.k[(j + n - 1) * d..(j + n) * d].as_ptr();
            let q = sc.q[..d * TILE_Q].as_ptr();
            // SAFETY: q holds d rows of TILE_Q lanes, both keys d values.
            let cols = unsafe {
                let mut a = [[_mm256_setzero_ps(); 4]; 2];
                for c in 0..d {
                    let x = [_mm256_set1_ps(*k0.add(c)), _mm256_set1_ps(*k1.add(c))];
                    for g in 0..4 {
                        let qg = _mm256_loadu_ps(q.add(c * TILE_Q + 8 * g));
                        for u in 0..2 {
                            a[u][g] = _mm256_fmadd_ps(x[u], qg, a[u][g]);
                        }
                    }
                }
                let mut cols = [[0f32; TILE_Q]; 2];
                for u in 0..2 {
                    for g in 0..4 {
                        _mm256_storeu_ps(cols[u][8 * g..].as_mut_ptr(), a[u][g]);
                    }
                }
                cols
            };
            for (u, col) in cols.iter().enumerate().take(n) {
                sc.s[(j + u) * TILE_Q..(j + u + 1) * TILE_Q].copy_from_slice(col);
            }
            j += n;
        }
        self.softmax_columns(sc);
    }

    /// Scores as one column per key over the tile's queries, then
    /// [`Self::softmax_columns`].
    #[inline(always)]
    fn wide<M: MulAdd>(&self, sc: &mut Scratch) {
        let (d, nk) = (self.d, self.nk);
        // KEYS keys at a time: independent accumulators keep the
        // multiply-add units busy
        const KEYS: usize = 4;
        let mut j = 0;
        while j < nk {
            let n = KEYS.min(nk - j);
            // keys past the block's end repeat its last key and are dropped
            let key = |u: usize| &sc.k[(j + u.min(n - 1)) * d..(j + u.min(n - 1) + 1) * d];
            let (k0, k1, k2, k3) = (key(0), key(1), key(2), key(3));
            let mut c0 = [0f32; TILE_Q];
            let mut c1 = [0f32; TILE_Q];
            let mut c2 = [0f32; TILE_Q];
            let mut c3 = [0f32; TILE_Q];
            for c in 0..d {
                let qc: &[f32; TILE_Q] = sc.q[c * TILE_Q..(c + 1) * TILE_Q]
                    .try_into()
                    .expect("TILE_Q lanes");
                let (x0, x1, x2, x3) = (k0[c], k1[c], k2[c], k3[c]);
                for l in 0..TILE_Q {
                    c0[l] = M::mul_add(x0, qc[l], c0[l]);
                    c1[l] = M::mul_add(x1, qc[l], c1[l]);
                    c2[l] = M::mul_add(x2, qc[l], c2[l]);
                    c3[l] = M::mul_add(x3, qc[l], c3[l]);
                }
            }
            let cols = [c0, c1, c2, c3];
            for (u, col) in cols.iter().enumerate().take(n) {
                sc.s[(j + u) * TILE_Q..(j + u + 1) * TILE_Q].copy_from_slice(col);
            }
            j += n;
        }
        self.softmax_columns(sc);
    }

    /// The scores in `s` ([BLOCK_K][TILE_Q]) capped and masked, then the
    /// online softmax update lane by lane; leaves the exponentials in `s`.
    #[inline(always)]
    fn softmax_columns(&self, sc: &mut Scratch) {
        let nk = self.nk;
        let mut block_max = [f32::NEG_INFINITY; TILE_Q];
        for j in 0..nk {
            let col: &mut [f32; TILE_Q] = (&mut sc.s[j * TILE_Q..(j + 1) * TILE_Q])
                .try_into()
                .expect("TILE_Q lanes");
            if self.softcap != 0.0 {
                let cap = self.softcap;
                col.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
            }
            if self.mask_len > 0 {
                let m: &[f32; TILE_Q] = sc.mask_block[j * TILE_Q..(j + 1) * TILE_Q]
                    .try_into()
                    .expect("TILE_Q lanes");
                for l in 0..TILE_Q {
                    col[l] += m[l];
                }
            }
            for l in 0..TILE_Q {
                block_max[l] = block_max[l].max(col[l]);
            }
        }
        // new running maximum; a query that has seen only hidden keys
        // subtracts 0 so that its exponentials are exactly 0
        let mut base = [0f32; TILE_Q];
        let mut rescale = [1f32; TILE_Q];
        for l in 0..TILE_Q {
            let m = sc.max[l].max(block_max[l]);
            base[l] = if m == f32::NEG_INFINITY { 0.0 } else { m };
            rescale[l] = exp(sc.max[l] - base[l]);
            sc.max[l] = m;
        }
        let mut block_sum = [0f32; TILE_Q];
        for j in 0..nk {
            let col: &mut [f32; TILE_Q] = (&mut sc.s[j * TILE_Q..(j + 1) * TILE_Q])
                .try_into()
                .expect("TILE_Q lanes");
            for l in 0..TILE_Q {
                col[l] = exp(col[l] - base[l]);
                block_sum[l] += col[l];
            }
        }
        let dv = self.dv;
        for l in 0..self.nq {
            sc.sum[l] = sc.sum[l] * rescale[l] + block_sum[l];
            if rescale[l] != 1.0 {
                let c = rescale[l];
                sc.acc[l * dv..(l + 1) * dv]
                    .iter_mut()
                    .for_each(|a| *a *= c);
            }
        }
    }

    /// Scores as one dot product per (query, key), then the online softmax
    /// update per query; leaves the exponentials in `s` ([TILE_Q][BLOCK_K]).
    #[inline(always)]
    fn narrow<M: MulAdd>(&self, sc: &mut Scratch) {
        let (d, dv, nk) = (self.d, self.dv, self.nk);
        for i in 0..self.nq {
            let qi = &sc.q[i * d..(i + 1) * d];
            let si = &mut sc.s[i * BLOCK_K..i * BLOCK_K + nk];
            for (j, sj) in si.iter_mut().enumerate() {
                *sj = dot::<M>(qi, &sc.k[j * d..(j + 1) * d]);
            }
            if self.softcap != 0.0 {
                let cap = self.softcap;
                si.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
            }
            if self.mask_len > 0 {
                let at = i * self.mask_len + self.j0;
                si.iter_mut()
                    .zip(&sc.mask[at..at + nk])
                    .for_each(|(x, m)| *x += m);
            }
            let block_max = si.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let m = sc.max[i].max(block_max);
            let base = if m == f32::NEG_INFINITY { 0.0 } else { m };
            let rescale = exp(sc.max[i] - base);
            sc.max[i] = m;
            si.iter_mut().for_each(|x| *x = exp(*x - base));
            sc.sum[i] = sc.sum[i] * rescale + si.iter().sum::<f32>();
            if rescale != 1.0 {
                sc.acc[i * dv..(i + 1) * dv]
                    .iter_mut()
                    .for_each(|a| *a *= rescale);
            }
        }
    }

    /// acc[i] += sum over the block's keys j of p(i, j) * v[j], `W` value
    /// columns at a time in registers: two queries' worth of `ACC_W` fits
    /// AVX-512's 32 registers, of `ACC_W / 2` AVX2's 16.
    #[inline(always)]
    fn accumulate_values<M: MulAdd, const W: usize>(&self, wide: bool, sc: &mut Scratch) {
        let (dv, nk) = (self.dv, self.nk);
        let p_at = |i: usize, j: usize| {
            if wide {
                j * TILE_Q + i
            } else {
                i * BLOCK_K + j
            }
        };
        // two queries at a time where the columns allow: twice the
        // independent accumulators per value row read
        let mut i = 0;
        while i < self.nq {
            let pair = i + 1 < self.nq && dv % W == 0;
            if pair {
                let (lo, hi) = sc.acc[i * dv..(i + 2) * dv].split_at_mut(dv);
                for c0 in (0..dv).step_by(W) {
                    let mut a = [0f32; W];
                    let mut b = [0f32; W];
                    a.copy_from_slice(&lo[c0..c0 + W]);
                    b.copy_from_slice(&hi[c0..c0 + W]);
                    for j in 0..nk {
                        let (pa, pb) = (sc.s[p_at(i, j)], sc.s[p_at(i + 1, j)]);
                        let vj: &[f32; W] = sc.v[j * dv + c0..j * dv + c0 + W]
                            .try_into()
                            .expect("W values");
                        for l in 0..W {
                            a[l] = M::mul_add(pa, vj[l], a[l]);
                            b[l] = M::mul_add(pb, vj[l], b[l]);
                        }
                    }
                    lo[c0..c0 + W].copy_from_slice(&a);
                    hi[c0..c0 + W].copy_from_slice(&b);
                }
                i += 2;
                continue;
            }
            let ai = &mut sc.acc[i * dv..(i + 1) * dv];
            for (c, chunk) in ai.chunks_mut(W).enumerate() {
                let c0 = c * W;
                for j in 0..nk {
                    let pj = sc.s[p_at(i, j)];
                    let vj = &sc.v[j * dv + c0..j * dv + c0 + chunk.len()];
                    for (a, x) in chunk.iter_mut().zip(vj) {
                        *a = M::mul_add(pj, *x, *a);
                    }
                }
            }
            i += 1;
        }
    }
}
