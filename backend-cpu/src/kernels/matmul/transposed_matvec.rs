//! Token generation with Q4_0 weights on AVX-512 VNNI, eight short rows
//! at a time (see `block_matvec` for long rows).
//!
//! A dot product of one row spends most of its instructions on work of
//! its own: converting the row's scales, summing lanes at the end. Here
//! the blocks of eight consecutive rows are transposed in registers so
//! that lane `r` of every vector belongs to row `r`: a lane's four codes
//! meet the same four activation codes in every lane (one broadcast per
//! `vpdpbusd`), one gather brings the eight rows' scales, and the eight
//! results leave as one vector. The 256-bit registers suit processors
//! that run 512-bit operations as two halves (AMD Zen 4) as well as those
//! that do not.
//!
//! Q4_0 byte `i` of a block holds value `i` in its low nibble and value
//! `16 + i` in its high one, so the column's codes stay in block order:
//! the low nibbles of bytes `4j..4j + 4` meet activation dword `j`, the
//! high ones dword `4 + j`.
//!
//! Against `block_matvec`, rows of 512 values (the output matrix of a
//! small model, 32000 x 512) measured faster here, and long rows streamed
//! from memory slower (4096 x 4096), so only short rows come here
//! (docs/performance.md).

use std::cell::RefCell;

use super::activation_quant::quantize_column;
use super::one_column::matvec_rows;
use super::operands::{Cols, WeightRows};
use super::quant_format::Partner;
use super::row_streaming::short_rows_ahead;
use crate::kernels::scratch::with_scratch;

/// Values per block.
const QB: usize = 32;
/// Bytes per block.
const TS: usize = 18;
/// Rows per kernel call.
const ROWS: usize = 8;

thread_local! {
    static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The activation column quantised to Q8 blocks.
struct Column<'a> {
    codes: &'a [i8],
    /// Per block, `-8 * sum(q)`: the weights' offset of 8 applied to the
    /// block's integer sum.
    bias: &'a [i32],
    /// Scale per block.
    dx: &'a [f32],
}

/// `out[0][i] = dot(a row i, b[0])` for `i < m`, one column, short packed
/// Q4_0 rows (see `dispatch`). The caller has checked that the processor
/// has AVX-512 VNNI.
pub(crate) fn matvec(a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let k = a.k;
    let nb = k / QB;
    // codes, then 64-byte aligned bias and dx
    let bias_at = (nb * QB).next_multiple_of(64);
    let dx_at = bias_at + (nb * 4).next_multiple_of(64);
    let len = dx_at + nb * 4;
    with_scratch(&ACTS, len, |buf| {
        let (codes, rest) = buf.split_at_mut(bias_at);
        let (bias, dx) = rest.split_at_mut(dx_at - bias_at);
        // SAFETY: with_scratch gives a 64-byte aligned buffer and each
        // region starts at a multiple of 64 bytes, long enough for its
        // values.
        let (codes, bias, dx) = unsafe {
            (
                std::slice::from_raw_parts_mut(codes.as_mut_ptr() as *mut i8, nb * QB),
                std::slice::from_raw_parts_mut(bias.as_mut_ptr() as *mut i32, nb),
                std::slice::from_raw_parts_mut(dx.as_mut_ptr() as *mut f32, nb),
            )
        };
        // SAFETY: column 0 holds k values.
        let x = unsafe { std::slice::from_raw_parts(b.0[0] as *const f32, k) };
        quantize_column(Partner::Q8_0, x, QB, codes, |blk, scale, sum| {
            dx[blk] = scale.d;
            bias[blk] = -8 * sum;
        });
        let col = Column { codes, bias, dx };
        let col = &col;
        let ahead = short_rows_ahead(ROWS * a.stride);
        matvec_rows::<ROWS>(a, m, out, |rows, r, res| {
            if r == ROWS {
                // SAFETY: the eight rows exist, a.stride apart (rows of
                // one task are consecutive), and hold nb blocks, as does
                // the column; AVX-512 VNNI checked by the caller.
                unsafe { x86::q4_0_rows8(rows[0], a.stride, nb, col, ahead, res) }
            } else {
                // SAFETY: row 0 exists and holds nb blocks.
                res[0] = unsafe { row_dot(rows[0], nb, col) };
            }
        });
    });
}

/// One row's dot product (the rows after the last group of eight).
///
/// # Safety
/// `row` holds `nb` blocks.
unsafe fn row_dot(row: *const u8, nb: usize, col: &Column) -> f32 {
    // SAFETY: caller's contract.
    let blocks = unsafe { std::slice::from_raw_parts(row, nb * TS) };
    let mut total = 0f32;
    for (b, blk) in blocks.chunks_exact(TS).enumerate() {
        let dw = ggraph_core::quant::f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        let q = &col.codes[b * QB..(b + 1) * QB];
        let mut s = col.bias[b];
        for (i, &byte) in blk[2..].iter().enumerate() {
            s += (byte & 0x0f) as i32 * q[i] as i32 + (byte >> 4) as i32 * q[16 + i] as i32;
        }
        total += dw * col.dx[b] * s as f32;
    }
    total
}

mod x86 {
    use std::arch::x86_64::*;

    use super::{Column, QB, ROWS, TS};

    /// Eight Q4_0 rows, `stride` bytes apart from `row0`, times the column;
    /// the rows `ahead` bytes on are prefetched.
    ///
    /// # Safety
    /// AVX-512 VNNI is available; the eight rows hold `nb` blocks, as does
    /// the column; `7 * stride` fits in an i32.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn q4_0_rows8(
        row0: *const u8,
        stride: usize,
        nb: usize,
        x: &Column,
        ahead: usize,
        out: &mut [f32; super::ROWS],
    ) {
        // SAFETY: caller's contract; every read is inside block b of one
        // of the rows or of the column (prefetches may point past the end).
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let mut acc = _mm256_setzero_ps();
            for b in 0..nb {
                let blk = row0.add(b * TS);
                // the same block of the rows `ahead` on (prefetches never
                // fault, past the last row included)
                for r in 0..ROWS {
                    let p = blk.wrapping_add(ahead + r * stride);
                    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
                }
                let codes = |r: usize| _mm_loadu_si128(blk.add(r * stride + 2) as *const __m128i);
                // rows r and r + 4 side by side, then 4 x 8 dwords
                // transposed: d[j] holds bytes 4j..4j + 4 of every row
                let pair = |r: usize| {
                    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(codes(r)), codes(r + 4))
                };
                let (p0, p1, p2, p3) = (pair(0), pair(1), pair(2), pair(3));
                let (t0, t1) = (_mm256_unpacklo_epi32(p0, p1), _mm256_unpackhi_epi32(p0, p1));
                let (t2, t3) = (_mm256_unpacklo_epi32(p2, p3), _mm256_unpackhi_epi32(p2, p3));
                let d = [
                    _mm256_unpacklo_epi64(t0, t2),
                    _mm256_unpackhi_epi64(t0, t2),
                    _mm256_unpacklo_epi64(t1, t3),
                    _mm256_unpackhi_epi64(t1, t3),
                ];
                let xq = x.codes.as_ptr().add(b * QB) as *const i32;
                let mut lo = _mm256_set1_epi32(*x.bias.get_unchecked(b));
                let mut hi = _mm256_setzero_si256();
                for (j, dj) in d.iter().enumerate() {
                    let l = _mm256_and_si256(*dj, m4);
                    let h = _mm256_and_si256(_mm256_srli_epi16::<4>(*dj), m4);
                    lo = _mm256_dpbusd_epi32(lo, l, _mm256_set1_epi32(xq.add(j).read_unaligned()));
                    hi = _mm256_dpbusd_epi32(
                        hi,
                        h,
                        _mm256_set1_epi32(xq.add(4 + j).read_unaligned()),
                    );
                }
                let h = |r: usize| (blk.add(r * stride) as *const i16).read_unaligned();
                let scales = _mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7));
                let dw = _mm256_cvtph_ps(scales);
                let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*x.dx.get_unchecked(b)));
                let sum = _mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi));
                acc = _mm256_fmadd_ps(sum, scale, acc);
            }
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
        }
    }
}
