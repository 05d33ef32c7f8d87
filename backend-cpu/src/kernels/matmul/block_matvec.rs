//! Token generation with Q4_0 weights on AVX-512 VNNI, in 256-bit
//! registers, for long rows (`dispatch` sends shorter ones to
//! `transposed_matvec`, which handles eight rows at a time; streaming long
//! rows from memory, this kernel measured faster).
//!
//! On processors that run 512-bit operations as two 256-bit halves (AMD
//! Zen 4) the count of 256-bit operations per weight byte is what limits a
//! mat-vec whose weights sit in cache, so this kernel is built to use few:
//! the activation column is quantised once into the order the weight
//! blocks unpack to, so that a block's codes meet their activations without
//! any shuffle; four blocks' scales are converted together; and each
//! block's integer sum starts from its `-offset * sum(q)` correction.
//!
//! Q4_0: two blocks' 16 nibble bytes make one register; its low nibbles are
//! values 0..16 of both blocks and its high nibbles values 16..32, so the
//! activations of a pair of blocks are stored as
//! `[b0 0..16, b1 0..16, b0 16..32, b1 16..32]`, and both `vpdpbusd` of a
//! pair accumulate into the same four lanes per block.
//!
//! (A Q8_0 kernel built the same way measured slower than the 512-bit
//! fused kernel of `quant_dot::fused` on most shapes, so Q8_0 stays
//! there: its blocks need no unpacking.)

use std::cell::RefCell;

use super::activation_quant;
use super::one_column::matvec_rows;
use super::operands::{Cols, WeightRows};
use super::quant_format::Partner;
use super::row_streaming::{matvec_one_row, matvec_prefetch};
use crate::kernels::scratch::with_scratch;

/// Values per block.
const QB: usize = 32;
/// Rows per kernel call for short rows (see `row_streaming::matvec_one_row`).
const ROWS: usize = 4;
/// Blocks per step of the kernel.
const GROUP: usize = 4;

thread_local! {
    static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The activation column, quantised in the weights' order.
struct Column<'a> {
    codes: &'a [i8],
    /// Per block, the integer start of each of the 4 lanes that block's
    /// products land in: `-8 * sum(q) / 4`.
    bias: &'a [i32],
    /// Scale per block.
    dx: &'a [f32],
}

/// Lanes of a 256-bit accumulator one block's products land in.
const LANES: usize = 4;

/// `out[0][i] = dot(a row i, b[0])` for `i < m`, one column, packed Q4_0
/// rows. The caller has checked that the processor has AVX-512 VNNI.
pub(crate) fn matvec(a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let k = a.k;
    let nb = k / QB;
    // codes (a whole number of pairs of blocks), then 64-byte aligned
    // bias and dx
    let codes_len = nb.next_multiple_of(2) * QB;
    let bias_at = codes_len.next_multiple_of(64);
    let dx_at = bias_at + (nb * LANES * 4).next_multiple_of(64);
    let len = dx_at + nb * 4;
    with_scratch(&ACTS, len, |buf| {
        let (codes, rest) = buf.split_at_mut(bias_at);
        let (bias, dx) = rest.split_at_mut(dx_at - bias_at);
        // SAFETY: with_scratch gives a 64-byte aligned buffer and each
        // region starts at a multiple of 64 bytes, long enough for its
        // values.
        let (codes, bias, dx) = unsafe {
            (
                std::slice::from_raw_parts_mut(codes.as_mut_ptr() as *mut i8, codes_len),
                std::slice::from_raw_parts_mut(bias.as_mut_ptr() as *mut i32, nb * LANES),
                std::slice::from_raw_parts_mut(dx.as_mut_ptr() as *mut f32, nb),
            )
        };
        // SAFETY: column 0 holds k values.
        let x = unsafe { std::slice::from_raw_parts(b.0[0] as *const f32, k) };
        quantize_column(x, codes, bias, dx);
        let col = Column { codes, bias, dx };
        let col = &col;
        let ahead = matvec_prefetch(a.stride);
        if matvec_one_row(nb * a.dtype.type_size()) {
            matvec_rows::<1>(a, m, out, |rows, _, res| {
                // SAFETY: the row exists and holds nb blocks, as does the
                // column.
                unsafe { x86::q4_0::<1>(rows, nb, col, ahead, res) }
            });
            return;
        }
        matvec_rows::<ROWS>(a, m, out, |rows, r, res| {
            // SAFETY: the first r rows exist and hold nb blocks, as does the
            // column.
            unsafe {
                if r == ROWS {
                    x86::q4_0::<ROWS>(rows, nb, col, ahead, res)
                } else {
                    x86::q4_0::<1>(rows, nb, col, ahead, res)
                }
            }
        });
    });
}

/// Quantises `x` block by block into the order the kernel reads.
fn quantize_column(x: &[f32], codes: &mut [i8], bias: &mut [i32], dx: &mut [f32]) {
    // ggml's Q8_0 codes in order, then moved to the kernel's order
    with_scratch(&CODES, x.len(), |q| {
        activation_quant::quantize_column(Partner::Q8_0, x, QB, q, |b, scale, sum| {
            dx[b] = scale.d;
            bias[b * LANES..(b + 1) * LANES].fill(-8 * sum / LANES as i32);
        });
        for (b, q) in q.chunks_exact(QB).enumerate() {
            let pair = b / 2 * 2 * QB;
            let half = b % 2 * 16;
            codes[pair + half..pair + half + 16].copy_from_slice(&q[..16]);
            codes[pair + 32 + half..pair + 32 + half + 16].copy_from_slice(&q[16..]);
        }
    });
}

thread_local! {
    /// A column's codes in ggml's order, before they are interleaved.
    static CODES: RefCell<Vec<i8>> = const { RefCell::new(Vec::new()) };
}

/// Value `i` of block `b` in the column's order.
fn code_at(col: &Column, b: usize, i: usize) -> i32 {
    col.codes[b / 2 * 2 * QB + (i / 16) * 32 + b % 2 * 16 + i % 16] as i32
}

/// One block's dot product, for the blocks after the last whole group.
///
/// # Safety
/// `row` holds block `b`.
unsafe fn block_dot(row: *const u8, b: usize, col: &Column) -> f32 {
    const TS: usize = 18;
    // SAFETY: caller's contract.
    let blk = unsafe { std::slice::from_raw_parts(row.add(b * TS), TS) };
    let dw = ggraph_core::quant::f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
    let mut s: i32 = col.bias[b * LANES..(b + 1) * LANES].iter().sum();
    for i in 0..QB {
        let byte = blk[2 + i % 16];
        let u = if i < 16 { byte & 0x0f } else { byte >> 4 };
        s += u as i32 * code_at(col, b, i);
    }
    dw * col.dx[b] * s as f32
}

mod x86 {
    use std::arch::x86_64::*;

    use super::{Column, GROUP, QB, block_dot};
    use crate::kernels::math::hsum256;

    /// The f16 scales of blocks `g * 4 .. g * 4 + 4` of a row with blocks
    /// of `ts` bytes, as f32.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales4(row: *const u8, g: usize, ts: usize) -> __m128 {
        // SAFETY: caller's contract (the four blocks exist).
        unsafe {
            let p = row.add(g * GROUP * ts);
            let h = |b: usize| (p.add(b * ts) as *const u16).read_unaligned() as u64;
            let packed = h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48;
            _mm_cvtph_ps(_mm_cvtsi64_si128(packed as i64))
        }
    }

    /// `R` Q4_0 rows (18 bytes per block) times the column.
    ///
    /// # Safety
    /// AVX-512 VNNI is available; the first `R` rows hold `nb` blocks, as
    /// does the column.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn q4_0<const R: usize>(
        rows: &[*const u8],
        nb: usize,
        x: &Column,
        ahead: usize,
        out: &mut [f32],
    ) {
        const TS: usize = 18;
        // SAFETY: caller's contract; every read is inside group g of a
        // row or of the column (prefetches may point past the end).
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let first = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0);
            let second = _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2);
            let mut acc = [_mm256_setzero_ps(); R];
            let groups = nb / GROUP;
            for g in 0..groups {
                let xc = x.codes.as_ptr().add(g * GROUP * QB);
                let xs = [
                    _mm256_loadu_si256(xc as *const __m256i),
                    _mm256_loadu_si256(xc.add(32) as *const __m256i),
                    _mm256_loadu_si256(xc.add(64) as *const __m256i),
                    _mm256_loadu_si256(xc.add(96) as *const __m256i),
                ];
                let bias = x.bias.as_ptr().add(g * GROUP * 4);
                let bias = [
                    _mm256_loadu_si256(bias as *const __m256i),
                    _mm256_loadu_si256(bias.add(8) as *const __m256i),
                ];
                let dx = _mm_loadu_ps(x.dx.as_ptr().add(g * GROUP));
                for r in 0..R {
                    let p = rows[r].add(g * GROUP * TS);
                    // a group spans parts of two or three cache lines
                    _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(ahead) as *const i8);
                    _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(ahead + GROUP * TS - 1) as *const i8);
                    let s = _mm256_castps128_ps256(_mm_mul_ps(scales4(rows[r], g, TS), dx));
                    let scale = [
                        _mm256_permutevar8x32_ps(s, first),
                        _mm256_permutevar8x32_ps(s, second),
                    ];
                    for pair in 0..2 {
                        let q = p.add(2 * pair * TS + 2);
                        let v = _mm256_inserti128_si256::<1>(
                            _mm256_castsi128_si256(_mm_loadu_si128(q as *const __m128i)),
                            _mm_loadu_si128(q.add(TS) as *const __m128i),
                        );
                        let lo = _mm256_and_si256(v, m4);
                        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                        let sum = _mm256_dpbusd_epi32(bias[pair], lo, xs[2 * pair]);
                        let sum = _mm256_dpbusd_epi32(sum, hi, xs[2 * pair + 1]);
                        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale[pair], acc[r]);
                    }
                }
            }
            for r in 0..R {
                let mut t = hsum256(acc[r]);
                for b in groups * GROUP..nb {
                    t += block_dot(rows[r], b, x);
                }
                out[r] = t;
            }
        }
    }
}
