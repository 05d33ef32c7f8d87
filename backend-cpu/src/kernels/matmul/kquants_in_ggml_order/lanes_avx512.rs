//! `vec_dot`'s eight lanes with AVX-512, four rows a call and two to a
//! register (a row's eight lanes in each half), for Q2_K, Q3_K, Q5_K,
//! Q6_K and IQ4_XS: each `vpmaddubsw`, `vpmaddwd`, conversion and
//! multiply-add serves two dots, and `vpermw` spreads each 32 values'
//! scales in one instruction. The float steps are the AVX2 kernels'
//! (`super::x86::eight_lanes`), lane by lane.

use std::arch::x86_64::*;

use super::x86::{parts, signed};
use super::{Col, QK, block_bytes, tag};
use crate::kernels::math::row_pair_sums;
use crate::kernels::matmul::row_streaming::{PREFETCH_BYTES, prefetch_lines, rows_ahead};

/// Rows a call takes.
pub(super) const ROWS: usize = 4;

/// The registers `a` and `b` side by side.
#[inline(always)]
unsafe fn join(a: __m256i, b: __m256i) -> __m512i {
    // SAFETY: the caller's AVX-512 F.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b) }
}

/// `a` over the low eight lanes, `b` over the high.
#[inline(always)]
unsafe fn halves(a: f32, b: f32) -> __m512 {
    // SAFETY: the caller's AVX-512 F.
    unsafe { _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b)) }
}

/// The sums of each row's eight lanes (rows 0 and 1 in `m[0]`'s halves,
/// 2 and 3 in `m[1]`'s), in four lanes (integer sums: exact in any order).
#[inline(always)]
unsafe fn row_sums(m: [__m512i; 2]) -> __m128i {
    // SAFETY: the caller's AVX-512 F.
    unsafe {
        let lo = |v: __m512i| _mm512_castsi512_si256(v);
        let hi = |v: __m512i| _mm512_extracti64x4_epi64::<1>(v);
        let h01 = _mm256_hadd_epi32(lo(m[0]), hi(m[0]));
        let h23 = _mm256_hadd_epi32(lo(m[1]), hi(m[1]));
        let h = _mm256_hadd_epi32(h01, h23);
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }
}

/// The dots of four rows (each at its first super-block) with `C`
/// columns over `nsb` super-blocks, row by row for each column.
///
/// # Safety
/// AVX-512 F, BW and VL, AVX2, FMA and F16C are available; every row holds
/// `nsb` super-blocks of type `T` (not Q4_K), every column `nsb * 256`
/// codes, `nsb` scales and `nsb * 16` sums.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn eight_lanes<const T: u8, const C: usize>(
    rows: [*const u8; ROWS],
    cols: [Col; C],
    nsb: usize,
) -> [[f32; ROWS]; C] {
    // SAFETY: caller's contract; every read is inside super-block sb.
    unsafe {
        // the scales of values 32g..32g + 32, each 16's over eight 16-bit
        // lanes, for the row in each half (its 16 scales at lanes 0..16 of
        // the half)
        let pick: [__m512i; 8] = std::array::from_fn(|g| {
            let idx: [i16; 32] =
                std::array::from_fn(|l| (16 * (l / 16) + 2 * g + l % 16 / 8) as i16);
            _mm512_loadu_si512(idx.as_ptr() as *const __m512i)
        });
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm512_setzero_ps(); 2]; C];
        // Q5_K's mins: a chain a row, the four rows' side by side
        let mut summs = [_mm_setzero_ps(); C];
        // the weights stream from memory once: ask for them ahead
        let bb = block_bytes(T);
        let ahead = rows_ahead(nsb * bb, ROWS * nsb * bb, PREFETCH_BYTES);
        for sb in 0..nsb {
            for row in rows {
                prefetch_lines(row.wrapping_add(sb * bb + ahead), bb);
            }
            let mut mins = [[zero; 2]; C];
            let mut dmins = [0f32; ROWS];
            for h in 0..2 {
                let a = parts::<T>(rows[2 * h].add(sb * block_bytes(T)));
                let b = parts::<T>(rows[2 * h + 1].add(sb * block_bytes(T)));
                (dmins[2 * h], dmins[2 * h + 1]) = (a.dmin, b.dmin);
                let sc = join(a.sc, b.sc);
                let mut t = [zero; C];
                for g in 0..8 {
                    let mut u = join(a.u[g], b.u[g]);
                    let s = _mm512_permutexvar_epi16(pick[g], sc);
                    // the sign trick: |u| against x with u's sign
                    let neg = _mm512_movepi8_mask(u);
                    if signed(T) {
                        u = _mm512_abs_epi8(u);
                    }
                    for (t, col) in t.iter_mut().zip(&cols) {
                        let x = col.codes.add(sb * QK + 32 * g);
                        let x = _mm512_broadcast_i64x4(_mm256_loadu_si256(x as *const __m256i));
                        let x = if signed(T) {
                            _mm512_mask_sub_epi8(x, neg, zero, x)
                        } else {
                            x
                        };
                        *t = _mm512_add_epi32(*t, _mm512_madd_epi16(s, _mm512_maddubs_epi16(u, x)));
                    }
                }
                let (dw, dmin) = (halves(a.d, b.d), halves(a.dmin, b.dmin));
                let m = join(a.mins, b.mins);
                for (c, col) in cols.iter().enumerate() {
                    let dx = *col.d.add(sb);
                    let bs = _mm256_loadu_si256(col.bs16.add(sb * 16) as *const __m256i);
                    let bs = _mm512_broadcast_i64x4(bs);
                    let mut t = t[c];
                    if T == tag::Q6_K {
                        t = _mm512_sub_epi32(t, _mm512_slli_epi32::<5>(_mm512_madd_epi16(bs, sc)));
                    }
                    if T == tag::Q2_K {
                        let dm = _mm512_mul_ps(_mm512_set1_ps(-dx), dmin);
                        let m = _mm512_cvtepi32_ps(_mm512_madd_epi16(m, bs));
                        acc[c][h] = _mm512_fmadd_ps(dm, m, acc[c][h]);
                    }
                    if T == tag::Q5_K {
                        mins[c][h] = _mm512_madd_epi16(m, bs);
                    }
                    let d = _mm512_mul_ps(_mm512_set1_ps(dx), dw);
                    acc[c][h] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(t), acc[c][h]);
                }
            }
            if T == tag::Q5_K {
                let dmin = _mm_loadu_ps(dmins.as_ptr());
                for (c, col) in cols.iter().enumerate() {
                    let dm = _mm_mul_ps(_mm_set1_ps(-*col.d.add(sb)), dmin);
                    let m = _mm_cvtepi32_ps(row_sums(mins[c]));
                    summs[c] = _mm_fmadd_ps(dm, m, summs[c]);
                }
            }
        }
        let mut dots = row_pair_sums(acc);
        if T == tag::Q5_K {
            for (d, s) in dots.iter_mut().zip(summs) {
                let mut m = [0f32; ROWS];
                _mm_storeu_ps(m.as_mut_ptr(), s);
                for (d, m) in d.iter_mut().zip(m) {
                    *d += m;
                }
            }
        }
        dots
    }
}
