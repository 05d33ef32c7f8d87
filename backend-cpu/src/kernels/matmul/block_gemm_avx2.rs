//! Weights in the CPU's interleaved layout (Q4_0 and IQ4_NL; Q4_K keeps
//! to `interleaved_gemm`'s own kernels) times many activation columns on
//! AVX2 (processors without AVX-512 VNNI): prompt processing, as an
//! integer GEMM whose blocks add in ggml's repacked order. The tile kernel
//! still takes every type `quant_format` reads.
//!
//! The columns are quantised to 8 bits once per call, four to a tile, their
//! codes interleaved four bytes at a time (`activation_quant::QActs`). The weights
//! are split a chunk of [`KC`] values at a time into panels of eight rows
//! whose codes are interleaved the same way, so that one 256-bit register
//! holds four consecutive codes of each of the eight rows. One step of four
//! values is then, per column, a broadcast of the column's four codes and
//! one `vpmaddubsw`, which leaves each row two 16-bit pair sums. An 8 x 4
//! register tile adds these up over a block, widens them once per block
//! (`vpmaddwd` by ones) and takes the block's scales in floats.
//!
//! `vpmaddubsw` multiplies unsigned by signed bytes and saturates its pair
//! sums at 2^15, so how long the 16-bit sums may run depends on the codes:
//!
//! - Q4_0, Q4_1 and Q4_K codes lie in 0..16: a pair sum is below
//!   2 * 15 * 127, and a 32-value block's eight steps add up to at most
//!   30480.
//! - Q5_0, Q5_1 and Q5_K codes lie in 0..32: four steps, then widen.
//! - Q2_K and Q3_K codes lie in 0..8: a 16-value block's four steps.
//! - Q6_K codes lie in 0..64: two steps, then widen.
//! - Q8_0 and IQ4 codes are signed: the panel keeps them signed and each
//!   step takes `|w|` against the column's codes with `w`'s sign (at most
//!   2 * 127 * 127 per pair), widened every step.
//!
//! The codes' offsets (8 for Q4_0, 16 for Q5_0, 4 for Q3_K, 32 for Q6_K)
//! come back as `-o * sum(q)` added to each block's 32-bit sum, and the
//! mins are one float multiply-add per block and column, as on the other
//! quantised paths.

use std::cell::RefCell;

use ggraph_core::DType;

use super::activation_quant::{qacts_len, quantize_acts};
use super::operands::Cols;
use super::quant_format::{Format, format};
use crate::kernels::interleave::Interleaved;
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Rows per panel (one 256-bit register of four-byte groups).
const R: usize = 8;
/// Columns per tile (the activations' tile width).
const C: usize = 4;
/// Values per chunk of the rows (a multiple of 256, so whole super-blocks).
const KC: usize = 1024;
/// Rows packed together: their panels stay in L2 while every column tile
/// of the chunk reads them.
const MC: usize = 128;
thread_local! {
    static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static PANELS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// How one weight type runs through the tile kernel.
#[derive(Clone, Copy)]
struct Kind {
    /// The format the rows decode in.
    decode: Format,
    /// The format the activations are quantised for: the same, but with no
    /// offset where the panel keeps signed codes.
    acts: Format,
}

fn kind(dtype: DType) -> Option<Kind> {
    let f = format(dtype)?;
    let acts = if f.signed {
        Format { offset: 0, ..f }
    } else {
        f
    };
    Some(Kind { decode: f, acts })
}

/// Where the panels come from.
#[derive(Clone, Copy)]
enum Panels {
    /// A matrix of `k` values a row already in the CPU's interleaved
    /// layout (`kernels::interleave`): packing only splits the nibbles.
    Interleaved {
        layout: Interleaved,
        ptr: *const u8,
        k: usize,
    },
}

// SAFETY: the weights are only read while the call lasts.
unsafe impl Sync for Panels {}
unsafe impl Send for Panels {}

impl Panels {
    fn k(&self) -> usize {
        match self {
            Panels::Interleaved { k, .. } => *k,
        }
    }

    fn dtype(&self) -> DType {
        match self {
            Panels::Interleaved { layout, .. } => layout.dtype(),
        }
    }
}

/// As [`gemm`], for the `m` rows of `k` values of a matrix in the CPU's
/// interleaved layout at `ptr`.
///
/// # Safety
/// `ptr` holds the whole matrix (`m` a multiple of eight rows).
pub(crate) unsafe fn gemm_interleaved(
    layout: Interleaved,
    ptr: *const u8,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    gemm_panels(Panels::Interleaved { layout, ptr, k }, m, b, out)
}

fn gemm_panels(source: Panels, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = source.k();
    let Some(kind) = kind(source.dtype()) else {
        return;
    };
    let qb = kind.decode.qb;
    let (tile, groups_per_block) = tile_fn(source.dtype());
    with_scratch(&ACTS, qacts_len(n, k, qb, C), |buf| {
        let acts = quantize_acts(b, k, kind.acts, C, 1, buf);
        let acts = &acts;
        let blocks = m.div_ceil(MC);
        let tiles = n.div_ceil(C);
        let (groups, per_group) = crate::kernels::parallel::column_split(blocks, tiles);
        let nblk = k / qb;
        let source = &source;
        team::for_each(blocks * groups, |task| {
            let (blk_row, g) = (task % blocks, task / blocks);
            let i0 = blk_row * MC;
            let rows = MC.min(m - i0);
            let panels = rows.div_ceil(R);
            let codes_len = panels * R * KC;
            let scales_len = panels * R * (KC / qb) * 4;
            with_scratch(&PANELS, codes_len + 2 * scales_len + R * KC, |pb| {
                let (pcodes, rest) = pb.split_at_mut(codes_len);
                let (dw, rest) = rest.split_at_mut(scales_len);
                let (mw, _decoded) = rest.split_at_mut(scales_len);
                // SAFETY: byte regions of whole f32s, 4-byte aligned:
                // `with_scratch` aligns its buffer to 64 bytes, and
                // codes_len and scales_len are multiples of 4.
                let (dw, mw) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(dw.as_mut_ptr() as *mut f32, dw.len() / 4),
                        std::slice::from_raw_parts_mut(mw.as_mut_ptr() as *mut f32, mw.len() / 4),
                    )
                };
                for v0 in (0..k).step_by(KC) {
                    let len = KC.min(k - v0);
                    let nb = len / qb;
                    for p in 0..panels {
                        let r0 = p * R;
                        let panel = Panel {
                            codes: &mut pcodes[r0 * len..(r0 + R) * len],
                            dw: &mut dw[r0 * nb..(r0 + R) * nb],
                            mw: &mut mw[r0 * nb..(r0 + R) * nb],
                        };
                        match *source {
                            Panels::Interleaved { layout, ptr, k } => {
                                let bs = layout.dtype().block_size();
                                let group = (i0 + r0) / R;
                                let at = (group * (k / bs) + v0 / bs) * layout.group_block_bytes();
                                // SAFETY: the matrix has whole groups of R
                                // rows (so does this panel), and this group
                                // holds the blocks of values v0..v0 + len.
                                unsafe {
                                    x86::split_interleaved(layout, ptr.add(at), len / bs, panel)
                                };
                            }
                        }
                    }
                    let blk0 = v0 / qb;
                    let t_end = ((g + 1) * per_group).min(tiles);
                    for t in g * per_group..t_end {
                        let j0 = t * C;
                        let nc = C.min(n - j0);
                        let xo = (t * nblk + blk0) * C;
                        let x = Acts {
                            codes: acts.codes[(t * k + v0) * C..].as_ptr(),
                            d: acts.d[xo..].as_ptr(),
                            bias: acts.bias[xo..].as_ptr(),
                            sx: acts.sx[xo..].as_ptr(),
                        };
                        for p in 0..panels {
                            let r0 = p * R;
                            let live = R.min(rows - r0);
                            // SAFETY: output column j0 + c holds m values;
                            // rows i0 + r0 .. + live of the group's columns
                            // belong to this task alone.
                            let dst = |c: usize| unsafe {
                                std::slice::from_raw_parts_mut(out.0[j0 + c].add(i0 + r0), live)
                            };
                            // each chunk goes on from the sums of the
                            // chunks before it: every block adds in order,
                            // as ggml adds them
                            let mut sums = [[0f32; R]; C];
                            if v0 > 0 {
                                for (c, s) in sums.iter_mut().enumerate().take(nc) {
                                    s[..live].copy_from_slice(dst(c));
                                }
                            }
                            // SAFETY: panel p holds nb blocks of R rows, the
                            // activation tile nb blocks of C columns.
                            unsafe {
                                tile(
                                    nb,
                                    groups_per_block,
                                    pcodes[r0 * len..].as_ptr(),
                                    dw[r0 * nb..].as_ptr(),
                                    mw[r0 * nb..].as_ptr(),
                                    &x,
                                    &mut sums,
                                )
                            };
                            for (c, col) in sums.iter().enumerate().take(nc) {
                                dst(c).copy_from_slice(&col[..live]);
                            }
                        }
                    }
                }
            });
        });
    });
}

/// One panel's share of the packing scratch: codes `[step][R rows][4]`,
/// and per block `[block][R rows]` the scales and mins.
struct Panel<'a> {
    codes: &'a mut [u8],
    dw: &'a mut [f32],
    mw: &'a mut [f32],
}

/// A tile of quantised activations from the chunk's first block on (see
/// `activation_quant::QActs`).
struct Acts {
    codes: *const i8,
    d: *const f32,
    bias: *const i32,
    sx: *const f32,
}

/// `sums[c][r] += dot(panel row r, column c)` over `nb` blocks in turn, each of
/// the given number of groups of steps.
///
/// # Safety
/// The panel holds `nb` blocks of R rows and the activation tile `nb`
/// blocks of C columns.
type TileFn = unsafe fn(usize, usize, *const u8, *const f32, *const f32, &Acts, &mut [[f32; R]; C]);

/// The tile kernel for `dtype` and how many groups of steps make a block.
fn tile_fn(dtype: DType) -> (TileFn, usize) {
    match dtype {
        // signed codes: widen every step
        DType::Q8_0 | DType::IQ4_NL | DType::IQ4_XS | DType::MXFP4 => {
            (x86::tile::<1, true, false, false>, 8)
        }
        // codes below 16: a 32-value block's eight steps in 16 bits
        DType::Q4_0 => (x86::tile::<8, false, true, false>, 1),
        DType::Q4_1 | DType::Q4_K => (x86::tile::<8, false, false, true>, 1),
        // codes below 32: four steps
        DType::Q5_0 => (x86::tile::<4, false, true, false>, 2),
        DType::Q5_1 | DType::Q5_K => (x86::tile::<4, false, false, true>, 2),
        // 16-value blocks of codes below 8: the block's four steps at once
        DType::Q2_K => (x86::tile::<4, false, false, true>, 1),
        DType::Q3_K => (x86::tile::<4, false, true, false>, 1),
        // Q6_K: codes below 64, two steps
        _ => (x86::tile::<2, false, true, false>, 2),
    }
}

mod x86 {
    use std::arch::x86_64::*;

    use super::{Acts, C, Interleaved, Panel, R};
    use crate::kernels::interleave::{block_scales, q4_k_scales};

    /// The tile kernel. A block is `groups` groups of `GROUP` four-value
    /// steps, after each of which the 16-bit pair sums are widened.
    /// `SIGNED` panels hold signed codes (sign trick); `BIAS` adds the
    /// activations' `-o * sum(q)` to each block's sum; `MIN` subtracts
    /// the blocks' mins.
    ///
    /// The group count is an argument, not a constant: as a constant, LLVM
    /// unrolled whole blocks and spilled, and the kernel measured slower
    /// for Q4_0 and Q8_0 (docs/performance.md).
    ///
    /// # Safety
    /// AVX2 and FMA; see [`super::TileFn`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile<
        const GROUP: usize,
        const SIGNED: bool,
        const BIAS: bool,
        const MIN: bool,
    >(
        nb: usize,
        groups: usize,
        codes: *const u8,
        dw: *const f32,
        mw: *const f32,
        x: &Acts,
        sums: &mut [[f32; R]; C],
    ) {
        // SAFETY: caller's contract.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = sums.map(|s| _mm256_loadu_ps(s.as_ptr()));
            let mut wp = codes;
            let mut xp = x.codes as *const i32;
            for blk in 0..nb {
                let mut block = [_mm256_setzero_si256(); C];
                for group in 0..groups {
                    let mut pairs = [_mm256_setzero_si256(); C];
                    for _ in 0..GROUP {
                        let w = _mm256_loadu_si256(wp as *const __m256i);
                        let wu = if SIGNED { _mm256_sign_epi8(w, w) } else { w };
                        for (c, s) in pairs.iter_mut().enumerate() {
                            let q = _mm256_set1_epi32(*xp.add(c));
                            let q = if SIGNED { _mm256_sign_epi8(q, w) } else { q };
                            *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(wu, q));
                        }
                        wp = wp.add(32);
                        xp = xp.add(C);
                    }
                    for (b, s) in block.iter_mut().zip(pairs) {
                        let wide = _mm256_madd_epi16(s, ones);
                        *b = if group == 0 {
                            wide
                        } else {
                            _mm256_add_epi32(*b, wide)
                        };
                    }
                }
                if BIAS {
                    for (c, b) in block.iter_mut().enumerate() {
                        *b = _mm256_add_epi32(*b, _mm256_set1_epi32(*x.bias.add(blk * C + c)));
                    }
                }
                let d = _mm256_loadu_ps(dw.add(blk * R));
                for (c, (a, b)) in acc.iter_mut().zip(block).enumerate() {
                    let dx = _mm256_set1_ps(*x.d.add(blk * C + c));
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(b), _mm256_mul_ps(d, dx), *a);
                }
                if MIN {
                    let mins = _mm256_loadu_ps(mw.add(blk * R));
                    for (c, a) in acc.iter_mut().enumerate() {
                        let sx = _mm256_set1_ps(*x.sx.add(blk * C + c));
                        *a = _mm256_fnmadd_ps(mins, sx, *a);
                    }
                }
            }
            for (s, a) in sums.iter_mut().zip(acc) {
                _mm256_storeu_ps(s.as_mut_ptr(), a);
            }
        }
    }

    /// Packs `nb` blocks of an interleaved group (`kernels::interleave`)
    /// from `w` into a panel: the codes as they are (Q8_0) or split into
    /// low and high nibbles (Q4_0, IQ4_NL and MXFP4: steps `j` and `j + 4`
    /// of the block, IQ4_NL's and MXFP4's then looked up in their tables;
    /// Q4_K: the same step of
    /// two sub-blocks), and the scales (and Q4_K's mins) as floats.
    ///
    /// # Safety
    /// AVX2 and F16C; `w` holds `nb` blocks of the group, and the panel
    /// has room for their values.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn split_interleaved(
        layout: Interleaved,
        w: *const u8,
        nb: usize,
        panel: Panel,
    ) {
        let block = layout.group_block_bytes();
        let values = layout.dtype().block_size();
        let (codes, dw, mw) = (panel.codes, panel.dw, panel.mw);
        // an invariant of the caller (the driver sizes the panel for the
        // chunk), checked once a panel because the stores below are raw
        assert!(codes.len() >= nb * values * R && dw.len() >= nb * values / 32 * R);
        // SAFETY: caller's contract; the slices are long enough (checked).
        unsafe {
            let low = _mm256_set1_epi8(0x0f);
            let lookup = layout.code_table().unwrap_or(&[0; 16]);
            let table =
                _mm256_broadcastsi128_si256(_mm_loadu_si128(lookup.as_ptr() as *const __m128i));
            let out = codes.as_mut_ptr();
            let split = |v: __m256i, lo: *mut u8, hi: *mut u8| {
                _mm256_storeu_si256(lo as *mut __m256i, _mm256_and_si256(v, low));
                let h = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                _mm256_storeu_si256(hi as *mut __m256i, h);
            };
            let at = layout.chunks_at();
            for b in 0..nb {
                let src = w.add(b * block);
                let dst = out.add(b * values * R);
                match layout {
                    Interleaved::Q4_0 | Interleaved::IQ4_NL | Interleaved::MXFP4 => {
                        let scales = block_scales(layout, src);
                        _mm256_storeu_ps(dw.as_mut_ptr().add(b * R), scales);
                        for j in 0..4 {
                            let v = _mm256_loadu_si256(src.add(at + 32 * j) as *const __m256i);
                            split(v, dst.add(32 * j), dst.add(32 * (j + 4)));
                        }
                        if layout.code_table().is_some() {
                            // the panel holds the table's signed values
                            for j in 0..8 {
                                let p = dst.add(32 * j) as *mut __m256i;
                                _mm256_storeu_si256(
                                    p,
                                    _mm256_shuffle_epi8(table, _mm256_loadu_si256(p)),
                                );
                            }
                        }
                    }
                    Interleaved::Q4_K => {
                        let mut scales = [[0f32; R]; 8];
                        let mut mins = [[0f32; R]; 8];
                        q4_k_scales(src, &mut scales, &mut mins);
                        for sub in 0..8 {
                            let i = (b * 8 + sub) * R;
                            dw[i..i + R].copy_from_slice(&scales[sub]);
                            mw[i..i + R].copy_from_slice(&mins[sub]);
                        }
                        let qs = src.add(at + 3 * 32);
                        for pair in 0..4 {
                            for step in 0..8 {
                                let v = _mm256_loadu_si256(
                                    qs.add((pair * 8 + step) * 32) as *const __m256i
                                );
                                let lo = dst.add(((2 * pair) * 8 + step) * 32);
                                let hi = dst.add(((2 * pair + 1) * 8 + step) * 32);
                                split(v, lo, hi);
                            }
                        }
                    }
                }
            }
        }
    }
}
