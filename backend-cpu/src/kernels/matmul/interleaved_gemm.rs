//! Weights in the CPU's interleaved layout (`kernels::interleave`: Q4_0,
//! Q8_0, Q4_K and IQ4_NL rows in groups of eight) times any number of
//! columns, on AVX2.
//!
//! The layout is the panel `block_gemm_avx2` builds on every call, stored
//! once at load: one 256-bit load gives four codes of each of eight rows
//! (Q4_0: after splitting the nibbles), so each step is a broadcast of a
//! column's four activation codes and one `vpmaddubsw`, and each group's
//! eight sums land in the eight lanes of one register, with no horizontal
//! sums. With one column each task streams its groups in order: one run
//! of memory rather than a stream per row. With more, a task takes
//! [`MC`] rows a chunk of [`KC`] values at a time, and every column tile
//! reads them from L2. Activations are quantised as for
//! `block_gemm_avx2` (`activation_quant`), so the sums are the same, but
//! for Q4_K: one scale a super-block (ggml's Q8_K), so that its sub-block
//! scales and mins apply in integers.

use std::cell::RefCell;

use super::activation_quant::{QActs, qacts_len, quantize_acts};
use super::block_gemm_avx2;
use super::operands::Cols;
use super::quant_format::{Format, format};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved};
use crate::kernels::parallel::{column_split, par_ranges};
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Most columns the kernels here take; more go to `block_gemm_avx2`,
/// which splits the nibbles once per chunk and reuses them across the
/// column tiles (docs/performance.md).
const TILES_MAX_N: usize = 8;
/// Columns per tile with more than two columns (two go as a tile of two).
const C: usize = 4;
/// Values per chunk of the rows with several columns.
const KC: usize = 1024;
/// Rows a task takes with several columns: their chunk stays in L2 while
/// every column tile reads it.
const MC: usize = 128;
/// Values per activation block (the weights' blocks; Q4_K's take one
/// scale a super-block of [`QK`]).
const QB: usize = 32;
/// Values per super-block.
const QK: usize = 256;

thread_local! {
    static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `out[j][i] = dot(row i, b[j])` for the `m` rows of an interleaved
/// matrix of `k` values a row at `a`, and every column of `b`. The caller
/// has checked that the processor has AVX2, FMA and F16C.
///
/// # Safety
/// `a` holds the whole matrix (`m` a multiple of eight rows); the columns
/// hold `k` values and the outputs `m`.
pub(crate) unsafe fn gemm(
    layout: Interleaved,
    a: *const u8,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let n = b.0.len();
    if n > TILES_MAX_N {
        // SAFETY: caller's contract.
        unsafe { block_gemm_avx2::gemm_interleaved(layout, a, k, m, b, out) };
        return;
    }
    // an invariant: Interleaved holds only types quant_format reads
    let Some(f) = format(layout.dtype()) else {
        return;
    };
    let acts_format = match layout {
        // Q8_0 codes stay signed in the panel (the sign trick): no offset
        _ if f.signed => Format { offset: 0, ..f },
        // one activation scale a super-block, as ggml's Q8_K: the
        // sub-blocks' scales and mins are then applied in integers
        Interleaved::Q4_K => Format { qb: QK, ..f },
        _ => f,
    };
    let t = match n {
        1 | 2 => n,
        _ => C,
    };
    // weight blocks a row, and activation blocks a row
    let nblk = k / layout.dtype().block_size();
    let group_bytes = nblk * layout.group_block_bytes();
    let weights = Weights(a);
    let qb = acts_format.qb;
    with_scratch(&ACTS, qacts_len(n, k, qb, t), |buf| {
        let acts = quantize_acts(b, k, acts_format, t, 1, buf);
        let acts = &acts;
        let sums = if layout == Interleaved::Q4_K {
            sub_block_sums(acts.codes, k, n.div_ceil(t), t)
        } else {
            Vec::new()
        };
        let sums = &sums;
        if n == 1 {
            par_ranges(m / GROUP_ROWS, 4, |groups| {
                let x = Acts {
                    codes: acts.codes.as_ptr(),
                    d: acts.d.as_ptr(),
                    bias: acts.bias.as_ptr(),
                    sums: sums.as_ptr(),
                };
                for g in groups {
                    let mut sums = [[0f32; GROUP_ROWS]; 1];
                    // SAFETY: group g holds nblk blocks; the activations
                    // nblk blocks of one column.
                    unsafe {
                        x86::tile::<1>(layout, nblk, weights.at(g * group_bytes), &x, &mut sums)
                    };
                    // SAFETY: output column 0 holds m values; group g's
                    // rows are this task's alone.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            sums[0].as_ptr(),
                            out.0[0].add(g * GROUP_ROWS),
                            GROUP_ROWS,
                        )
                    };
                }
            });
            return;
        }
        let shape = Shape {
            k,
            m,
            n,
            group_bytes,
        };
        if n == 2 {
            columns::<2>(layout, weights, shape, acts, sums, out);
        } else {
            columns::<C>(layout, weights, shape, acts, sums, out);
        }
    });
}

/// Per tile, super-block, pair of 32-value sub-blocks and column: the sums
/// of the activation codes of the two sub-blocks, as two 16-bit halves of
/// one word (at most 32 * 127 each), `[tile][super-block][pair][t]`, for
/// the Q4_K kernel's mins. `codes` as `QActs`'s, `tiles` tiles of `t`
/// columns of `k` values.
fn sub_block_sums(codes: &[i8], k: usize, tiles: usize, t: usize) -> Vec<i32> {
    let nsb = k / QK;
    let mut out = vec![0i32; tiles * nsb * 4 * t];
    for tile in 0..tiles {
        let codes = &codes[tile * k * t..(tile + 1) * k * t];
        for sb in 0..nsb {
            for pair in 0..4 {
                for c in 0..t {
                    let sum = |sub: usize| -> i32 {
                        let g0 = (sb * QK + sub * QB) / 4;
                        (g0..g0 + QB / 4)
                            .flat_map(|g| &codes[(g * t + c) * 4..(g * t + c) * 4 + 4])
                            .map(|&q| q as i32)
                            .sum()
                    };
                    let (lo, hi) = (sum(2 * pair), sum(2 * pair + 1));
                    out[((tile * nsb + sb) * 4 + pair) * t + c] =
                        (lo & 0xffff) | ((hi & 0xffff) << 16);
                }
            }
        }
    }
    out
}

/// The sizes of a product.
#[derive(Clone, Copy)]
struct Shape {
    k: usize,
    m: usize,
    n: usize,
    /// Bytes of one group of rows.
    group_bytes: usize,
}

/// Several columns, `T` a tile: a task takes [`MC`] rows (and a share of
/// the tiles) a chunk of [`KC`] values at a time.
fn columns<const T: usize>(
    layout: Interleaved,
    weights: Weights,
    shape: Shape,
    acts: &QActs,
    sums: &[i32],
    out: &Cols<f32>,
) {
    let Shape {
        k,
        m,
        n,
        group_bytes,
    } = shape;
    let xblk = acts.nblk();
    let qb = k / xblk;
    let blocks = m.div_ceil(MC);
    let tiles = n.div_ceil(T);
    let (col_groups, per_group) = column_split(blocks, tiles);
    team::for_each(blocks * col_groups, |task| {
        let (blk_row, cg) = (task % blocks, task / blocks);
        let g0 = blk_row * MC / GROUP_ROWS;
        let g_end = ((blk_row + 1) * MC).min(m) / GROUP_ROWS;
        for v0 in (0..k).step_by(KC) {
            let nb = KC.min(k - v0) / layout.dtype().block_size();
            let blk0 = v0 / layout.dtype().block_size();
            for tile in cg * per_group..((cg + 1) * per_group).min(tiles) {
                let j0 = tile * T;
                let nc = T.min(n - j0);
                let xo = (tile * xblk + v0 / qb) * T;
                let so = (tile * (k / QK) + v0 / QK) * 4 * T;
                let x = Acts {
                    codes: acts.codes[(tile * k + v0) * T..].as_ptr(),
                    d: acts.d[xo..].as_ptr(),
                    bias: acts.bias[xo..].as_ptr(),
                    sums: sums.get(so..).unwrap_or(&[]).as_ptr(),
                };
                for g in g0..g_end {
                    let mut sums = [[0f32; GROUP_ROWS]; T];
                    let w = weights.at(g * group_bytes + blk0 * layout.group_block_bytes());
                    // SAFETY: blocks blk0..blk0 + nb of group g exist;
                    // the tile holds as many blocks of T columns.
                    unsafe { x86::tile::<T>(layout, nb, w, &x, &mut sums) };
                    for (c, col) in sums.iter().enumerate().take(nc) {
                        // SAFETY: output column j0 + c holds m values;
                        // this task alone writes rows of group g in the
                        // columns of its column group.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                out.0[j0 + c].add(g * GROUP_ROWS),
                                GROUP_ROWS,
                            )
                        };
                        if v0 == 0 {
                            dst.copy_from_slice(col);
                        } else {
                            for (d, s) in dst.iter_mut().zip(col) {
                                *d += s;
                            }
                        }
                    }
                }
            }
        }
    });
}

/// The matrix, shared read-only by the tasks.
#[derive(Clone, Copy)]
struct Weights(*const u8);

// SAFETY: the weights are only read while the call lasts.
unsafe impl Sync for Weights {}
unsafe impl Send for Weights {}

impl Weights {
    fn at(self, offset: usize) -> *const u8 {
        self.0.wrapping_add(offset)
    }
}

/// A tile of quantised activations from some block on (see
/// `activation_quant::QActs`).
struct Acts {
    codes: *const i8,
    d: *const f32,
    bias: *const i32,
    /// Q4_K: the sums of the codes of each pair of sub-blocks
    /// (`sub_block_sums`).
    sums: *const i32,
}

mod x86 {
    use std::arch::x86_64::*;

    use ggraph_core::quant::IQ4_VALUES;

    use super::Acts;
    use crate::kernels::interleave::{GROUP_ROWS, Interleaved, q4_k_scale_words};
    use crate::kernels::matmul::row_streaming::PREFETCH_BYTES;

    /// `sums[c][r] = dot(row r of the group, column c)` over `nb` blocks
    /// of an interleaved group from `w`, `T` columns of activations.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `w` holds `nb` blocks of the group and `x` `nb`
    /// blocks of `T` columns.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile<const T: usize>(
        layout: Interleaved,
        nb: usize,
        w: *const u8,
        x: &Acts,
        sums: &mut [[f32; GROUP_ROWS]; T],
    ) {
        // SAFETY: caller's contract.
        let acc = unsafe {
            match layout {
                Interleaved::Q4_0 => q4_0::<T>(nb, w, x),
                Interleaved::Q8_0 => q8_0::<T>(nb, w, x),
                Interleaved::Q4_K => q4_k::<T>(nb, w, x),
                Interleaved::IQ4_NL => iq4_nl::<T>(nb, w, x),
            }
        };
        for (s, a) in sums.iter_mut().zip(acc) {
            // SAFETY: s holds eight floats.
            unsafe { _mm256_storeu_ps(s.as_mut_ptr(), a) };
        }
    }

    /// Asks for the `len` bytes [`PREFETCH_BYTES`] past `at`, one request a
    /// cache line: with one column the weights stream from memory once, and
    /// the hardware's prefetch alone measured slower on matrices larger
    /// than the cache (docs/performance.md).
    #[inline(always)]
    fn prefetch_ahead(at: *const u8, len: usize) {
        let ahead = at.wrapping_add(PREFETCH_BYTES);
        for line in (0..len).step_by(64) {
            // SAFETY: a prefetch never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8) };
        }
    }

    /// Q4_0: a block's eight steps add up in 16 bits (codes below 16,
    /// at most 30480), are widened once, and take the activations'
    /// `-8 * sum(q)` as their bias.
    ///
    /// # Safety
    /// As for [`tile`].
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_0<const T: usize>(nb: usize, w: *const u8, x: &Acts) -> [__m256; T] {
        // SAFETY: caller's contract.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let low = _mm256_set1_epi8(0x0f);
            let mut acc = [_mm256_setzero_ps(); T];
            let mut wp = w;
            let mut xp = x.codes as *const i32;
            for blk in 0..nb {
                if T == 1 {
                    prefetch_ahead(wp, Interleaved::Q4_0.group_block_bytes());
                }
                let d = _mm256_cvtph_ps(_mm_loadu_si128(wp as *const __m128i));
                let mut pairs = [_mm256_setzero_si256(); T];
                for j in 0..4 {
                    let v = _mm256_loadu_si256(wp.add(16 + 32 * j) as *const __m256i);
                    let lo = _mm256_and_si256(v, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                    for (c, p) in pairs.iter_mut().enumerate() {
                        let xl = _mm256_set1_epi32(*xp.add(j * T + c));
                        let xh = _mm256_set1_epi32(*xp.add((j + 4) * T + c));
                        *p = _mm256_add_epi16(*p, _mm256_maddubs_epi16(lo, xl));
                        *p = _mm256_add_epi16(*p, _mm256_maddubs_epi16(hi, xh));
                    }
                }
                for (c, (a, p)) in acc.iter_mut().zip(pairs).enumerate() {
                    let bias = _mm256_set1_epi32(*x.bias.add(blk * T + c));
                    let s = _mm256_add_epi32(_mm256_madd_epi16(p, ones), bias);
                    let dx = _mm256_set1_ps(*x.d.add(blk * T + c));
                    *a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), d), dx, *a);
                }
                wp = wp.add(Interleaved::Q4_0.group_block_bytes());
                xp = xp.add(8 * T);
            }
            acc
        }
    }

    /// Q4_K: per super-block, the eight rows' 6-bit scales and mins
    /// (`interleave::q4_k_scale_words`), then per pair of sub-blocks
    /// eight chunk loads, whose low nibbles are the first sub-block's steps
    /// and high nibbles the second's; each sub-block's eight steps add up
    /// in 16 bits, as Q4_0's, and `vpmaddwd` by the rows' scales sums them
    /// into the super-block's 32-bit sum. The mins take the activations'
    /// sums a pair of sub-blocks at a time, also in integers, so a
    /// super-block ends in two float multiply-adds a column, as ggml's Q8_K
    /// products do.
    ///
    /// # Safety
    /// As for [`tile`].
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_k<const T: usize>(nb: usize, w: *const u8, x: &Acts) -> [__m256; T] {
        const SUB: usize = 8;
        let chunks = Interleaved::Q4_K.chunks_at();
        // SAFETY: caller's contract.
        unsafe {
            let low = _mm256_set1_epi8(0x0f);
            // byte j of each lane, as a 16-bit value in both halves; bytes
            // j and j + 1 as the two halves
            let spread = |j: i8| lane_bytes(j, j);
            let pair = |j: i8| lane_bytes(j, j + 1);
            let spreads = [spread(0), spread(1), spread(2), spread(3)];
            let (pair01, pair23) = (pair(0), pair(2));
            let mut acc = [_mm256_setzero_ps(); T];
            let mut wp = w;
            for sb in 0..nb {
                if T == 1 {
                    prefetch_ahead(wp, Interleaved::Q4_K.group_block_bytes());
                }
                let [sc_lo, sc_hi, mn_lo, mn_hi] = q4_k_scale_words(wp);
                let codes = wp.add(chunks + 3 * 32);
                let xp = (x.codes as *const i32).add(sb * SUB * 8 * T);
                let mut sums = [_mm256_setzero_si256(); T];
                for p in 0..SUB / 2 {
                    let mut lo_pairs = [_mm256_setzero_si256(); T];
                    let mut hi_pairs = [_mm256_setzero_si256(); T];
                    for step in 0..8 {
                        let v =
                            _mm256_loadu_si256(codes.add((p * 8 + step) * 32) as *const __m256i);
                        let lo = _mm256_and_si256(v, low);
                        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                        for c in 0..T {
                            let xl = _mm256_set1_epi32(*xp.add(((2 * p) * 8 + step) * T + c));
                            let xh = _mm256_set1_epi32(*xp.add(((2 * p + 1) * 8 + step) * T + c));
                            lo_pairs[c] =
                                _mm256_add_epi16(lo_pairs[c], _mm256_maddubs_epi16(lo, xl));
                            hi_pairs[c] =
                                _mm256_add_epi16(hi_pairs[c], _mm256_maddubs_epi16(hi, xh));
                        }
                    }
                    let words = if p < 2 { sc_lo } else { sc_hi };
                    let j = 2 * (p % 2);
                    let (s_lo, s_hi) = (
                        _mm256_shuffle_epi8(words, spreads[j]),
                        _mm256_shuffle_epi8(words, spreads[j + 1]),
                    );
                    for c in 0..T {
                        let l = _mm256_madd_epi16(lo_pairs[c], s_lo);
                        let h = _mm256_madd_epi16(hi_pairs[c], s_hi);
                        sums[c] = _mm256_add_epi32(sums[c], _mm256_add_epi32(l, h));
                    }
                }
                // the mins against the sums of the activation codes
                let pairs_of = |words: __m256i| {
                    [
                        _mm256_shuffle_epi8(words, pair01),
                        _mm256_shuffle_epi8(words, pair23),
                    ]
                };
                let [m01, m23] = pairs_of(mn_lo);
                let [m45, m67] = pairs_of(mn_hi);
                let d = _mm256_cvtph_ps(_mm_loadu_si128(wp as *const __m128i));
                let dmin = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(16) as *const __m128i));
                let bs = x.sums.add(sb * 4 * T);
                for (c, (a, s)) in acc.iter_mut().zip(sums).enumerate() {
                    let b = |p: usize| _mm256_set1_epi32(*bs.add(p * T + c));
                    let mins = _mm256_add_epi32(
                        _mm256_add_epi32(
                            _mm256_madd_epi16(m01, b(0)),
                            _mm256_madd_epi16(m23, b(1)),
                        ),
                        _mm256_add_epi32(
                            _mm256_madd_epi16(m45, b(2)),
                            _mm256_madd_epi16(m67, b(3)),
                        ),
                    );
                    let dx = _mm256_set1_ps(*x.d.add(sb * T + c));
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dx), *a);
                    *a = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin, dx), *a);
                }
                wp = wp.add(Interleaved::Q4_K.group_block_bytes());
            }
            acc
        }
    }

    /// The `vpshufb` mask that gives, in each 32-bit lane, the lane's
    /// bytes `a` and `b` as its two 16-bit halves (`a, b < 4`).
    ///
    /// # Safety
    /// AVX is available.
    #[inline(always)]
    unsafe fn lane_bytes(a: i8, b: i8) -> __m256i {
        let mut mask = [-1i8; 32];
        for (i, m) in mask.iter_mut().enumerate() {
            let lane = 4 * (i / 4 % 4) as i8;
            match i % 4 {
                0 => *m = lane + a,
                2 => *m = lane + b,
                _ => {}
            }
        }
        // SAFETY: 32 bytes; the caller's AVX.
        unsafe { _mm256_loadu_si256(mask.as_ptr() as *const __m256i) }
    }

    /// IQ4_NL: Q4_0's nibbles, looked up in the IQ4 table (signed values),
    /// then as Q8_0's signed codes: each step `|w|` against the
    /// activations with `w`'s sign, widened every step.
    ///
    /// # Safety
    /// As for [`tile`].
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn iq4_nl<const T: usize>(nb: usize, w: *const u8, x: &Acts) -> [__m256; T] {
        // SAFETY: caller's contract.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let low = _mm256_set1_epi8(0x0f);
            let table =
                _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_VALUES.as_ptr() as *const __m128i));
            let mut acc = [_mm256_setzero_ps(); T];
            let mut wp = w;
            let mut xp = x.codes as *const i32;
            for blk in 0..nb {
                if T == 1 {
                    prefetch_ahead(wp, Interleaved::IQ4_NL.group_block_bytes());
                }
                let d = _mm256_cvtph_ps(_mm_loadu_si128(wp as *const __m128i));
                let mut block = [_mm256_setzero_si256(); T];
                for j in 0..4 {
                    let v = _mm256_loadu_si256(wp.add(16 + 32 * j) as *const __m256i);
                    let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                    let hi = _mm256_shuffle_epi8(
                        table,
                        _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                    );
                    let (lo_u, hi_u) = (_mm256_sign_epi8(lo, lo), _mm256_sign_epi8(hi, hi));
                    for (c, s) in block.iter_mut().enumerate() {
                        let xl = _mm256_sign_epi8(_mm256_set1_epi32(*xp.add(j * T + c)), lo);
                        let xh = _mm256_sign_epi8(_mm256_set1_epi32(*xp.add((j + 4) * T + c)), hi);
                        let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo_u, xl), ones);
                        let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi_u, xh), ones);
                        *s = _mm256_add_epi32(*s, _mm256_add_epi32(pl, ph));
                    }
                }
                for (c, (a, s)) in acc.iter_mut().zip(block).enumerate() {
                    let dx = _mm256_set1_ps(*x.d.add(blk * T + c));
                    *a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), d), dx, *a);
                }
                wp = wp.add(Interleaved::IQ4_NL.group_block_bytes());
                xp = xp.add(8 * T);
            }
            acc
        }
    }

    /// Q8_0: signed codes, each step `|w|` against the activations with
    /// `w`'s sign, widened every step (a pair reaches 2 * 128 * 127).
    ///
    /// # Safety
    /// As for [`tile`].
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_0<const T: usize>(nb: usize, w: *const u8, x: &Acts) -> [__m256; T] {
        // SAFETY: caller's contract.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = [_mm256_setzero_ps(); T];
            let mut wp = w;
            let mut xp = x.codes as *const i32;
            for blk in 0..nb {
                if T == 1 {
                    prefetch_ahead(wp, Interleaved::Q8_0.group_block_bytes());
                }
                let d = _mm256_cvtph_ps(_mm_loadu_si128(wp as *const __m128i));
                let mut block = [_mm256_setzero_si256(); T];
                for j in 0..8 {
                    let v = _mm256_loadu_si256(wp.add(16 + 32 * j) as *const __m256i);
                    let vu = _mm256_sign_epi8(v, v);
                    for (c, s) in block.iter_mut().enumerate() {
                        let q = _mm256_sign_epi8(_mm256_set1_epi32(*xp.add(j * T + c)), v);
                        let pair = _mm256_maddubs_epi16(vu, q);
                        *s = _mm256_add_epi32(*s, _mm256_madd_epi16(pair, ones));
                    }
                }
                for (c, (a, s)) in acc.iter_mut().zip(block).enumerate() {
                    let dx = _mm256_set1_ps(*x.d.add(blk * T + c));
                    *a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), d), dx, *a);
                }
                wp = wp.add(Interleaved::Q8_0.group_block_bytes());
                xp = xp.add(8 * T);
            }
            acc
        }
    }
}
