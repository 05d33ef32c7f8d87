//! Q8_0 and Q4_0 weights times one to eight activation columns on AVX2
//! (processors without AVX-512 VNNI): token generation and small batches.
//!
//! The columns are quantised to 8 bits once per call (one scale per block
//! of 32, `activation_quant`), and every weight block is read straight
//! from memory, so that a mat-vec streams the weights once with no decode
//! pass. Per block and (row, column) pair the integer dot is `vpmaddubsw`
//! (unsigned times signed bytes, adjacent pairs summed to 16 bits) and
//! `vpmaddwd` by ones (to eight 32-bit lanes), then one float multiply-add
//! with the product of the two scales:
//!
//! - Q4_0: codes `u` in 0..16 against activation codes `q`, so a pair sum
//!   stays below 2^15; the codes' offset of 8 comes back in floats as
//!   `-8 * dw * dx * sum(q)`, one multiply-add for eight blocks.
//! - Q8_0: signed codes `w`; `vpmaddubsw` takes `|w|` and `q` with `w`'s
//!   sign (a pair sum is at most 2 * 128 * 127 < 2^15).
//!
//! The f16 scales of eight blocks of a row are widened together and
//! multiplied by the columns' scales into a small table that the block
//! loop reads by broadcast.

use std::cell::RefCell;

use ggraph_core::DType;

use super::activation_quant::{qacts_len, quantize_acts};
use super::few_columns::{self, Plan, column_groups};
use super::operands::{Cols, WeightRows};
use super::quant_format::format;
use super::row_streaming::SHORT_ROW_BYTES;
use crate::kernels::scratch::with_scratch;

/// Values per block.
const QB: usize = 32;
/// Blocks per chunk of a row when there are several column groups (the
/// chunk stays in L1 while each group reads it).
const CHUNK_BLOCKS: usize = 32;
/// Blocks whose scales are widened together.
const GROUP: usize = 8;

thread_local! {
    static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `out[j][i] = dot(a row i, b[j])` for `i < m` and the (at most eight)
/// columns of `b`, packed Q8_0 or Q4_0 rows. The caller has checked that
/// the processor has AVX2, FMA and F16C.
pub(crate) fn gemm(a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    let Some(f) = format(a.dtype) else { return };
    let q4 = a.dtype == DType::Q4_0;
    let (_, per_group) = column_groups(n);
    with_scratch(&ACTS, qacts_len(n, k, QB, 1), |buf| {
        let acts = quantize_acts(b, k, f, 1, 8, buf);
        let nb = k / QB;
        let ts = a.dtype.type_size();
        let short_q8 = !q4 && nb * ts <= SHORT_ROW_BYTES;
        // one or two columns: four rows per call, except short Q8_0 rows
        // times one column, which stream from memory faster two at a time
        // (docs/performance.md). Q4_0 does
        // more work per byte and K-quants more still: no gain for them.
        let rows_per_call = match per_group {
            1 if short_q8 => 2,
            1 | 2 => 4,
            _ => 2,
        };
        let plan = Plan {
            nb,
            chunk: CHUNK_BLOCKS,
            rows_per_call,
            ahead: super::row_streaming::rows_ahead(
                nb * ts,
                rows_per_call * a.stride,
                GROUP * ts * 4,
            ),
        };
        let column = |j: usize, b0: usize| Column {
            codes: acts.codes[j * k + b0 * QB..].as_ptr(),
            d: acts.d[j * nb + b0..].as_ptr(),
            sx: acts.sx[j * nb + b0..].as_ptr(),
        };
        // SAFETY: a holds m rows of nb blocks, the quantised columns as
        // many, out n columns of m values; the kernels keep to KernelFn.
        unsafe { few_columns::run(&a, m, n, out, plan, column, |r, c| kernel(q4, r, c)) };
    });
}

/// One quantised activation column, from the call's first block on.
#[derive(Clone, Copy)]
struct Column {
    codes: *const i8,
    d: *const f32,
    /// `d * sum(q)` per block.
    sx: *const f32,
}

type Call<'a> = few_columns::Call<'a, Column>;
type KernelFn = few_columns::KernelFn<Column>;

/// The kernel for `r` rows and `c` columns: four rows with one or two
/// columns, two rows with up to four, one row with any (the remainder).
fn kernel(q4: bool, r: usize, c: usize) -> KernelFn {
    macro_rules! pick {
        ($q4:literal) => {
            match (r, c) {
                (4, 1) => x86::blocks::<4, 1, $q4> as KernelFn,
                (4, _) => x86::blocks::<4, 2, $q4> as KernelFn,
                (2, 1) => x86::blocks::<2, 1, $q4> as KernelFn,
                (2, 2) => x86::blocks::<2, 2, $q4> as KernelFn,
                (2, 3) => x86::blocks::<2, 3, $q4> as KernelFn,
                (2, _) => x86::blocks::<2, 4, $q4> as KernelFn,
                (_, 1) => x86::blocks::<1, 1, $q4> as KernelFn,
                (_, 2) => x86::blocks::<1, 2, $q4> as KernelFn,
                (_, 3) => x86::blocks::<1, 3, $q4> as KernelFn,
                _ => x86::blocks::<1, 4, $q4> as KernelFn,
            }
        };
    }
    if q4 { pick!(true) } else { pick!(false) }
}

mod x86 {
    use std::arch::x86_64::*;

    use crate::kernels::math::hsum256;
    use std::ops::Range;

    use super::{Call, GROUP, QB};
    use ggraph_core::quant::f16_to_f32;

    /// The f16 scales (first two bytes) of eight blocks `ts` bytes apart
    /// from `p`, as f32.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales8(p: *const u8, ts: usize) -> __m256 {
        // SAFETY: caller's contract (eight blocks at p).
        unsafe {
            let h = |b: usize| (p.add(b * ts) as *const u16).read_unaligned() as u64;
            let lo = h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48;
            let hi = h(4) | h(5) << 16 | h(6) << 32 | h(7) << 48;
            _mm256_cvtph_ps(_mm_set_epi64x(hi as i64, lo as i64))
        }
    }

    /// `R` rows of Q4_0 (`Q4`) or Q8_0 blocks times `C` columns.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; the call's first `R` rows and
    /// `C` columns hold `nb` blocks each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn blocks<const R: usize, const C: usize, const Q4: bool>(
        call: &Call,
        rows: Range<usize>,
    ) {
        for i in rows.step_by(R) {
            // SAFETY: caller's contract.
            unsafe {
                let ts = if Q4 { 18 } else { 34 };
                let row: [*const u8; R] =
                    std::array::from_fn(|q| call.a.row(i + q).add(call.b0 * ts));
                let res = group::<R, C, Q4>(&row, call);
                for c in 0..C {
                    for (q, v) in res.iter().enumerate() {
                        let o = call.out[c].add(i + q);
                        *o = if call.add { *o + v[c] } else { v[c] };
                    }
                }
            }
        }
    }

    /// `R` rows of Q4_0 (`Q4`) or Q8_0 blocks times the call's first `C`
    /// columns, over the call's blocks.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; the rows (at block `b0`) and the
    /// columns hold `nb` blocks each.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const R: usize, const C: usize, const Q4: bool>(
        rows: &[*const u8; R],
        call: &Call,
    ) -> [[f32; C]; R] {
        let ts = if Q4 { 18 } else { 34 };
        // SAFETY: caller's contract; every read is inside a block of a
        // row or a column (prefetches may point past the end).
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let m4 = _mm256_set1_epi8(0x0f);
            // the high half of a broadcast nibble row moves down to values 16..32
            let nibbles = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            // Q4_0: sum of dw * dx * sum(q) over the blocks, times -8 at the end
            let mut offset = [[_mm256_setzero_ps(); C]; R];
            let mut offset_tail = [[0f32; C]; R];
            // the product of the row's and the column's scale per block
            let mut scale = [[[0f32; GROUP]; C]; R];
            let nb = call.nb;
            let mut g0 = 0;
            while g0 < nb {
                let gn = GROUP.min(nb - g0);
                for r in 0..R {
                    let p = rows[r].add(g0 * ts);
                    for line in (0..GROUP * ts).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(call.ahead + line) as *const i8);
                    }
                    if gn == GROUP {
                        let dw = scales8(p, ts);
                        for c in 0..C {
                            let dx = _mm256_loadu_ps(call.cols[c].d.add(g0));
                            _mm256_storeu_ps(scale[r][c].as_mut_ptr(), _mm256_mul_ps(dw, dx));
                            if Q4 {
                                let sx = _mm256_loadu_ps(call.cols[c].sx.add(g0));
                                offset[r][c] = _mm256_fmadd_ps(dw, sx, offset[r][c]);
                            }
                        }
                    } else {
                        for b in 0..gn {
                            let dw = f16_to_f32((p.add(b * ts) as *const u16).read_unaligned());
                            for c in 0..C {
                                scale[r][c][b] = dw * *call.cols[c].d.add(g0 + b);
                                offset_tail[r][c] += dw * *call.cols[c].sx.add(g0 + b);
                            }
                        }
                    }
                }
                for b in 0..gn {
                    let blk = g0 + b;
                    for r in 0..R {
                        let p = rows[r].add(blk * ts + 2);
                        let w = if Q4 {
                            let v =
                                _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
                            _mm256_and_si256(_mm256_srlv_epi32(v, nibbles), m4)
                        } else {
                            _mm256_loadu_si256(p as *const __m256i)
                        };
                        let aw = if Q4 { w } else { _mm256_abs_epi8(w) };
                        for c in 0..C {
                            let x = _mm256_loadu_si256(
                                call.cols[c].codes.add(blk * QB) as *const __m256i
                            );
                            let x = if Q4 { x } else { _mm256_sign_epi8(x, w) };
                            let s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), ones);
                            acc[r][c] = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(s),
                                _mm256_set1_ps(scale[r][c][b]),
                                acc[r][c],
                            );
                        }
                    }
                }
                g0 += gn;
            }
            let mut res = [[0f32; C]; R];
            for r in 0..R {
                for c in 0..C {
                    res[r][c] = hsum256(acc[r][c]);
                    if Q4 {
                        res[r][c] -= 8.0 * (hsum256(offset[r][c]) + offset_tail[r][c]);
                    }
                }
            }
            res
        }
    }
}
