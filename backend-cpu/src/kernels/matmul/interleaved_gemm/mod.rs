//! Weights in the CPU's interleaved layout (`kernels::interleave`: Q4_0,
//! Q8_0, Q4_K and IQ4_NL rows in groups of eight) times any number of
//! columns, on AVX2 (`avx2`) and AVX-512 VNNI (`vnni`).
//!
//! The layout is the panel `block_gemm_avx2` builds on every call, stored
//! once at load: one 256-bit load gives four codes of each of eight rows
//! (Q4_0: after splitting the nibbles), so each step is a broadcast of a
//! column's four activation codes and one `vpmaddubsw` (`vpdpbusd` with
//! VNNI), and each group's eight sums land in the eight lanes of one
//! register, with no horizontal sums. With one column each task streams
//! its groups in order: one run of memory rather than a stream per row.
//! With more, a task takes [`MC`] rows a group at a time, and every column
//! tile passes over the group's whole rows while they are in cache (Q4_K:
//! any number of columns; the others up to [`TILES_MAX_N`], past which a
//! GEMM takes over). Activations are quantised as for
//! the GEMMs on ggml's rows (`activation_quant`), so the sums are the
//! same, but for Q4_K: one scale a super-block (ggml's Q8_K), so that its
//! sub-block scales and mins apply in integers.
//!
//! The same kernels take prompts of GGUF's rows of these types where ggml
//! would repack them (`gemm_rows`, which `dispatch` chooses): ggml sums
//! those in its repacked order, so each task interleaves each group of
//! rows it reaches into its scratch first.

mod avx2;
mod vnni;

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::activation_quant::{QActs, qacts_len, quantize_acts};
use super::block_gemm_avx2;
use super::kquants_in_ggml_order::{Step, step};
use super::operands::{Cols, ProductOf};
use super::quant_dot::panel;
use super::quant_format::{Format, format};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved};
use crate::kernels::isa::{self, Isa};
use crate::kernels::matmul::row_streaming::{PREFETCH_BYTES, prefetch_lines};
use crate::kernels::parallel::{column_split, par_ranges};
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Most columns the kernels here take; more go to a GEMM that reuses
/// each chunk of weights across the column tiles: `block_gemm_avx2`,
/// which splits the nibbles once per chunk, or with VNNI the panel path
/// (`quant_dot::panel`), as ggml's rows do (docs/performance.md).
const TILES_MAX_N: usize = 8;
/// Columns per tile with more than two columns (two go as a tile of two).
const C: usize = 4;
/// Rows a task takes with several columns.
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
    of: ProductOf,
    layout: Interleaved,
    a: *const u8,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    // SAFETY: caller's contract.
    unsafe { gemm_with(Kernels::active(), of, layout, a, k, m, b, out) }
}

/// As [`gemm`] for a matrix in GGUF's rows (`stride` bytes apart) of the
/// type `layout` lays out: each task interleaves each group of rows it
/// reaches into its scratch, so the sums are those of the interleaved
/// matrix, ggml's repacked order, with the kernels of `kernels`.
///
/// # Safety
/// The processor has the kernels' instruction set; `a` holds `m` rows (a
/// multiple of eight) of `k` values; the columns hold `k` values and the
/// outputs `m`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_rows(
    kernels: Kernels,
    of: ProductOf,
    layout: Interleaved,
    a: *const u8,
    stride: usize,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let weights = Weights::Rows { ptr: a, stride };
    // SAFETY: caller's contract.
    unsafe { gemm_from(kernels, of, layout, weights, k, m, b, out) }
}

/// As [`gemm`], with the few-column kernels of `kernels`.
///
/// # Safety
/// As for [`gemm`]; the processor has `kernels`' instruction set.
pub(super) unsafe fn gemm_with(
    kernels: Kernels,
    of: ProductOf,
    layout: Interleaved,
    a: *const u8,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    // SAFETY: caller's contract.
    unsafe { gemm_from(kernels, of, layout, Weights::Interleaved(a), k, m, b, out) }
}

/// The products of `weights`: past [`TILES_MAX_N`] columns a GEMM's
/// (but for Q4_K, whose dots stay on the few-column kernels, whose steps
/// are ggml's; and for GGUF's rows on AVX2, whose GEMM reads only the
/// layout), else the few-column kernels of `kernels` (the same sums).
///
/// # Safety
/// As for [`gemm_with`] or [`gemm_rows`], whichever `weights` come from.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_from(
    kernels: Kernels,
    of: ProductOf,
    layout: Interleaved,
    weights: Weights,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let n = b.0.len();
    // an invariant: Interleaved holds only types quant_format reads
    let Some(f) = format(layout.dtype()) else {
        return;
    };
    if n > TILES_MAX_N && layout != Interleaved::Q4_K {
        // SAFETY: caller's contract.
        unsafe {
            match (kernels, weights) {
                (Kernels::Avx2, Weights::Interleaved(a)) => {
                    return block_gemm_avx2::gemm_interleaved(layout, a, k, m, b, out);
                }
                (Kernels::Vnni, Weights::Interleaved(a)) => {
                    return panel::gemm_interleaved(f, layout, a, k, m, b, out);
                }
                (Kernels::Vnni, Weights::Rows { ptr, stride }) => {
                    return panel::gemm_rows(f, layout, ptr, stride, k, m, b, out);
                }
                (Kernels::Avx2, Weights::Rows { .. }) => {}
            }
        }
    }
    let acts_format = match layout {
        // one activation scale a super-block, as ggml's Q8_K: the
        // sub-blocks' scales and mins are then applied in integers
        Interleaved::Q4_K => Format { qb: QK, ..f },
        // on AVX2, signed codes stay signed (the sign trick): no offset
        _ if f.signed && kernels == Kernels::Avx2 => Format { offset: 0, ..f },
        _ => f,
    };
    let t = match n {
        1 | 2 => n,
        _ => C,
    };
    // weight blocks a row, and activation blocks a row
    let nblk = k / layout.dtype().block_size();
    let group_bytes = nblk * layout.group_block_bytes();
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
                    let mut mins = [[0f32; GROUP_ROWS]; 1];
                    // SAFETY: group g holds nblk blocks; the activations
                    // nblk blocks of one column.
                    unsafe {
                        weights.with_group(layout, g, nblk, group_bytes, |w| {
                            kernels.tile::<1>(layout, nblk, w, &x, false, &mut sums, &mut mins)
                        })
                    };
                    for (s, m) in sums[0].iter_mut().zip(mins[0]) {
                        *s -= m;
                    }
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
            of,
            k,
            m,
            n,
            group_bytes,
        };
        if n == 2 {
            columns::<2>(kernels, layout, weights, shape, acts, sums, out);
        } else {
            columns::<C>(kernels, layout, weights, shape, acts, sums, out);
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

/// The few-column kernels of one instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kernels {
    Avx2,
    Vnni,
}

impl Kernels {
    /// Both, lowest first.
    #[cfg(test)]
    pub(super) const ALL: [Kernels; 2] = [Kernels::Avx2, Kernels::Vnni];

    /// The instruction set they need.
    pub(super) fn isa(self) -> Isa {
        match self {
            Kernels::Avx2 => Isa::Avx2,
            Kernels::Vnni => Isa::Avx512Vnni,
        }
    }

    /// The best the active instruction set runs (at least AVX2, which the
    /// callers have checked).
    fn active() -> Kernels {
        Kernels::of(isa::active())
    }

    /// The best `isa` runs (at least AVX2, which the callers have checked).
    pub(super) fn of(isa: Isa) -> Kernels {
        if isa >= Kernels::Vnni.isa() {
            Kernels::Vnni
        } else {
            Kernels::Avx2
        }
    }

    /// `sums[c][r] += dot(row r of the group, column c)` over `nb` blocks
    /// of an interleaved group from `w`, `T` columns of activations, each
    /// block added to the sums in turn; Q4_K's dots go on from two sums,
    /// `sums` and `mins`, their difference ([`Q4kSums`]), a step a pair of
    /// sub-blocks where `pairs` says so.
    ///
    /// # Safety
    /// The processor has the kernels' instruction set; `w` holds `nb`
    /// blocks of the group and `x` `nb` blocks of `T` columns.
    unsafe fn tile<const T: usize>(
        self,
        layout: Interleaved,
        nb: usize,
        w: *const u8,
        x: &Acts,
        pairs: bool,
        sums: &mut [[f32; GROUP_ROWS]; T],
        mins: &mut [[f32; GROUP_ROWS]; T],
    ) {
        // SAFETY: caller's contract.
        unsafe {
            match self {
                Kernels::Avx2 => avx2::tile::<T>(layout, nb, w, x, pairs, sums, mins),
                Kernels::Vnni => vnni::tile::<T>(layout, nb, w, x, pairs, sums, mins),
            }
        }
    }
}

/// The op and the sizes of a product.
#[derive(Clone, Copy)]
struct Shape {
    of: ProductOf,
    k: usize,
    m: usize,
    n: usize,
    /// Bytes of one group of rows.
    group_bytes: usize,
}

/// Several columns, `T` a tile: a task takes [`MC`] rows (and a share of
/// the tiles), a group at a time, and every tile of its share passes over
/// the group's whole rows while they are in cache. The weights are then
/// read once, in order, one sequential stream a task (chunks of 1024
/// values a group, which kept activation chunks in L1, were sixteen
/// streams at once and up to half as fast, docs/performance.md).
fn columns<const T: usize>(
    kernels: Kernels,
    layout: Interleaved,
    weights: Weights,
    shape: Shape,
    acts: &QActs,
    sums: &[i32],
    out: &Cols<f32>,
) {
    let Shape {
        of,
        k,
        m,
        n,
        group_bytes,
    } = shape;
    let xblk = acts.nblk();
    let nb = k / layout.dtype().block_size();
    let blocks = m.div_ceil(MC);
    let tiles = n.div_ceil(T);
    let (col_groups, per_group) = column_split(blocks, tiles);
    team::for_each(blocks * col_groups, |task| {
        let (blk_row, cg) = (task % blocks, task / blocks);
        let g0 = blk_row * MC / GROUP_ROWS;
        let g_end = ((blk_row + 1) * MC).min(m) / GROUP_ROWS;
        let my_tiles = cg * per_group..((cg + 1) * per_group).min(tiles);
        for g in g0..g_end {
            let over_tiles = |w: *const u8| {
                for tile in my_tiles.clone() {
                    let j0 = tile * T;
                    let nc = T.min(n - j0);
                    let pairs = step(of, j0, n) == Step::Pair;
                    let x = Acts {
                        codes: acts.codes[tile * k * T..].as_ptr(),
                        d: acts.d[tile * xblk * T..].as_ptr(),
                        bias: acts.bias[tile * xblk * T..].as_ptr(),
                        sums: sums.get(tile * (k / QK) * 4 * T..).unwrap_or(&[]).as_ptr(),
                    };
                    // Q4_K's dots are two sums, their difference
                    let mut dots = [[0f32; GROUP_ROWS]; T];
                    let mut mins = [[0f32; GROUP_ROWS]; T];
                    // SAFETY: group g holds nb blocks; the tile as many
                    // blocks of T columns.
                    unsafe { kernels.tile::<T>(layout, nb, w, &x, pairs, &mut dots, &mut mins) };
                    for (c, (d, m)) in dots.iter().zip(&mins).enumerate().take(nc) {
                        // SAFETY: output column j0 + c holds m values; this
                        // task alone writes the rows of group g in the
                        // columns of its share.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                out.0[j0 + c].add(g * GROUP_ROWS),
                                GROUP_ROWS,
                            )
                        };
                        for ((o, d), m) in dst.iter_mut().zip(d).zip(m) {
                            *o = d - m;
                        }
                    }
                }
            };
            // SAFETY: the matrix holds group g's nb blocks.
            unsafe { weights.with_group(layout, g, nb, group_bytes, over_tiles) };
        }
    });
}

/// Where the groups come from, shared read-only by the tasks.
#[derive(Clone, Copy)]
enum Weights {
    /// The matrix in the interleaved layout.
    Interleaved(*const u8),
    /// GGUF's rows, `stride` bytes apart: a task interleaves each group
    /// it reaches into its scratch.
    Rows { ptr: *const u8, stride: usize },
}

// SAFETY: the weights are only read while the call lasts.
unsafe impl Sync for Weights {}
unsafe impl Send for Weights {}

thread_local! {
    /// A task's group interleaved from GGUF's rows.
    static GROUPS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Weights {
    /// Runs `f` on group `g` (`nb` blocks, `group_bytes` in the whole
    /// matrix) in the interleaved layout.
    ///
    /// # Safety
    /// The matrix holds the group.
    unsafe fn with_group<R>(
        self,
        layout: Interleaved,
        g: usize,
        nb: usize,
        group_bytes: usize,
        f: impl FnOnce(*const u8) -> R,
    ) -> R {
        match self {
            Weights::Interleaved(ptr) => f(ptr.wrapping_add(g * group_bytes)),
            Weights::Rows { ptr, stride } => {
                let row_bytes = nb * layout.block_bytes();
                with_scratch(&GROUPS, group_bytes, |buf| {
                    // SAFETY: caller's contract: the group's rows exist.
                    let src = unsafe {
                        std::slice::from_raw_parts(
                            ptr.add(g * GROUP_ROWS * stride),
                            (GROUP_ROWS - 1) * stride + row_bytes,
                        )
                    };
                    layout.pack_strided(src, stride, buf, row_bytes);
                    f(buf.as_ptr())
                })
            }
        }
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

/// Asks for the `len` bytes [`PREFETCH_BYTES`] past `at`, one request a
/// cache line: with one column the weights stream from memory once, and
/// the hardware's prefetch alone measured slower on matrices larger
/// than the cache (docs/performance.md).
#[inline(always)]
fn prefetch_ahead(at: *const u8, len: usize) {
    prefetch_lines(at.wrapping_add(PREFETCH_BYTES), len);
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

/// Q4_K's float steps, as ggml's repacked kernels take them: per step (a
/// super-block for the columns ggml's GEMV takes, a pair of sub-blocks
/// for those its GEMM takes: `kquants_in_ggml_order::step`) the rows'
/// integer sums times `d * dx` go to one accumulator and their mins' sums
/// times `dmin * dx` to another; the dots are the first less the second.
struct Q4kSums<const T: usize> {
    acc: [__m256; T],
    mins: [__m256; T],
}

impl<const T: usize> Q4kSums<T> {
    /// Adds one step: the rows' scaled sums `s` and mins' sums `m` of each
    /// column, times the rows' `d * dx` and `dmin * dx` of each column.
    ///
    /// # Safety
    /// AVX2 and FMA.
    #[inline(always)]
    unsafe fn step(&mut self, s: [__m256i; T], m: [__m256i; T], dd: [__m256; T], dm: [__m256; T]) {
        // SAFETY: the caller's AVX2 and FMA.
        unsafe {
            for c in 0..T {
                let (a, n) = (&mut self.acc[c], &mut self.mins[c]);
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), dd[c], *a);
                *n = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m[c]), dm[c], *n);
            }
        }
    }

    /// The rows' `d * dx` and `dmin * dx` of each column for super-block
    /// `sb` (of a group at `block`).
    ///
    /// # Safety
    /// AVX2 and F16C; `block` holds the group's super-block and `x` the
    /// super-block of `T` columns.
    #[inline(always)]
    unsafe fn scales(block: *const u8, x: &Acts, sb: usize) -> ([__m256; T], [__m256; T]) {
        // SAFETY: caller's contract.
        unsafe {
            let d = _mm256_cvtph_ps(_mm_loadu_si128(block as *const __m128i));
            let dmin = _mm256_cvtph_ps(_mm_loadu_si128(block.add(16) as *const __m128i));
            let dx: [__m256; T] = std::array::from_fn(|c| _mm256_set1_ps(*x.d.add(sb * T + c)));
            (
                dx.map(|dx| _mm256_mul_ps(d, dx)),
                dx.map(|dx| _mm256_mul_ps(dmin, dx)),
            )
        }
    }
}

/// Q4_K: the rows' 6-bit mins of each pair of sub-blocks (`mins`: of
/// sub-blocks 0..4 and 4..8, as `interleave::q4_k_scale_words` gives
/// them), a pair's two as the 16-bit halves of each row's lane.
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn q4_k_pair_min_words(mins: [__m256i; 2]) -> [__m256i; 4] {
    // SAFETY: the caller's AVX2.
    unsafe {
        // bytes j and j + 1 of each lane as its two 16-bit halves
        let (pair01, pair23) = (lane_bytes(0, 1), lane_bytes(2, 3));
        [
            _mm256_shuffle_epi8(mins[0], pair01),
            _mm256_shuffle_epi8(mins[0], pair23),
            _mm256_shuffle_epi8(mins[1], pair01),
            _mm256_shuffle_epi8(mins[1], pair23),
        ]
    }
}

/// Pair `p`'s mins (`words`, from [`q4_k_pair_min_words`]) against the
/// activations' sums of its two sub-blocks (`sub_block_sums`), per column,
/// in integers.
///
/// # Safety
/// AVX2; `x` holds super-block `sb` of `T` columns.
#[inline(always)]
unsafe fn q4_k_pair_mins<const T: usize>(
    words: __m256i,
    x: &Acts,
    sb: usize,
    p: usize,
) -> [__m256i; T] {
    // SAFETY: caller's contract.
    unsafe {
        let bs = x.sums.add((sb * 4 + p) * T);
        std::array::from_fn(|c| _mm256_madd_epi16(words, _mm256_set1_epi32(*bs.add(c))))
    }
}
