//! Quantised mul_mat: Q8_0, Q4_0, Q4_K or Q6_K weights times f32
//! activations, with integer dot products on the blocks.
//!
//! As ggml does, the activations are quantised once per call to 8 bits
//! (one f32 scale per block of `QB` values, `QB` being the length over
//! which the weights keep one scale: 32, or 16 for Q6_K). Every weight
//! format is read as unsigned codes `u` with a per-block scale `dw`, an
//! integer offset `o` and (Q4_K) a per-block min `mw`:
//!
//! ```text
//! w = dw * (u - o) - mw          x = dx * q
//! dot(w, x) over a block = dx * (dw * (sum(u * q) - o * sum(q)) - mw * sum(q))
//! ```
//!
//! `sum(u * q)` is `vpdpbusd` (unsigned times signed bytes) where the
//! processor has AVX-512 VNNI (`vpmaddubsw` on AVX2), and `o * sum(q)` is
//! folded into the integer accumulator's starting value, so the float
//! work is one convert and two multiply-adds per block.
//!
//! Paths, by processor and column count:
//!
//! - **block mat-vec** (VNNI, Q4_0, one column): short rows in
//!   `transposed_matvec` (eight rows' blocks transposed in 256-bit
//!   registers so that each lane is a row), long ones in `block_matvec`
//!   (256-bit, activations stored in the order the blocks unpack).
//! - **K-quant dot** (Q4_K/Q6_K, one to eight columns): `kquant_dot`,
//!   the activations in ggml's Q8_K form (one scale per 256 values), the
//!   blocks read straight from memory; 512-bit kernels with VNNI, 256-bit
//!   ones on AVX2.
//! - **fused** (VNNI, Q8_0/Q4_0, up to `DIRECT_MAX_N` columns): the
//!   kernel reads codes and f16 scales straight from the blocks, two
//!   blocks per zmm, so the weights stream through once (token
//!   generation).
//! - **direct** (other types or processors, few columns): weight rows are
//!   decoded a chunk at a time into codes in L1 and dotted with each
//!   column.
//! - **panel** (VNNI, more columns): the codes of 32 rows are interleaved
//!   four bytes at a time (16 x 16 dword transposes) so that one
//!   `vpdpbusd` advances 16 rows by four values against a broadcast
//!   column; a 32 x 4 register tile keeps whole blocks in integer
//!   accumulators.
//! - without VNNI, Q8_0/Q4_0 up to eight columns: `block_dot_avx2` reads
//!   the blocks in place; more columns:
//!   `block_gemm_avx2`, the same panel idea with `vpmaddubsw` on eight
//!   interleaved rows.
//! - below AVX2, the float GEMM of `gemm.rs`, its weight panels
//!   dequantised as they are packed.

use std::cell::RefCell;

use crate::team;
use ggraph_core::DType;
use ggraph_core::quant::f16_to_f32;

use super::isa::Isa;
use super::matmul::{Cols, WeightRows};
use super::scratch::with_scratch;

/// Above this many columns, the panel path (where VNNI is available).
pub(crate) const DIRECT_MAX_N: usize = 4;

/// Values per decoded chunk of a row on the direct path (a multiple of
/// 256, so whole super-blocks).
const DIRECT_KC: usize = 2048;
/// Rows decoded together on the direct path.
const DIRECT_R: usize = 4;
/// Columns per call of a direct kernel.
const DIRECT_C: usize = 4;

/// Rows per interleaved panel (two zmm of 16 rows).
const PANEL_R: usize = 32;
/// Columns per panel tile.
const PANEL_C: usize = 4;
/// Values per panel chunk (a multiple of 256).
const PANEL_KC: usize = 4096;

/// How one weight format reads as codes.
#[derive(Clone, Copy)]
pub(super) struct Format {
    pub(super) dtype: DType,
    /// Values per scale.
    pub(super) qb: usize,
    /// Offset subtracted from the codes.
    pub(super) offset: i32,
    /// Whether blocks carry a min (`mw`).
    pub(super) has_min: bool,
}

pub(super) fn format(dtype: DType) -> Option<Format> {
    let (qb, offset, has_min) = match dtype {
        DType::Q8_0 => (32, 128, false),
        DType::Q4_0 => (32, 8, false),
        DType::Q4_K => (32, 0, true),
        DType::Q6_K => (16, 32, false),
        _ => return None,
    };
    Some(Format {
        dtype,
        qb,
        offset,
        has_min,
    })
}

/// `out[j][i] = dot(weights row i, b[j])` for quantised weights.
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    if m == 0 || n == 0 {
        return;
    }
    let Some(f) = format(a.dtype).filter(|_| a.elem_stride == a.dtype.type_size()) else {
        dequantized_fallback(isa, a, m, b, out);
        return;
    };
    // K-quants, few columns: blocks read in place (512-bit kernels with
    // VNNI, 256-bit ones on AVX2)
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 && super::kquant_dot::takes(&a, n) {
        super::kquant_dot::gemm(isa, a, m, b, out);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni {
        // short Q4_0 rows eight at a time, long ones streamed
        if n == 1 && super::transposed_matvec::takes(&a) {
            super::transposed_matvec::matvec(a, m, b, out);
            return;
        }
        if n == 1 && super::block_matvec::takes(&a) {
            super::block_matvec::matvec(a, m, b, out);
            return;
        }
    }
    // without VNNI, Q8_0/Q4_0 with few columns: blocks read in place
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Avx512Vnni && isa >= Isa::Avx2 {
        if super::block_dot_avx2::takes(&a, n) {
            super::block_dot_avx2::gemm(a, m, b, out);
            return;
        }
        // many columns: an integer GEMM over interleaved row panels
        if n > super::gemm::DOT_MAX_N && super::block_gemm_avx2::takes(&a) {
            super::block_gemm_avx2::gemm(a, m, b, out);
            return;
        }
    }
    if isa == Isa::Avx512Vnni && n > DIRECT_MAX_N {
        panel_path(f, a, m, b, out);
    } else if isa != Isa::Avx512Vnni && n > super::gemm::DOT_MAX_N {
        // below AVX2, many columns go faster through the float GEMM, its
        // weight panels dequantised as they are packed
        super::gemm::gemm(isa, a, m, b, out);
    } else if isa == Isa::Avx512Vnni && matches!(f.dtype, DType::Q8_0 | DType::Q4_0) {
        fused_path(f, a, m, b, out);
    } else {
        direct_path(isa, f, a, m, b, out);
    }
}

/// Weights whose blocks are not packed in a row (never made by the graph
/// builder, but representable): dequantise rows to f32 and use the float
/// kernels.
fn dequantized_fallback(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let k = a.k;
    let mut rows = vec![0f32; m * k];
    let bs = a.dtype.block_size();
    let mut tmp = vec![0f32; bs];
    for i in 0..m {
        for blk in 0..k / bs {
            // SAFETY: block blk of row i is in bounds.
            let src = unsafe {
                std::slice::from_raw_parts(
                    a.ptr.add(i * a.stride + blk * a.elem_stride),
                    a.dtype.type_size(),
                )
            };
            let _ = ggraph_core::quant::dequantize_row(a.dtype, src, &mut tmp);
            rows[i * k + blk * bs..i * k + (blk + 1) * bs].copy_from_slice(&tmp);
        }
    }
    let f = WeightRows {
        ptr: rows.as_ptr() as *const u8,
        stride: k * 4,
        elem_stride: 4,
        dtype: DType::F32,
        k,
    };
    super::gemm::gemm(isa, f, m, b, out);
}

// ---- decoding weights ---------------------------------------------------------

/// Unpacks the 6-bit scale and min of Q4_K sub-block `j`.
#[inline]
fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The 6-bit scales and mins of a Q4_K super-block's 8 sub-blocks, as four
/// words of four bytes: scales 0..4, scales 4..8, mins 0..4, mins 4..8.
/// Sub-blocks 0..4 sit in the low bits of bytes 0..4 (scales) and 4..8
/// (mins) of the 12; 4..8 in the nibbles of bytes 8..12, their top bits in
/// the top two bits of bytes 0..8.
#[inline(always)]
pub(super) fn q4k_scales_mins(s: &[u8; 12]) -> [u32; 4] {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (word(0), word(1), word(2));
    [
        u0 & 0x3f3f_3f3f,
        (u2 & 0x0f0f_0f0f) | (((u0 >> 6) & 0x0303_0303) << 4),
        u1 & 0x3f3f_3f3f,
        ((u2 >> 4) & 0x0f0f_0f0f) | (((u1 >> 6) & 0x0303_0303) << 4),
    ]
}

/// Decodes values `v0..v0 + codes.len()` of one weight row (whole
/// super-blocks for the K-quants) into unsigned codes, block scales and
/// (Q4_K) block mins.
///
/// # Safety
/// `row` must hold the row's blocks up to `v0 + codes.len()` values.
pub(super) unsafe fn decode(
    f: Format,
    row: *const u8,
    v0: usize,
    codes: &mut [u8],
    dw: &mut [f32],
    mw: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if super::isa::active() >= Isa::Avx2 {
        // SAFETY: AVX2 and F16C are available; the caller's contract.
        unsafe { x86::decode_avx2(f, row, v0, codes, dw, mw) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { decode_with::<false>(f, row, v0, codes, dw, mw) }
}

/// The body of [`decode`]; `SIMD` (only on x86-64, with AVX2 and F16C)
/// takes the codes and scales with vector instructions, which inline
/// into the AVX2 instantiation.
///
/// # Safety
/// As [`decode`]; with `SIMD`, the processor has AVX2 and F16C.
#[inline(always)]
unsafe fn decode_with<const SIMD: bool>(
    f: Format,
    row: *const u8,
    v0: usize,
    codes: &mut [u8],
    dw: &mut [f32],
    mw: &mut [f32],
) {
    let len = codes.len();
    let ts = f.dtype.type_size();
    let bs = f.dtype.block_size();
    let nblocks = len / bs;
    // SAFETY: caller's contract; each arm reads whole blocks.
    let src = unsafe { std::slice::from_raw_parts(row.add(v0 / bs * ts), nblocks * ts) };
    let f16 = |b: &[u8], at: usize| {
        #[cfg(target_arch = "x86_64")]
        if SIMD {
            // SAFETY: F16C is available (SIMD); two bytes at `at`.
            return unsafe { super::math::f16_at(b[at..at + 2].as_ptr()) };
        }
        f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
    };
    match f.dtype {
        DType::Q8_0 => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                dw[bi] = f16(blk, 0);
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 32 code bytes in and out.
                    unsafe { x86::q8_codes(blk[2..].as_ptr(), codes[bi * 32..].as_mut_ptr()) };
                    continue;
                }
                for (c, q) in codes[bi * 32..bi * 32 + 32].iter_mut().zip(&blk[2..]) {
                    *c = q ^ 0x80;
                }
            }
        }
        DType::Q4_0 => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                dw[bi] = f16(blk, 0);
                let c = &mut codes[bi * 32..bi * 32 + 32];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 16 bytes in, 32 codes out.
                    unsafe { x86::q4_codes(blk[2..].as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for (j, q) in blk[2..].iter().enumerate() {
                    c[j] = q & 0x0f;
                    c[j + 16] = q >> 4;
                }
            }
        }
        DType::Q4_K => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let d = f16(blk, 0);
                let dmin = f16(blk, 2);
                let scales = &blk[4..16];
                let qs = &blk[16..];
                for j in 0..8 {
                    let (sc, mn) = q4k_scale_min(j, scales);
                    dw[bi * 8 + j] = d * sc as f32;
                    mw[bi * 8 + j] = dmin * mn as f32;
                }
                let c = &mut codes[bi * 256..bi * 256 + 256];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 128 code bytes in, 256 out.
                    unsafe { x86::q4k_codes(qs.as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for g in 0..4 {
                    for l in 0..32 {
                        let q = qs[32 * g + l];
                        c[64 * g + l] = q & 0x0f;
                        c[64 * g + 32 + l] = q >> 4;
                    }
                }
            }
        }
        DType::Q6_K => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let (ql, rest) = blk.split_at(128);
                let (qh, rest) = rest.split_at(64);
                let (sc, d) = rest.split_at(16);
                let d = f16(d, 0);
                for (j, s) in sc.iter().enumerate() {
                    dw[bi * 16 + j] = d * (*s as i8) as f32;
                }
                let c = &mut codes[bi * 256..bi * 256 + 256];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 192 code bytes in, 256 out.
                    unsafe { x86::q6k_codes(ql.as_ptr(), qh.as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for half in 0..2 {
                    let ql = &ql[64 * half..];
                    let qh = &qh[32 * half..];
                    let o = &mut c[128 * half..];
                    for l in 0..32 {
                        o[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                        o[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                        o[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                        o[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                    }
                }
            }
        }
        _ => {}
    }
}

// ---- quantising activations ------------------------------------------------------

/// Activations quantised to 8 bits, columns in tiles of `t`:
/// codes `[tile][k / 4][t][4]`, and per block `[tile][block][t]` the scale
/// `d`, the integer `bias` that starts the block's accumulator
/// (`-o * sum(q) / lanes`), and `sx = d * sum(q)` for the min term.
pub(super) struct QActs<'a> {
    k: usize,
    qb: usize,
    pub(super) codes: &'a [i8],
    pub(super) d: &'a [f32],
    pub(super) bias: &'a [i32],
    pub(super) sx: &'a [f32],
}

impl QActs<'_> {
    fn nblk(&self) -> usize {
        self.k / self.qb
    }
}

/// Bytes of scratch for `n` columns in tiles of `t`.
pub(super) fn qacts_len(n: usize, k: usize, qb: usize, t: usize) -> usize {
    let cols = n.div_ceil(t) * t;
    cols * k + 3 * cols * (k / qb) * 4 + 4 * 64
}

/// Quantises the columns into `buf` (see `QActs`). `lanes` is how many
/// accumulator lanes share a block in the kernel that will read them.
pub(super) fn quantize_acts<'a>(
    cols: &Cols<f32>,
    k: usize,
    f: Format,
    t: usize,
    lanes: i32,
    buf: &'a mut [u8],
) -> QActs<'a> {
    let n = cols.0.len();
    let tiles = n.div_ceil(t);
    let ncols = tiles * t;
    let nblk = k / f.qb;
    let (codes, rest) = buf.split_at_mut(ncols * k);
    let pad = rest.as_ptr().align_offset(64);
    let rest = &mut rest[pad..];
    let (d, rest) = rest.split_at_mut(ncols * nblk * 4);
    let (bias, rest) = rest.split_at_mut(ncols * nblk * 4);
    let sx = &mut rest[..ncols * nblk * 4];
    // SAFETY: 64-byte aligned regions of the right lengths, reinterpreted.
    let (codes, d, bias, sx) = unsafe {
        (
            std::slice::from_raw_parts_mut(codes.as_mut_ptr() as *mut i8, codes.len()),
            std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut f32, ncols * nblk),
            std::slice::from_raw_parts_mut(bias.as_mut_ptr() as *mut i32, ncols * nblk),
            std::slice::from_raw_parts_mut(sx.as_mut_ptr() as *mut f32, ncols * nblk),
        )
    };
    let offset = f.offset;
    let qb = f.qb;
    struct Tiles {
        codes: *mut i8,
        d: *mut f32,
        bias: *mut i32,
        sx: *mut f32,
    }
    // SAFETY: each task writes the regions of its own tile only.
    unsafe impl Sync for Tiles {}
    let base = Tiles {
        codes: codes.as_mut_ptr(),
        d: d.as_mut_ptr(),
        bias: bias.as_mut_ptr(),
        sx: sx.as_mut_ptr(),
    };
    let base = &base;
    team::for_each(tiles, |tile| {
        // SAFETY: tile `tile` of each region (t * k codes, t * nblk of
        // the others) lies inside it and belongs to this task alone.
        let (codes, d, bias, sx) = unsafe {
            (
                std::slice::from_raw_parts_mut(base.codes.add(tile * t * k), t * k),
                std::slice::from_raw_parts_mut(base.d.add(tile * t * nblk), t * nblk),
                std::slice::from_raw_parts_mut(base.bias.add(tile * t * nblk), t * nblk),
                std::slice::from_raw_parts_mut(base.sx.add(tile * t * nblk), t * nblk),
            )
        };
        // a column past the last (padding of the last tile) is all zeros
        let quantize = |j: usize, blk: usize, q: &mut [i8]| {
            if j < n {
                // SAFETY: column j holds k values.
                let x = unsafe { std::slice::from_raw_parts(cols.0[j].add(blk * qb), qb) };
                quantize_block(x, q)
            } else {
                q.fill(0);
                (0.0, 0)
            }
        };
        #[cfg(target_arch = "x86_64")]
        if t == 1 && qb == 32 && tile < n && super::isa::active() >= Isa::Avx2 {
            // SAFETY: AVX2 is available; column `tile` holds k values and
            // the regions nblk blocks.
            unsafe {
                x86::quantize_column32(
                    cols.0[tile],
                    nblk,
                    codes.as_mut_ptr(),
                    d.as_mut_ptr(),
                    bias.as_mut_ptr(),
                )
            };
            for blk in 0..nblk {
                let sum = bias[blk];
                bias[blk] = -offset * sum / lanes;
                sx[blk] = d[blk] * sum as f32;
            }
            return;
        }
        let mut q = [0i8; 32];
        for c in 0..t {
            let j = tile * t + c;
            for blk in 0..nblk {
                let (dx, sum) = if t == 1 {
                    // one column per tile: the codes are in order
                    quantize(j, blk, &mut codes[blk * qb..(blk + 1) * qb])
                } else {
                    let r = quantize(j, blk, &mut q[..qb]);
                    for g in 0..qb / 4 {
                        let at = ((blk * qb / 4 + g) * t + c) * 4;
                        codes[at..at + 4].copy_from_slice(&q[g * 4..g * 4 + 4]);
                    }
                    r
                };
                d[blk * t + c] = dx;
                bias[blk * t + c] = -offset * sum / lanes;
                sx[blk * t + c] = dx * sum as f32;
            }
        }
    });
    QActs {
        k,
        qb,
        codes,
        d,
        bias,
        sx,
    }
}

/// Quantises one block to codes in -127..=127; returns the scale and the
/// sum of the codes.
#[inline]
pub(super) fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
        unsafe fn avx512(x: &[f32], q: &mut [i8]) -> (f32, i32) {
            quantize_block_body(x, q)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &[f32], q: &mut [i8]) -> (f32, i32) {
            quantize_block_body(x, q)
        }
        let isa = super::isa::active();
        if isa >= Isa::Avx512 {
            // SAFETY: the processor has AVX-512 F/BW (checked by `active`).
            return unsafe { avx512(x, q) };
        }
        if isa >= Isa::Avx2 && x.len() == 32 && q.len() == 32 {
            // SAFETY: the processor has AVX2 (checked by `active`); 32
            // values in and out.
            return unsafe { x86::quantize32(x.as_ptr(), q.as_mut_ptr()) };
        }
        if isa >= Isa::Avx2 {
            // SAFETY: the processor has AVX2 and FMA (checked by `active`).
            return unsafe { avx2(x, q) };
        }
    }
    quantize_block_body(x, q)
}

/// The body of [`quantize_block`]: lane-wise maxima and sums over fixed
/// chunks, so that each instruction-set wrapper vectorises it.
#[inline(always)]
fn quantize_block_body(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    const L: usize = 16;
    let mut lanes = [0f32; L];
    let whole = x.len() - x.len() % L;
    for chunk in x[..whole].chunks_exact(L) {
        for l in 0..L {
            lanes[l] = lanes[l].max(chunk[l].abs());
        }
    }
    let amax = x[whole..]
        .iter()
        .fold(lanes.iter().fold(0f32, |m, v| m.max(*v)), |m, v| {
            m.max(v.abs())
        });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sums = [0i32; L];
    for (qc, xc) in q[..whole]
        .chunks_exact_mut(L)
        .zip(x[..whole].chunks_exact(L))
    {
        for l in 0..L {
            // round to nearest (ties to even) by the 1.5 * 2^23 trick: |v * id| <= 127
            let r = ((xc[l] * id + 12582912.0) - 12582912.0) as i32;
            qc[l] = r as i8;
            sums[l] += r;
        }
    }
    let mut sum: i32 = sums.iter().sum();
    for (o, v) in q[whole..].iter_mut().zip(&x[whole..]) {
        let r = ((v * id + 12582912.0) - 12582912.0) as i32;
        *o = r as i8;
        sum += r;
    }
    (d, sum)
}

// ---- direct path --------------------------------------------------------------------

thread_local! {
    static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static DECODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Decoded weight rows for a direct kernel: `R` rows of codes
/// `stride` bytes apart, scales and mins `sstride` floats apart.
struct Decoded {
    codes: *const u8,
    stride: usize,
    dw: *const f32,
    mw: *const f32,
    sstride: usize,
}

/// Column data of a direct kernel: for each of its C columns, the codes
/// and per-block values from block `blk0` on.
struct ColsQ {
    codes: [*const i8; DIRECT_C],
    d: [*const f32; DIRECT_C],
    bias: [*const i32; DIRECT_C],
    sx: [*const f32; DIRECT_C],
}

/// `out[r * C + c] += dot` over `nb` blocks.
type DirectFn = unsafe fn(f: &Format, nb: usize, w: &Decoded, x: &ColsQ, out: *mut f32);

fn direct_fn(isa: Isa, f: &Format, r: usize, c: usize) -> DirectFn {
    macro_rules! by_c {
        ($k:ident, $r:literal) => {
            match c {
                1 => $k::<$r, 1> as DirectFn,
                2 => $k::<$r, 2> as DirectFn,
                3 => $k::<$r, 3> as DirectFn,
                _ => $k::<$r, 4> as DirectFn,
            }
        };
    }
    macro_rules! by_rc {
        ($k:ident) => {
            if r == DIRECT_R {
                by_c!($k, 4)
            } else {
                by_c!($k, 1)
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    {
        use x86::*;
        if isa == Isa::Avx512Vnni {
            return if f.qb == 32 {
                by_rc!(direct_vnni32)
            } else {
                by_rc!(direct_vnni16)
            };
        }
        if isa >= Isa::Avx2 {
            return match (f.qb, f.dtype == DType::Q8_0) {
                (32, true) => by_rc!(direct_avx2_q8),
                (32, false) => by_rc!(direct_avx2_32),
                _ => by_rc!(direct_avx2_16),
            };
        }
    }
    let _ = isa;
    by_rc!(direct_portable)
}

fn direct_path(isa: Isa, f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    let lanes = if isa >= Isa::Avx2 {
        (f.qb / 4) as i32
    } else {
        1
    };
    with_scratch(&ACTS, qacts_len(n, k, f.qb, 1), |buf| {
        let acts = quantize_acts(b, k, f, 1, lanes, buf);
        let acts = &acts;
        let nblk = acts.nblk();
        super::parallel::par_ranges(m, 16, |range| {
            // a single column: whole rows (long streams, which the
            // prefetchers follow); more: chunks that stay in L1
            let kc = if n == 1 { k } else { DIRECT_KC.min(k) };
            let sb = kc / f.qb;
            let need = DIRECT_R * kc + 2 * DIRECT_R * sb * 4 + 64;
            with_scratch(&DECODED, need, |dec| {
                let (codes, rest) = dec.split_at_mut(DIRECT_R * kc);
                let pad = rest.as_ptr().align_offset(4);
                let rest = &mut rest[pad..];
                // SAFETY: aligned f32 region of 2 * R * sb values.
                let scales = unsafe {
                    std::slice::from_raw_parts_mut(rest.as_mut_ptr() as *mut f32, 2 * DIRECT_R * sb)
                };
                let (dw, mw) = scales.split_at_mut(DIRECT_R * sb);
                let mut res = [0f32; DIRECT_R * DIRECT_C];
                // partial sums on the stack unless there are many columns (only on
                // the fallback paths)
                let mut small = [0f32; DIRECT_R * 16];
                let mut big = Vec::new();
                let sums: &mut [f32] = if n <= 16 {
                    &mut small[..DIRECT_R * n]
                } else {
                    big.resize(DIRECT_R * n, 0f32);
                    &mut big
                };
                let mut i = range.start;
                while i < range.end {
                    let r = if range.end - i >= DIRECT_R {
                        DIRECT_R
                    } else {
                        1
                    };
                    sums.fill(0.0);
                    for v0 in (0..k).step_by(kc) {
                        let len = kc.min(k - v0);
                        let nb = len / f.qb;
                        for q in 0..r {
                            // SAFETY: row i + q < m; values v0..v0+len exist.
                            unsafe {
                                decode(
                                    f,
                                    a.row(i + q),
                                    v0,
                                    &mut codes[q * kc..q * kc + len],
                                    &mut dw[q * sb..q * sb + nb],
                                    &mut mw[q * sb..q * sb + nb],
                                )
                            };
                        }
                        let w = Decoded {
                            codes: codes.as_ptr(),
                            stride: kc,
                            dw: dw.as_ptr(),
                            mw: mw.as_ptr(),
                            sstride: sb,
                        };
                        let blk0 = v0 / f.qb;
                        for j0 in (0..n).step_by(DIRECT_C) {
                            let c = DIRECT_C.min(n - j0);
                            let mut x = ColsQ {
                                codes: [std::ptr::null(); DIRECT_C],
                                d: [std::ptr::null(); DIRECT_C],
                                bias: [std::ptr::null(); DIRECT_C],
                                sx: [std::ptr::null(); DIRECT_C],
                            };
                            for cc in 0..c {
                                let j = j0 + cc;
                                x.codes[cc] = acts.codes[j * k + v0..].as_ptr();
                                x.d[cc] = acts.d[j * nblk + blk0..].as_ptr();
                                x.bias[cc] = acts.bias[j * nblk + blk0..].as_ptr();
                                x.sx[cc] = acts.sx[j * nblk + blk0..].as_ptr();
                            }
                            res[..r * c].fill(0.0);
                            // SAFETY: r rows and c columns of nb blocks each.
                            unsafe { direct_fn(isa, &f, r, c)(&f, nb, &w, &x, res.as_mut_ptr()) };
                            for q in 0..r {
                                for cc in 0..c {
                                    sums[q * n + j0 + cc] += res[q * c + cc];
                                }
                            }
                        }
                    }
                    for q in 0..r {
                        for j in 0..n {
                            // SAFETY: output column j holds m values; row i + q is this task's.
                            unsafe { *out.0[j].add(i + q) = sums[q * n + j] };
                        }
                    }
                    i += r;
                }
            });
        });
    });
}

/// The portable direct kernel (also compiled for AVX2 below).
///
/// # Safety
/// `w` holds R rows and `x` C columns of `nb` blocks.
#[inline(always)]
unsafe fn direct_generic<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    let qb = f.qb;
    // SAFETY: caller's contract.
    unsafe {
        for r in 0..R {
            let codes = std::slice::from_raw_parts(w.codes.add(r * w.stride), nb * qb);
            for c in 0..C {
                let xs = std::slice::from_raw_parts(x.codes[c], nb * qb);
                let mut acc = 0f32;
                for blk in 0..nb {
                    let u = &codes[blk * qb..blk * qb + qb];
                    let q = &xs[blk * qb..blk * qb + qb];
                    let mut p = 0i32;
                    for (a, b) in u.iter().zip(q) {
                        p += *a as i32 * *b as i32;
                    }
                    p += *x.bias[c].add(blk);
                    let dw = *w.dw.add(r * w.sstride + blk);
                    acc += *x.d[c].add(blk) * dw * p as f32;
                    if f.has_min {
                        acc -= *w.mw.add(r * w.sstride + blk) * *x.sx[c].add(blk);
                    }
                }
                *out.add(r * C + c) += acc;
            }
        }
    }
}

unsafe fn direct_portable<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe { direct_generic::<R, C>(f, nb, w, x, out) }
}

// ---- fused direct path (Q8_0, Q4_0 with VNNI) -------------------------------------

/// Blocks per chunk of a row on the fused path.
#[cfg(target_arch = "x86_64")]
const FUSED_BLOCKS: usize = 64;

/// The direct path for Q8_0 and Q4_0 without a decode pass: the kernel
/// reads codes and scales straight from the weight blocks, two blocks
/// per zmm, so the weights are streamed exactly once.
#[cfg(target_arch = "x86_64")]
fn fused_path(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    let lanes = (f.qb / 4) as i32;
    let ts = f.dtype.type_size();
    with_scratch(&ACTS, qacts_len(n, k, f.qb, 1), |buf| {
        let acts = quantize_acts(b, k, f, 1, lanes, buf);
        let acts = &acts;
        let nblk = acts.nblk();
        super::parallel::par_ranges(m, 16, |range| {
            if n == 1 {
                // one column: the kernel runs the task's whole rows (each
                // one long stream) in one call
                let x = ColsQ {
                    codes: [
                        acts.codes.as_ptr(),
                        std::ptr::null(),
                        std::ptr::null(),
                        std::ptr::null(),
                    ],
                    d: [
                        acts.d.as_ptr(),
                        std::ptr::null(),
                        std::ptr::null(),
                        std::ptr::null(),
                    ],
                    bias: [
                        acts.bias.as_ptr(),
                        std::ptr::null(),
                        std::ptr::null(),
                        std::ptr::null(),
                    ],
                    sx: [std::ptr::null(); DIRECT_C],
                };
                let ahead = super::matmul::matvec_prefetch(a.stride);
                // SAFETY: rows range of a hold nblk blocks each, a.stride
                // apart; output column 0 holds m values, these rows this
                // task's alone.
                unsafe {
                    x86::fused_matvec(
                        f.dtype,
                        a.row(range.start),
                        a.stride,
                        range.len(),
                        nblk,
                        &x,
                        ahead,
                        out.0[0].add(range.start),
                    )
                };
                return;
            }
            let fb = FUSED_BLOCKS;
            {
                // partial sums on the stack unless there are many columns (only on
                // the fallback paths)
                let mut small = [0f32; DIRECT_R * 16];
                let mut big = Vec::new();
                let sums: &mut [f32] = if n <= 16 {
                    &mut small[..DIRECT_R * n]
                } else {
                    big.resize(DIRECT_R * n, 0f32);
                    &mut big
                };
                let mut res = [0f32; DIRECT_R * DIRECT_C];
                let mut i = range.start;
                while i < range.end {
                    let r = if range.end - i >= DIRECT_R {
                        DIRECT_R
                    } else {
                        1
                    };
                    sums.fill(0.0);
                    for b0 in (0..nblk).step_by(fb) {
                        let nb = fb.min(nblk - b0);
                        let mut rows = [std::ptr::null::<u8>(); DIRECT_R];
                        for q in 0..r {
                            // SAFETY: row i + q < m, block b0 exists.
                            rows[q] = unsafe { a.row(i + q).add(b0 * ts) };
                        }
                        for j0 in (0..n).step_by(DIRECT_C) {
                            let c = DIRECT_C.min(n - j0);
                            let mut x = ColsQ {
                                codes: [std::ptr::null(); DIRECT_C],
                                d: [std::ptr::null(); DIRECT_C],
                                bias: [std::ptr::null(); DIRECT_C],
                                sx: [std::ptr::null(); DIRECT_C],
                            };
                            for cc in 0..c {
                                let j = j0 + cc;
                                x.codes[cc] = acts.codes[j * k + b0 * f.qb..].as_ptr();
                                x.d[cc] = acts.d[j * nblk + b0..].as_ptr();
                                x.bias[cc] = acts.bias[j * nblk + b0..].as_ptr();
                            }
                            // short whole rows: fetch rows
                            // PREFETCH_BYTES on; else further along the row
                            let ahead = if nb == nblk {
                                super::matmul::rows_ahead(nblk * ts, r * a.stride, 64 * ts)
                            } else {
                                64 * ts
                            };
                            let w = x86::FusedRows { rows, ahead };
                            res[..r * c].fill(0.0);
                            // SAFETY: r rows of nb blocks from b0, c columns.
                            unsafe { x86::fused_fn(f.dtype, r, c)(nb, &w, &x, res.as_mut_ptr()) };
                            for q in 0..r {
                                for cc in 0..c {
                                    sums[q * n + j0 + cc] += res[q * c + cc];
                                }
                            }
                        }
                    }
                    for q in 0..r {
                        for j in 0..n {
                            // SAFETY: output column j holds m values; row i + q is this task's.
                            unsafe { *out.0[j].add(i + q) = sums[q * n + j] };
                        }
                    }
                    i += r;
                }
            }
        });
    });
}

#[cfg(not(target_arch = "x86_64"))]
fn fused_path(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    direct_path(Isa::Portable, f, a, m, b, out)
}

// ---- panel path -----------------------------------------------------------------------

thread_local! {
    static PANEL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

#[cfg(target_arch = "x86_64")]
fn panel_path(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    with_scratch(&ACTS, qacts_len(n, k, f.qb, PANEL_C), |buf| {
        let acts = quantize_acts(b, k, f, PANEL_C, 1, buf);
        let acts = &acts;
        let panels = m.div_ceil(PANEL_R);
        let tiles = n.div_ceil(PANEL_C);
        let (groups, per_group) = super::parallel::column_split(panels, tiles);
        let nblk = k / f.qb;
        let kc = PANEL_KC.min(k);
        let sb = kc / f.qb;
        team::for_each(panels * groups, |task| {
            let (p, g) = (task % panels, task / panels);
            let i0 = p * PANEL_R;
            let rows = PANEL_R.min(m - i0);
            let need = PANEL_R * kc + 2 * PANEL_R * sb * 4 + 16 * kc + 2 * sb * 4 + 3 * 64;
            with_scratch(&PANEL, need, |pb| {
                let (pcodes, rest) = pb.split_at_mut(PANEL_R * kc);
                let pad = rest.as_ptr().align_offset(64);
                let rest = &mut rest[pad..];
                let (scales, rest) = rest.split_at_mut(2 * PANEL_R * sb * 4);
                // SAFETY: aligned f32 region.
                let scales = unsafe {
                    std::slice::from_raw_parts_mut(
                        scales.as_mut_ptr() as *mut f32,
                        2 * PANEL_R * sb,
                    )
                };
                let (pdw, pmw) = scales.split_at_mut(PANEL_R * sb);
                let (tcodes, rest) = rest.split_at_mut(16 * kc);
                let pad = rest.as_ptr().align_offset(4);
                let rest = &mut rest[pad..];
                // SAFETY: aligned f32 region.
                let tscales = unsafe {
                    std::slice::from_raw_parts_mut(rest.as_mut_ptr() as *mut f32, 2 * sb)
                };
                let (tdw, tmw) = tscales.split_at_mut(sb);
                for v0 in (0..k).step_by(kc) {
                    let len = kc.min(k - v0);
                    let nb = len / f.qb;
                    // interleave the codes of the panel's rows, four bytes at a time
                    if matches!(f.dtype, DType::Q8_0 | DType::Q4_0) {
                        let mut ptrs = [std::ptr::null::<u8>(); PANEL_R];
                        for (r, q) in ptrs.iter_mut().enumerate().take(rows) {
                            *q = a.row(i0 + r);
                        }
                        // SAFETY: the non-null rows hold blocks v0 / 32 .. + nb;
                        // the panel holds nb blocks of 32 rows.
                        unsafe {
                            x86::repack_panel(
                                f.dtype == DType::Q4_0,
                                &ptrs,
                                v0 / f.qb,
                                nb,
                                pcodes.as_mut_ptr(),
                                pdw.as_mut_ptr(),
                            )
                        };
                    } else {
                        // decode 16 rows at a time, then interleave them with
                        // 16 x 16 dword transposes
                        for half in 0..2 {
                            for i in 0..16 {
                                let r = half * 16 + i;
                                let codes = &mut tcodes[i * len..(i + 1) * len];
                                if r < rows {
                                    // SAFETY: row i0 + r < m, values v0..v0+len exist.
                                    unsafe {
                                        decode(
                                            f,
                                            a.row(i0 + r),
                                            v0,
                                            codes,
                                            &mut tdw[..nb],
                                            &mut tmw[..nb],
                                        )
                                    };
                                } else {
                                    codes.fill(0);
                                    tdw[..nb].fill(0.0);
                                    tmw[..nb].fill(0.0);
                                }
                                for blk in 0..nb {
                                    pdw[blk * PANEL_R + r] = tdw[blk];
                                    pmw[blk * PANEL_R + r] = tmw[blk];
                                }
                            }
                            // SAFETY: 16 decoded rows of len bytes (a multiple of 64);
                            // the panel holds len / 4 steps of 32 rows.
                            unsafe {
                                x86::interleave16(tcodes.as_ptr(), len, pcodes.as_mut_ptr(), half)
                            };
                        }
                    }
                    let blk0 = v0 / f.qb;
                    let t_end = ((g + 1) * per_group).min(tiles);
                    for t in g * per_group..t_end {
                        let j0 = t * PANEL_C;
                        let nc = PANEL_C.min(n - j0);
                        let xcodes = acts.codes[(t * k + v0) * PANEL_C..].as_ptr();
                        let xo = (t * nblk + blk0) * PANEL_C;
                        let xd = acts.d[xo..].as_ptr();
                        let xb = acts.bias[xo..].as_ptr();
                        let xs = acts.sx[xo..].as_ptr();
                        let mut tile = [[0f32; PANEL_R]; PANEL_C];
                        // SAFETY: the panel and the tile hold nb blocks.
                        unsafe {
                            x86::panel_vnni(
                                &f,
                                nb,
                                pcodes.as_ptr(),
                                pdw.as_ptr(),
                                pmw.as_ptr(),
                                xcodes,
                                xd,
                                xb,
                                xs,
                                &mut tile,
                            )
                        };
                        for (c, col) in tile.iter().enumerate().take(nc) {
                            // SAFETY: output column j0 + c holds m values; rows
                            // i0..i0+rows of the tile's columns are this task's.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(out.0[j0 + c].add(i0), rows)
                            };
                            if v0 == 0 {
                                dst.copy_from_slice(&col[..rows]);
                            } else {
                                for (d, v) in dst.iter_mut().zip(col) {
                                    *d += v;
                                }
                            }
                        }
                    }
                }
            });
        });
    });
}

#[cfg(not(target_arch = "x86_64"))]
fn panel_path(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    direct_path(Isa::Portable, f, a, m, b, out)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::math::hsum256;
    use super::{ColsQ, Decoded, Format, PANEL_C, PANEL_R};

    /// [`super::quantize_block`] for 32 values on AVX2, with the same
    /// arithmetic (so the same codes): scale `amax / 127`, codes rounded
    /// to nearest, ties to even.
    ///
    /// # Safety
    /// AVX2 is available; 32 values at `x` and room for 32 codes at `q`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize32(x: *const f32, q: *mut i8) -> (f32, i32) {
        // SAFETY: caller's contract.
        unsafe {
            let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.add(8 * i)));
            let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
            let a: [__m256; 4] = std::array::from_fn(|i| _mm256_and_ps(v[i], abs));
            let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
            let i: [__m256i; 4] =
                std::array::from_fn(|j| _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id)));
            let s = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let sum = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)));
            // packs interleave the 128-bit lanes: values 0-3, 8-11, 16-19,
            // 24-27, 4-7, ... ; one permute puts them back in order
            let w = _mm256_packs_epi16(
                _mm256_packs_epi32(i[0], i[1]),
                _mm256_packs_epi32(i[2], i[3]),
            );
            let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(q as *mut __m256i, w);
            (d, sum)
        }
    }

    /// [`quantize32`] over `nblk` blocks of a column, their scales to `d`
    /// and code sums to `sum` (one call, so that the blocks' divisions
    /// overlap).
    ///
    /// # Safety
    /// AVX2 is available; `x` holds `nblk * 32` values, `codes` as many
    /// bytes and `d` and `sum` `nblk` values.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_column32(
        x: *const f32,
        nblk: usize,
        codes: *mut i8,
        d: *mut f32,
        sum: *mut i32,
    ) {
        for b in 0..nblk {
            // SAFETY: caller's contract.
            unsafe {
                let (db, sb) = quantize32(x.add(32 * b), codes.add(32 * b));
                *d.add(b) = db;
                *sum.add(b) = sb;
            }
        }
    }

    pub(super) unsafe fn direct_avx2_q8<const R: usize, const C: usize>(
        f: &Format,
        nb: usize,
        w: &Decoded,
        x: &ColsQ,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe { direct_avx2::<R, C, 32, true>(f, nb, w, x, out) }
    }

    pub(super) unsafe fn direct_avx2_32<const R: usize, const C: usize>(
        f: &Format,
        nb: usize,
        w: &Decoded,
        x: &ColsQ,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe { direct_avx2::<R, C, 32, false>(f, nb, w, x, out) }
    }

    pub(super) unsafe fn direct_avx2_16<const R: usize, const C: usize>(
        f: &Format,
        nb: usize,
        w: &Decoded,
        x: &ColsQ,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe { direct_avx2::<R, C, 16, false>(f, nb, w, x, out) }
    }

    /// Sums of byte products of one block as 8 (QB 32) or 4 (QB 16) i32
    /// lanes in a ymm (the upper half zero for QB 16): `vpmaddubsw` then
    /// `vpmaddwd` by ones. Codes below 64 cannot saturate the 16-bit pair
    /// sums; Q8_0 (codes up to 255) goes through the signs instead: |w|
    /// times x with w's sign, which needs no offset (`Q8`).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block_dot_avx2<const QB: usize, const Q8: bool>(
        u: *const u8,
        q: *const i8,
    ) -> __m256i {
        // SAFETY: caller's contract (QB bytes at each pointer).
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let (u, q) = if QB == 32 {
                (
                    _mm256_loadu_si256(u as *const __m256i),
                    _mm256_loadu_si256(q as *const __m256i),
                )
            } else {
                (
                    _mm256_zextsi128_si256(_mm_loadu_si128(u as *const __m128i)),
                    _mm256_zextsi128_si256(_mm_loadu_si128(q as *const __m128i)),
                )
            };
            let p16 = if Q8 {
                let ws = _mm256_xor_si256(u, _mm256_set1_epi8(-128));
                _mm256_maddubs_epi16(_mm256_sign_epi8(ws, ws), _mm256_sign_epi8(q, ws))
            } else {
                _mm256_maddubs_epi16(u, q)
            };
            _mm256_madd_epi16(p16, ones)
        }
    }

    /// The AVX2 direct kernel (`vpmaddubsw`); activations quantised with
    /// `lanes = QB / 4`, so the per-lane bias is added to all 8 lanes for
    /// QB 32 (4 lanes hold it for QB 16: the upper 4 stay zero).
    ///
    /// # Safety
    /// As for `super::DirectFn`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn direct_avx2<const R: usize, const C: usize, const QB: usize, const Q8: bool>(
        f: &Format,
        nb: usize,
        w: &Decoded,
        x: &ColsQ,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe {
            let lane_mask = if QB == 32 {
                _mm256_set1_epi32(-1)
            } else {
                _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0)
            };
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let mut macc = [[0f32; C]; R];
            for blk in 0..nb {
                for r in 0..R {
                    let u = w.codes.add(r * w.stride + blk * QB);
                    let dw = *w.dw.add(r * w.sstride + blk);
                    for c in 0..C {
                        let mut p = block_dot_avx2::<QB, Q8>(u, x.codes[c].add(blk * QB));
                        if !Q8 {
                            let bias = _mm256_set1_epi32(*x.bias[c].add(blk));
                            p = _mm256_add_epi32(p, _mm256_and_si256(bias, lane_mask));
                        }
                        let s = _mm256_set1_ps(dw * *x.d[c].add(blk));
                        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[r][c]);
                    }
                    if f.has_min {
                        let mw = *w.mw.add(r * w.sstride + blk);
                        for c in 0..C {
                            macc[r][c] += mw * *x.sx[c].add(blk);
                        }
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    *out.add(r * C + c) += hsum256(acc[r][c]) - macc[r][c];
                }
            }
        }
    }

    /// Direct kernel for 32-value blocks: one 256-bit `vpdpbusd` per
    /// block, row and column.
    ///
    /// # Safety
    /// As for `super::DirectFn`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub(super) unsafe fn direct_vnni32<const R: usize, const C: usize>(
        f: &Format,
        nb: usize,
        w: &Decoded,
        x: &ColsQ,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let mut macc = [[0f32; C]; R];
            for blk in 0..nb {
                let mut xs = [_mm256_setzero_si256(); C];
                let mut init = [_mm256_setzero_si256(); C];
                let mut dx = [0f32; C];
                for c in 0..C {
                    xs[c] = _mm256_loadu_si256(x.codes[c].add(blk * 32) as *const __m256i);
                    init[c] = _mm256_set1_epi32(*x.bias[c].add(blk));
                    dx[c] = *x.d[c].add(blk);
                }
                for r in 0..R {
                    let u =
                        _mm256_loadu_si256(w.codes.add(r * w.stride + blk * 32) as *const __m256i);
                    let dw = *w.dw.add(r * w.sstride + blk);
                    for c in 0..C {
                        let p = _mm256_dpbusd_epi32(init[c], u, xs[c]);
                        let s = _mm256_set1_ps(dw * dx[c]);
                        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[r][c]);
                    }
                    if f.has_min {
                        let mw = *w.mw.add(r * w.sstride + blk);
                        for c in 0..C {
                            macc[r][c] += mw * *x.sx[c].add(blk);
                        }
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    *out.add(r * C + c) += hsum256(acc[r][c]) - macc[r][c];
                }
            }
        }
    }

    /// Direct kernel for 16-value blocks (Q6_K), with 128-bit dots.
    ///
    /// # Safety
    /// As for `super::DirectFn`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub(super) unsafe fn direct_vnni16<const R: usize, const C: usize>(
        f: &Format,
        nb: usize,
        w: &Decoded,
        x: &ColsQ,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe {
            let mut acc = [[_mm_setzero_ps(); C]; R];
            let mut macc = [[0f32; C]; R];
            for blk in 0..nb {
                let mut xs = [_mm_setzero_si128(); C];
                let mut init = [_mm_setzero_si128(); C];
                let mut dx = [0f32; C];
                for c in 0..C {
                    xs[c] = _mm_loadu_si128(x.codes[c].add(blk * 16) as *const __m128i);
                    init[c] = _mm_set1_epi32(*x.bias[c].add(blk));
                    dx[c] = *x.d[c].add(blk);
                }
                for r in 0..R {
                    let u = _mm_loadu_si128(w.codes.add(r * w.stride + blk * 16) as *const __m128i);
                    let dw = *w.dw.add(r * w.sstride + blk);
                    for c in 0..C {
                        let p = _mm_dpbusd_epi32(init[c], u, xs[c]);
                        let s = _mm_set1_ps(dw * dx[c]);
                        acc[r][c] = _mm_fmadd_ps(_mm_cvtepi32_ps(p), s, acc[r][c]);
                    }
                    if f.has_min {
                        let mw = *w.mw.add(r * w.sstride + blk);
                        for c in 0..C {
                            macc[r][c] += mw * *x.sx[c].add(blk);
                        }
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    let v = acc[r][c];
                    let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
                    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
                    *out.add(r * C + c) += _mm_cvtss_f32(s) - macc[r][c];
                }
            }
        }
    }

    /// The panel kernel: 32 interleaved rows times PANEL_C columns over
    /// `nb` blocks, into `tile[c][r]`.
    ///
    /// # Safety
    /// The panel holds `nb` blocks of 32 rows; the activation tile `nb`
    /// blocks of PANEL_C columns.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub(super) unsafe fn panel_vnni(
        f: &Format,
        nb: usize,
        codes: *const u8,
        dw: *const f32,
        mw: *const f32,
        xcodes: *const i8,
        xd: *const f32,
        xbias: *const i32,
        xsx: *const f32,
        tile: &mut [[f32; PANEL_R]; PANEL_C],
    ) {
        const C: usize = PANEL_C;
        let steps = f.qb / 4;
        // SAFETY: caller's contract.
        unsafe {
            let mut fa0 = [_mm512_setzero_ps(); C];
            let mut fa1 = [_mm512_setzero_ps(); C];
            let mut wp = codes;
            let mut xp = xcodes as *const i32;
            for blk in 0..nb {
                let mut ia0 = [_mm512_setzero_si512(); C];
                let mut ia1 = [_mm512_setzero_si512(); C];
                for c in 0..C {
                    let b = _mm512_set1_epi32(*xbias.add(blk * C + c));
                    ia0[c] = b;
                    ia1[c] = b;
                }
                for _ in 0..steps {
                    let w0 = _mm512_loadu_si512(wp as *const __m512i);
                    let w1 = _mm512_loadu_si512(wp.add(64) as *const __m512i);
                    for c in 0..C {
                        let xb = _mm512_set1_epi32(*xp.add(c));
                        ia0[c] = _mm512_dpbusd_epi32(ia0[c], w0, xb);
                        ia1[c] = _mm512_dpbusd_epi32(ia1[c], w1, xb);
                    }
                    wp = wp.add(128);
                    xp = xp.add(C);
                }
                let d0 = _mm512_loadu_ps(dw.add(blk * PANEL_R));
                let d1 = _mm512_loadu_ps(dw.add(blk * PANEL_R + 16));
                for c in 0..C {
                    let dx = _mm512_set1_ps(*xd.add(blk * C + c));
                    fa0[c] =
                        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ia0[c]), d0), dx, fa0[c]);
                    fa1[c] =
                        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ia1[c]), d1), dx, fa1[c]);
                }
                if f.has_min {
                    let m0 = _mm512_loadu_ps(mw.add(blk * PANEL_R));
                    let m1 = _mm512_loadu_ps(mw.add(blk * PANEL_R + 16));
                    for c in 0..C {
                        let sx = _mm512_set1_ps(*xsx.add(blk * C + c));
                        fa0[c] = _mm512_fnmadd_ps(m0, sx, fa0[c]);
                        fa1[c] = _mm512_fnmadd_ps(m1, sx, fa1[c]);
                    }
                }
            }
            for c in 0..C {
                _mm512_storeu_ps(tile[c].as_mut_ptr(), fa0[c]);
                _mm512_storeu_ps(tile[c].as_mut_ptr().add(16), fa1[c]);
            }
        }
    }

    /// Rows of a fused kernel: pointers to their first block.
    pub(super) struct FusedRows {
        pub rows: [*const u8; super::DIRECT_R],
        /// How far past the current block of each row to prefetch, in
        /// bytes.
        pub ahead: usize,
    }

    /// Widens the f16 scales (first two bytes) of `nb` blocks of `ts`
    /// bytes into `out`, 16 at a time with a gather (narrow stores and a
    /// wide reload would stall on store forwarding).
    ///
    /// # Safety
    /// `row` must hold that many blocks (of at least 4 bytes).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn block_scales(row: *const u8, ts: usize, nb: usize, out: &mut [f32]) {
        let mut b = 0;
        // SAFETY: caller's contract; each gathered dword lies in its block.
        unsafe {
            let idx = _mm512_mullo_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                _mm512_set1_epi32(ts as i32),
            );
            while b + 16 <= nb {
                let g = _mm512_i32gather_epi32::<1>(idx, row.add(b * ts) as *const i32);
                let wide = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
                _mm512_storeu_ps(out.as_mut_ptr().add(b), wide);
                b += 16;
            }
            while b < nb {
                out[b] = ggraph_core::quant::f16_to_f32(
                    (row.add(b * ts) as *const u16).read_unaligned(),
                );
                b += 1;
            }
        }
    }

    pub(super) type FusedFn = unsafe fn(nb: usize, w: &FusedRows, x: &ColsQ, out: *mut f32);

    /// `count` rows of Q8_0/Q4_0 blocks (`nb` each, `stride` bytes apart
    /// from `first`) times one quantised column, into `out[0..count]`.
    ///
    /// # Safety
    /// The rows and the column hold `nb` blocks; `out` holds `count`
    /// values.
    pub(super) unsafe fn fused_matvec(
        dtype: ggraph_core::DType,
        first: *const u8,
        stride: usize,
        count: usize,
        nb: usize,
        x: &ColsQ,
        ahead: usize,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe {
            if dtype == ggraph_core::DType::Q4_0 {
                fused_matvec_rows::<true>(first, stride, count, nb, x, ahead, out)
            } else {
                fused_matvec_rows::<false>(first, stride, count, nb, x, ahead, out)
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    unsafe fn fused_matvec_rows<const Q4: bool>(
        first: *const u8,
        stride: usize,
        count: usize,
        nb: usize,
        x: &ColsQ,
        ahead: usize,
        out: *mut f32,
    ) {
        const R: usize = super::DIRECT_R;
        let ts = if Q4 { 18 } else { 34 };
        let grouped = !super::super::matmul::matvec_one_row(nb * ts);
        // SAFETY: caller's contract: every row i < count exists.
        unsafe {
            let mut i = 0;
            while grouped && i + R <= count {
                let mut rows = [std::ptr::null::<u8>(); R];
                for (q, row) in rows.iter_mut().enumerate() {
                    *row = first.add((i + q) * stride);
                }
                let mut res = [0f32; R];
                fused_vnni::<R, 1, Q4>(nb, &FusedRows { rows, ahead }, x, res.as_mut_ptr());
                std::ptr::copy_nonoverlapping(res.as_ptr(), out.add(i), R);
                i += R;
            }
            while i < count {
                let mut rows = [std::ptr::null::<u8>(); R];
                rows[0] = first.add(i * stride);
                let mut res = [0f32; R];
                fused_vnni::<1, 1, Q4>(nb, &FusedRows { rows, ahead }, x, res.as_mut_ptr());
                *out.add(i) = res[0];
                i += 1;
            }
        }
    }

    pub(super) fn fused_fn(dtype: ggraph_core::DType, r: usize, c: usize) -> FusedFn {
        macro_rules! by_c {
            ($r:literal, $q4:literal) => {
                match c {
                    1 => fused_vnni::<$r, 1, $q4> as FusedFn,
                    2 => fused_vnni::<$r, 2, $q4> as FusedFn,
                    3 => fused_vnni::<$r, 3, $q4> as FusedFn,
                    _ => fused_vnni::<$r, 4, $q4> as FusedFn,
                }
            };
        }
        let q4 = dtype == ggraph_core::DType::Q4_0;
        match (r == super::DIRECT_R, q4) {
            (true, false) => by_c!(4, false),
            (true, true) => by_c!(4, true),
            (false, false) => by_c!(1, false),
            (false, true) => by_c!(1, true),
        }
    }

    /// Codes of blocks `blk` and `blk + 1` of a Q8_0 (`Q4 = false`) or Q4_0
    /// row as one zmm of unsigned bytes, block `blk` in the low half.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
    unsafe fn pair_codes<const Q4: bool>(row: *const u8, blk: usize) -> __m512i {
        // SAFETY: caller's contract (both blocks exist).
        unsafe {
            if Q4 {
                let p = row.add(blk * 18 + 2);
                let lo = _mm_loadu_si128(p as *const __m128i);
                let hi = _mm_loadu_si128(p.add(18) as *const __m128i);
                let t = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi);
                let z =
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(t), _mm256_srli_epi16::<4>(t));
                let z = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
                // [n0, n1, n0 >> 4, n1 >> 4] -> [n0, n0 >> 4, n1, n1 >> 4]
                _mm512_shuffle_i64x2::<0xd8>(z, z)
            } else {
                let p = row.add(blk * 34 + 2);
                let lo = _mm256_loadu_si256(p as *const __m256i);
                let hi = _mm256_loadu_si256(p.add(34) as *const __m256i);
                let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                _mm512_xor_si512(z, _mm512_set1_epi8(-128))
            }
        }
    }

    /// Codes of one block as a ymm of unsigned bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
    unsafe fn one_codes<const Q4: bool>(row: *const u8, blk: usize) -> __m256i {
        // SAFETY: caller's contract (the block exists).
        unsafe {
            if Q4 {
                let t = _mm_loadu_si128(row.add(blk * 18 + 2) as *const __m128i);
                let z =
                    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(t), _mm_srli_epi16::<4>(t));
                _mm256_and_si256(z, _mm256_set1_epi8(0x0f))
            } else {
                let z = _mm256_loadu_si256(row.add(blk * 34 + 2) as *const __m256i);
                _mm256_xor_si256(z, _mm256_set1_epi8(-128))
            }
        }
    }

    /// The f16 scales of blocks `blk` and `blk + 1`, widened and spread
    /// over the halves of a zmm.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c")]
    unsafe fn pair_scales<const Q4: bool>(row: *const u8, blk: usize) -> __m512 {
        let ts = if Q4 { 18 } else { 34 };
        // SAFETY: caller's contract (both blocks exist).
        unsafe {
            let p = row.add(blk * ts);
            let d0 = (p as *const u16).read_unaligned() as i32;
            let d1 = (p.add(ts) as *const u16).read_unaligned() as i32;
            let two = _mm_cvtph_ps(_mm_cvtsi32_si128(d0 | (d1 << 16)));
            let idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
            _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(two))
        }
    }

    /// Two consecutive f32 (or i32) values spread over the halves of a zmm.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn pair_ps(p: *const f32) -> __m512 {
        // SAFETY: caller's contract (two values at p).
        unsafe {
            let two = _mm512_castpd_ps(_mm512_set1_pd((p as *const f64).read_unaligned()));
            let idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
            _mm512_permutexvar_ps(idx, two)
        }
    }

    /// The fused direct kernel: R rows of Q8_0/Q4_0 blocks times C
    /// quantised columns over `nb` blocks, two blocks per `vpdpbusd`.
    ///
    /// # Safety
    /// The rows hold `nb` blocks, the columns `nb` blocks of codes and
    /// scales; out holds R * C values.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub(super) unsafe fn fused_vnni<const R: usize, const C: usize, const Q4: bool>(
        nb: usize,
        w: &FusedRows,
        x: &ColsQ,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            let mut blk = 0;
            while blk + 2 <= nb {
                let mut xs = [_mm512_setzero_si512(); C];
                let mut init = [_mm512_setzero_si512(); C];
                let mut dx = [_mm512_setzero_ps(); C];
                for c in 0..C {
                    xs[c] = _mm512_loadu_si512(x.codes[c].add(blk * 32) as *const __m512i);
                    init[c] = _mm512_castps_si512(pair_ps(x.bias[c].add(blk) as *const f32));
                    dx[c] = pair_ps(x.d[c].add(blk));
                }
                for r in 0..R {
                    // the weights are read once, a chunk of nb blocks at a time:
                    // fetch the next chunk of the row while this one is computed
                    let ts = if Q4 { 18 } else { 34 };
                    // both ends of the pair: a 68-byte step alone would skip
                    // a cache line now and then
                    let ahead = w.rows[r].wrapping_add(blk * ts + w.ahead);
                    _mm_prefetch::<_MM_HINT_T1>(ahead as *const i8);
                    _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(2 * ts - 1) as *const i8);
                    let u = pair_codes::<Q4>(w.rows[r], blk);
                    let dw = pair_scales::<Q4>(w.rows[r], blk);
                    for c in 0..C {
                        let p = _mm512_dpbusd_epi32(init[c], u, xs[c]);
                        let s = _mm512_mul_ps(dw, dx[c]);
                        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc[r][c]);
                    }
                }
                blk += 2;
            }
            let mut tail = [[0f32; C]; R];
            if blk < nb {
                for r in 0..R {
                    let u = one_codes::<Q4>(w.rows[r], blk);
                    let dw =
                        super::super::math::f16_at(w.rows[r].add(blk * if Q4 { 18 } else { 34 }));
                    for c in 0..C {
                        let xs = _mm256_loadu_si256(x.codes[c].add(blk * 32) as *const __m256i);
                        let init = _mm256_set1_epi32(*x.bias[c].add(blk));
                        let p = _mm256_dpbusd_epi32(init, u, xs);
                        tail[r][c] = hsum256(_mm256_cvtepi32_ps(p)) * dw * *x.d[c].add(blk);
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    *out.add(r * C + c) += _mm512_reduce_add_ps(acc[r][c]) + tail[r][c];
                }
            }
        }
    }

    /// Interleaves `nb` blocks (from block `blk0`) of 32 Q8_0 or Q4_0 rows
    /// into a panel: codes `[step][32 rows][4]`, scales `[block][32 rows]`.
    /// Null rows (past the end of the matrix) get zero codes and scales.
    ///
    /// # Safety
    /// Non-null rows hold blocks `blk0..blk0 + nb`; `codes` has room for
    /// `nb * 32 * 32` bytes and `dw` for `nb * 32` floats.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn repack_panel(
        q4: bool,
        rows: &[*const u8; PANEL_R],
        blk0: usize,
        nb: usize,
        codes: *mut u8,
        dw: *mut f32,
    ) {
        let ts = if q4 { 18 } else { 34 };
        // SAFETY: caller's contract.
        unsafe {
            for half in 0..2 {
                let mut b = 0;
                while b < nb {
                    let two = b + 2 <= nb;
                    let mut r = [_mm512_setzero_ps(); 16];
                    for (i, v) in r.iter_mut().enumerate() {
                        let p = rows[half * 16 + i];
                        if p.is_null() {
                            continue;
                        }
                        let z = match (q4, two) {
                            (true, true) => pair_codes::<true>(p, blk0 + b),
                            (false, true) => pair_codes::<false>(p, blk0 + b),
                            (true, false) => _mm512_zextsi256_si512(one_codes::<true>(p, blk0 + b)),
                            (false, false) => {
                                _mm512_zextsi256_si512(one_codes::<false>(p, blk0 + b))
                            }
                        };
                        *v = _mm512_castsi512_ps(z);
                    }
                    // r[i] holds 16 dwords of row i; afterwards r[j] holds
                    // dword j of the 16 rows: one panel step
                    crate::kernels::gemm::x86::transpose16(&mut r);
                    let steps = if two { 16 } else { 8 };
                    for (j, v) in r.iter().enumerate().take(steps) {
                        _mm512_storeu_ps(
                            codes.add(((b * 8 + j) * PANEL_R + half * 16) * 4) as *mut f32,
                            *v,
                        );
                    }
                    b += if two { 2 } else { 1 };
                }
            }
            let mut tmp = [0f32; 64];
            for (r, p) in rows.iter().enumerate() {
                let mut b = 0;
                while b < nb {
                    let len = 64.min(nb - b);
                    if p.is_null() {
                        tmp[..len].fill(0.0);
                    } else {
                        block_scales(p.add((blk0 + b) * ts), ts, len, &mut tmp[..len]);
                    }
                    for t in 0..len {
                        *dw.add((b + t) * PANEL_R + r) = tmp[t];
                    }
                    b += len;
                }
            }
        }
    }

    /// Unpacks the 128 nibble bytes of a Q4_K block into 256 codes.
    ///
    /// # Safety
    /// AVX2; `qs` holds 128 bytes, `out` room for 256.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q4k_codes(qs: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let m = _mm256_set1_epi8(0x0f);
            for g in 0..4 {
                let v = _mm256_loadu_si256(qs.add(32 * g) as *const __m256i);
                _mm256_storeu_si256(out.add(64 * g) as *mut __m256i, _mm256_and_si256(v, m));
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m);
                _mm256_storeu_si256(out.add(64 * g + 32) as *mut __m256i, hi);
            }
        }
    }

    /// Unpacks the low nibbles and high bit pairs of a Q6_K block into 256
    /// codes (0..64).
    ///
    /// # Safety
    /// AVX2; `ql` holds 128 bytes, `qh` 64, `out` room for 256.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q6k_codes(ql: *const u8, qh: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let m2 = _mm256_set1_epi8(0x30);
            for half in 0..2 {
                let l0 = _mm256_loadu_si256(ql.add(64 * half) as *const __m256i);
                let l1 = _mm256_loadu_si256(ql.add(64 * half + 32) as *const __m256i);
                let h = _mm256_loadu_si256(qh.add(32 * half) as *const __m256i);
                let o = out.add(128 * half);
                let q1 = _mm256_or_si256(
                    _mm256_and_si256(l0, m4),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(h), m2),
                );
                let q2 = _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(h), m2),
                );
                let q3 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4),
                    _mm256_and_si256(h, m2),
                );
                let q4 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(h), m2),
                );
                _mm256_storeu_si256(o as *mut __m256i, q1);
                _mm256_storeu_si256(o.add(32) as *mut __m256i, q2);
                _mm256_storeu_si256(o.add(64) as *mut __m256i, q3);
                _mm256_storeu_si256(o.add(96) as *mut __m256i, q4);
            }
        }
    }

    /// Interleaves 16 decoded rows (`len` codes each, `len` a multiple of
    /// 64, rows `len` bytes apart) into rows `16 * half ..` of a panel.
    ///
    /// # Safety
    /// `rows` holds 16 * len bytes; `panel` len / 4 steps of 32 rows.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
    pub(super) unsafe fn interleave16(rows: *const u8, len: usize, panel: *mut u8, half: usize) {
        // SAFETY: caller's contract.
        unsafe {
            for seg in 0..len / 64 {
                let mut r = [_mm512_setzero_ps(); 16];
                for (i, v) in r.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(rows.add(i * len + seg * 64) as *const f32);
                }
                crate::kernels::gemm::x86::transpose16(&mut r);
                for (j, v) in r.iter().enumerate() {
                    let step = seg * 16 + j;
                    _mm512_storeu_ps(panel.add((step * PANEL_R + half * 16) * 4) as *mut f32, *v);
                }
            }
        }
    }

    /// [`super::decode`] with AVX2 and F16C, its per-block helpers inlined.
    ///
    /// # Safety
    /// AVX2 and F16C; as [`super::decode`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn decode_avx2(
        f: super::Format,
        row: *const u8,
        v0: usize,
        codes: &mut [u8],
        dw: &mut [f32],
        mw: &mut [f32],
    ) {
        // SAFETY: caller's contract.
        unsafe { super::decode_with::<true>(f, row, v0, codes, dw, mw) }
    }

    /// Q8_0 codes as unsigned bytes (`q ^ 0x80`).
    ///
    /// # Safety
    /// AVX2; 32 bytes at `q` and room for 32 at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q8_codes(q: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let v = _mm256_loadu_si256(q as *const __m256i);
            _mm256_storeu_si256(
                out as *mut __m256i,
                _mm256_xor_si256(v, _mm256_set1_epi8(-128)),
            );
        }
    }

    /// Q4_0 codes: low nibbles (values 0..16) then high nibbles.
    ///
    /// # Safety
    /// AVX2; 16 bytes at `q` and room for 32 at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q4_codes(q: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let t = _mm_loadu_si128(q as *const __m128i);
            let z = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(t), _mm_srli_epi16::<4>(t));
            _mm256_storeu_si256(
                out as *mut __m256i,
                _mm256_and_si256(z, _mm256_set1_epi8(0x0f)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks that reach every branch of the quantiser: random values,
    /// all zeros, values that land halfway between two codes, one huge
    /// value among tiny ones, and negative zeros.
    fn blocks() -> Vec<[f32; 32]> {
        let mut s = 0x2545_f491_u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as f32 / u32::MAX as f32 * 2.0 - 1.0
        };
        let mut out: Vec<[f32; 32]> = (0..200).map(|_| std::array::from_fn(|_| next())).collect();
        out.push([0.0; 32]);
        out.push([-0.0; 32]);
        // 127 at the maximum: the scale is 1, so x.5 values are ties
        out.push(std::array::from_fn(|i| {
            if i == 0 { 127.0 } else { i as f32 - 15.5 }
        }));
        out.push(std::array::from_fn(|i| {
            if i == 7 { -3.0e38 } else { 1.0e-30 * i as f32 }
        }));
        out
    }

    #[test]
    fn quantize_block_paths_give_the_same_codes() {
        for x in blocks() {
            let mut want = [0i8; 32];
            let expected = quantize_block_body(&x, &mut want);
            let mut got = [0i8; 32];
            let result = quantize_block(&x, &mut got);
            assert_eq!(result.0.to_bits(), expected.0.to_bits(), "{x:?}");
            assert_eq!((result.1, got), (expected.1, want), "{x:?}");
        }
    }

    #[test]
    fn a_quantised_column_holds_each_block_in_order() {
        let blocks = blocks();
        let x: Vec<f32> = blocks.iter().flatten().copied().collect();
        let k = x.len();
        let cols = Cols(vec![x.as_ptr() as *mut f32]);
        let f = format(DType::Q4_0).unwrap();
        let mut buf = vec![0u8; qacts_len(1, k, 32, 1)];
        let acts = quantize_acts(&cols, k, f, 1, 8, &mut buf);
        for (b, block) in blocks.iter().enumerate() {
            let mut want = [0i8; 32];
            let (d, sum) = quantize_block_body(block, &mut want);
            assert_eq!(&acts.codes[32 * b..32 * b + 32], &want[..], "block {b}");
            assert_eq!(acts.d[b].to_bits(), d.to_bits(), "block {b}");
            assert_eq!(acts.bias[b], -8 * sum / 8, "block {b}");
            assert_eq!(acts.sx[b], d * sum as f32, "block {b}");
        }
    }

    #[test]
    fn q4k_scale_words_match_the_scalar_unpacking() {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..200 {
            let s: [u8; 12] = std::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            });
            let words = q4k_scales_mins(&s);
            for j in 0..8 {
                let (sc, mn) = q4k_scale_min(j, &s);
                assert_eq!(words[j / 4].to_le_bytes()[j % 4], sc, "scale {j} of {s:?}");
                assert_eq!(
                    words[2 + j / 4].to_le_bytes()[j % 4],
                    mn,
                    "min {j} of {s:?}"
                );
            }
        }
    }
}
