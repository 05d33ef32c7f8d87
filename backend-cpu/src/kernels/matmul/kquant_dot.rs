//! Q4_K and Q6_K weights times one to eight activation columns: token
//! generation and small batches (and the driver for Q2_K, Q3_K, Q5_K and
//! IQ4_XS, whose AVX2 kernels are `kquant_dot_more`'s).
//!
//! The columns are quantised to 8 bits with one scale per 256-value
//! super-block (ggml's Q8_K), with the sums of their codes per 16 and per
//! 32 values. Every weight super-block is read straight from memory: codes
//! unpacked in registers, `vpmaddubsw` per 32 values (64 with AVX-512),
//! the sub-block scales applied in integers by `vpmaddwd` (`vpdpwssd` with
//! VNNI), which also sums the pairs, and one float multiply-add per
//! super-block (two for Q4_K, whose mins have a scale of their own):
//!
//! ```text
//! Q4_K: dot = dx * (d * sum_j sc_j * sum(u q)  -  dmin * sum_j mn_j * bs32_j)
//! Q6_K: dot = dx * d * sum_j s_j * (sum(u q) - 32 bs16_j)
//! ```
//!
//! Pair sums stay below 2^15: Q4_K codes are below 16 and Q6_K codes
//! below 64, against activation codes of at most 127.
//!
//! Two sets of kernels: 256-bit AVX2 (`x86`) and 512-bit AVX-512 VNNI
//! (`vnni`). The VNNI kernels measured faster than the VNNI paths they
//! replaced for Q4_K at one to eight columns and Q6_K at two to eight,
//! and level for Q6_K at one column (docs/performance.md).

use ggraph_core::DType;

use super::few_columns::{self, MAX_C, Plan, column_groups};
use super::kquant_dot_more;
use super::kquant_operands::{KernelFn, QK, with_q8k_columns};
use super::operands::{Cols, WeightRows};
use crate::kernels::isa::Isa;

/// Super-blocks per chunk of a row when the columns come in several
/// groups.
const CHUNK_SUPER_BLOCKS: usize = 4;

/// `out[j][i] = dot(a row i, b[j])` for `i < m` and the (at most eight)
/// columns of `b`, packed K-quant or IQ4_XS rows. The caller has checked that
/// the processor has AVX2, FMA and F16C, and AVX-512 VNNI where `isa`
/// says so (which picks the 512-bit kernels).
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let wide = isa == Isa::Avx512Vnni;
    // the 512-bit Q4_K kernel reads its codes in pairs of sub-blocks
    let paired = wide && a.dtype == DType::Q4_K;
    let nsb = a.k / QK;
    let (_, per_group) = column_groups(n);
    // one column on AVX-512 VNNI (AVX2, unmeasured, keeps its rule)
    let ts = a.dtype.type_size();
    let matvec = n == 1 && wide;
    let rows_per_call = if matvec && super::row_streaming::matvec_one_row(nsb * ts) {
        1
    } else {
        MAX_C / per_group.min(MAX_C)
    };
    let plan = Plan {
        nb: nsb,
        chunk: CHUNK_SUPER_BLOCKS,
        rows_per_call,
        ahead: if matvec {
            super::row_streaming::matvec_prefetch(a.stride)
        } else {
            super::row_streaming::rows_ahead(nsb * ts, rows_per_call * a.stride, 4 * ts)
        },
    };
    // SAFETY: the caller checked AVX2; a holds m rows of nsb super-blocks,
    // b's columns as many values, out n columns of m values; the kernels
    // keep to KernelFn.
    unsafe {
        with_q8k_columns(b, nsb, paired, |acts| {
            few_columns::run(
                &a,
                m,
                n,
                out,
                plan,
                |j, s0| acts.column(j, s0),
                |r, c| kernel(a.dtype, wide, r, c),
            )
        })
    }
}

/// The kernel for `r` rows and `c` columns, `r * c` at most four: the
/// 512-bit VNNI one when `wide`.
fn kernel(dtype: DType, wide: bool, r: usize, c: usize) -> KernelFn {
    if !matches!(dtype, DType::Q4_K | DType::Q6_K) {
        return kquant_dot_more::kernel(dtype, r, c);
    }
    let q4 = dtype == DType::Q4_K;
    macro_rules! pick {
        ($m:ident, $q4:literal) => {
            match (r, c) {
                (4, _) => $m::super_blocks::<4, 1, $q4> as KernelFn,
                (2, 1) => $m::super_blocks::<2, 1, $q4> as KernelFn,
                (2, _) => $m::super_blocks::<2, 2, $q4> as KernelFn,
                (_, 1) => $m::super_blocks::<1, 1, $q4> as KernelFn,
                (_, 2) => $m::super_blocks::<1, 2, $q4> as KernelFn,
                (_, 3) => $m::super_blocks::<1, 3, $q4> as KernelFn,
                _ => $m::super_blocks::<1, 4, $q4> as KernelFn,
            }
        };
    }
    match (wide, q4) {
        (false, true) => pick!(x86, true),
        (false, false) => pick!(x86, false),
        (true, true) => pick!(vnni, true),
        (true, false) => pick!(vnni, false),
    }
}

mod x86 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use crate::kernels::math::{f16_at, hsum256};
    use crate::kernels::matmul::kquant_operands::{
        Call, QK, codes32, prefetch_super_block, row_groups, scale_pair,
    };

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn super_blocks<const R: usize, const C: usize, const Q4: bool>(
        call: &Call,
        rows: Range<usize>,
    ) {
        // SAFETY: caller's contract; the kernels need this function's
        // target features.
        unsafe {
            row_groups::<R, C>(call, rows, if Q4 { 144 } else { 210 }, |row| {
                if Q4 {
                    q4k::<R, C>(row, call)
                } else {
                    q6k::<R, C>(row, call)
                }
            })
        }
    }

    /// `R` Q4_K rows (144 bytes per super-block) times `C` columns.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; the rows and the columns hold
    /// the call's `nsb` super-blocks.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4k<const R: usize, const C: usize>(
        rows: &[*const u8; R],
        call: &Call,
    ) -> [[f32; C]; R] {
        const TS: usize = 144;
        // SAFETY: caller's contract; every read is inside super-block sb
        // of a row or a column (prefetches may point past the end).
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            // bytes 2j, 2j + 1 of a 16-bit lane vector, in every lane
            let pick: [__m256i; 8] = std::array::from_fn(|j| {
                let (lo, hi) = (2 * j as i8, 2 * j as i8 + 1);
                _mm256_setr_epi8(
                    lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi,
                    lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi,
                )
            });
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            for sb in 0..call.nb {
                for r in 0..R {
                    let blk = rows[r].add(sb * TS);
                    prefetch_super_block::<TS>(blk.wrapping_add(call.ahead));
                    let [sc_lo, sc_hi, mn_lo, mn_hi] = super::super::quant_format::q4k_scales_mins(
                        &*(blk.add(4) as *const [u8; 12]),
                    );
                    let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(
                        0,
                        0,
                        sc_hi as i32,
                        sc_lo as i32,
                    )));
                    let mn = _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, mn_hi as i32, mn_lo as i32));
                    let d = f16_at(blk);
                    let dmin = f16_at(blk.add(2));
                    let mut t = [_mm256_setzero_si256(); C];
                    for g in 0..4 {
                        let v = _mm256_loadu_si256(blk.add(16 + 32 * g) as *const __m256i);
                        for (h, u) in [
                            _mm256_and_si256(v, m4),
                            _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4),
                        ]
                        .into_iter()
                        .enumerate()
                        {
                            let j = 2 * g + h;
                            let s = _mm256_shuffle_epi8(sc16, pick[j]);
                            for c in 0..C {
                                let x = codes32(call.cols[c].codes.add(sb * QK + 32 * j));
                                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), s);
                                t[c] = _mm256_add_epi32(t[c], p);
                            }
                        }
                    }
                    for c in 0..C {
                        let col = &call.cols[c];
                        let dx = *col.d.add(sb);
                        let bs = _mm256_loadu_si256(col.bs32.add(sb * 8) as *const __m256i);
                        let mins = _mm256_cvtepi32_ps(_mm256_mullo_epi32(mn, bs));
                        acc[r][c] = _mm256_fmadd_ps(
                            _mm256_cvtepi32_ps(t[c]),
                            _mm256_set1_ps(d * dx),
                            acc[r][c],
                        );
                        acc[r][c] = _mm256_fnmadd_ps(mins, _mm256_set1_ps(dmin * dx), acc[r][c]);
                    }
                }
            }
            let mut res = [[0f32; C]; R];
            for r in 0..R {
                for c in 0..C {
                    res[r][c] = hsum256(acc[r][c]);
                }
            }
            res
        }
    }

    /// `R` Q6_K rows (210 bytes per super-block) times `C` columns.
    ///
    /// # Safety
    /// As for [`q4k`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q6k<const R: usize, const C: usize>(
        rows: &[*const u8; R],
        call: &Call,
    ) -> [[f32; C]; R] {
        const TS: usize = 210;
        // SAFETY: as in q4k.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let m30 = _mm256_set1_epi8(0x30);
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            for sb in 0..call.nb {
                for r in 0..R {
                    let blk = rows[r].add(sb * TS);
                    prefetch_super_block::<TS>(blk.wrapping_add(call.ahead));
                    let scales = _mm_loadu_si128(blk.add(192) as *const __m128i);
                    let d = f16_at(blk.add(208));
                    let s16 = _mm256_cvtepi8_epi16(scales);
                    let mut t = [_mm256_setzero_si256(); C];
                    for half in 0..2 {
                        // scales 8 half..8 half + 8 in both 128-bit halves
                        let sc = if half == 0 {
                            _mm256_permute2x128_si256::<0x00>(s16, s16)
                        } else {
                            _mm256_permute2x128_si256::<0x11>(s16, s16)
                        };
                        // values 128 h + l (l < 32) and + 32: low nibbles of
                        // ql[64 h + l] and ql[64 h + 32 + l]; + 64 and + 96:
                        // their high nibbles; the top two bits of each: bit
                        // pairs 0, 2, 4, 6 of qh[32 h + l]
                        let ql0 = _mm256_loadu_si256(blk.add(64 * half) as *const __m256i);
                        let ql1 = _mm256_loadu_si256(blk.add(64 * half + 32) as *const __m256i);
                        let qh = _mm256_loadu_si256(blk.add(128 + 32 * half) as *const __m256i);
                        let u = [
                            _mm256_or_si256(
                                _mm256_and_si256(ql0, m4),
                                _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(ql1, m4),
                                _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                                _mm256_and_si256(qh, m30),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                                _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                            ),
                        ];
                        for (v, u) in u.into_iter().enumerate() {
                            // 32 values: sub-blocks 2i and 2i + 1
                            let i = 4 * half + v;
                            let s = _mm256_shuffle_epi8(sc, scale_pair(v));
                            for c in 0..C {
                                let x = codes32(call.cols[c].codes.add(sb * QK + 32 * i));
                                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), s);
                                t[c] = _mm256_add_epi32(t[c], p);
                            }
                        }
                    }
                    // the codes' offset of 32, per sub-block of 16
                    for c in 0..C {
                        let col = &call.cols[c];
                        let bs = _mm256_loadu_si256(col.bs16.add(sb * 16) as *const __m256i);
                        let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(s16, bs));
                        let t = _mm256_sub_epi32(t[c], off);
                        let scale = _mm256_set1_ps(d * *col.d.add(sb));
                        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), scale, acc[r][c]);
                    }
                }
            }
            let mut res = [[0f32; C]; R];
            for r in 0..R {
                for c in 0..C {
                    res[r][c] = hsum256(acc[r][c]);
                }
            }
            res
        }
    }
}

/// The same kernels with 512-bit vectors and AVX-512 VNNI: 64 values per
/// `vpmaddubsw`, and the sub-block scales applied and the pairs summed by
/// one `vpdpwssd` into the super-block's integer sums.
mod vnni {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use crate::kernels::math::f16_at;
    use crate::kernels::matmul::kquant_operands::{Call, QK, prefetch_super_block, row_groups};

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn super_blocks<const R: usize, const C: usize, const Q4: bool>(
        call: &Call,
        rows: Range<usize>,
    ) {
        // SAFETY: caller's contract; the kernels need this function's
        // target features.
        unsafe {
            row_groups::<R, C>(call, rows, if Q4 { 144 } else { 210 }, |row| {
                if Q4 {
                    q4k::<R, C>(row, call)
                } else {
                    q6k::<R, C>(row, call)
                }
            })
        }
    }

    /// `R` Q4_K rows (144 bytes per super-block) times `C` columns whose
    /// codes are in paired order (`kquant_operands::paired_group`).
    ///
    /// # Safety
    /// AVX-512 (F, BW, VL, VNNI), FMA and F16C are available; the rows and
    /// the columns hold the call's `nsb` super-blocks.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q4k<const R: usize, const C: usize>(
        rows: &[*const u8; R],
        call: &Call,
    ) -> [[f32; C]; R] {
        const TS: usize = 144;
        // SAFETY: caller's contract; every read is inside super-block sb
        // of a row or a column (prefetches may point past the end).
        unsafe {
            let m4 = _mm512_set1_epi8(0x0f);
            // code vector v holds sub-blocks (a, b) = (0, 2), (1, 3),
            // (4, 6), (5, 7) in its 32-byte halves; its scales as 16-bit
            // lanes: bytes 2a, 2a + 1 of the scales in the low half, 2b,
            // 2b + 1 in the high half
            let pick: [__m512i; 4] = std::array::from_fn(|v| {
                let a = (4 * (v / 2) + v % 2) as i32;
                let b = a + 2;
                let word = |j: i32| (2 * j) | ((2 * j + 1) << 8);
                let (wa, wb) = (word(a) * 0x1_0001, word(b) * 0x1_0001);
                _mm512_setr_epi32(
                    wa, wa, wa, wa, wa, wa, wa, wa, wb, wb, wb, wb, wb, wb, wb, wb,
                )
            });
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            for sb in 0..call.nb {
                for r in 0..R {
                    let blk = rows[r].add(sb * TS);
                    prefetch_super_block::<TS>(blk.wrapping_add(call.ahead));
                    let [sc_lo, sc_hi, mn_lo, mn_hi] = super::super::quant_format::q4k_scales_mins(
                        &*(blk.add(4) as *const [u8; 12]),
                    );
                    let sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_set_epi32(
                        0,
                        0,
                        sc_hi as i32,
                        sc_lo as i32,
                    )));
                    let mn = _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, mn_hi as i32, mn_lo as i32));
                    let d = f16_at(blk);
                    let dmin = f16_at(blk.add(2));
                    let q0 = _mm512_loadu_si512(blk.add(16) as *const __m512i);
                    let q1 = _mm512_loadu_si512(blk.add(80) as *const __m512i);
                    let u = [
                        _mm512_and_si512(q0, m4),
                        _mm512_and_si512(_mm512_srli_epi16::<4>(q0), m4),
                        _mm512_and_si512(q1, m4),
                        _mm512_and_si512(_mm512_srli_epi16::<4>(q1), m4),
                    ];
                    let s: [__m512i; 4] =
                        std::array::from_fn(|v| _mm512_shuffle_epi8(sc16, pick[v]));
                    for c in 0..C {
                        let col = &call.cols[c];
                        let xc = col.codes.add(sb * QK);
                        let mut t = _mm512_setzero_si512();
                        for v in 0..4 {
                            let x = _mm512_loadu_si512(xc.add(64 * v) as *const __m512i);
                            t = _mm512_dpwssd_epi32(t, _mm512_maddubs_epi16(u[v], x), s[v]);
                        }
                        let dx = *col.d.add(sb);
                        let bs = _mm256_loadu_si256(col.bs32.add(sb * 8) as *const __m256i);
                        let mins =
                            _mm512_cvtepi32_ps(_mm512_zextsi256_si512(_mm256_mullo_epi32(mn, bs)));
                        acc[r][c] = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(t),
                            _mm512_set1_ps(d * dx),
                            acc[r][c],
                        );
                        acc[r][c] = _mm512_fnmadd_ps(mins, _mm512_set1_ps(dmin * dx), acc[r][c]);
                    }
                }
            }
            let mut res = [[0f32; C]; R];
            for r in 0..R {
                for c in 0..C {
                    res[r][c] = _mm512_reduce_add_ps(acc[r][c]);
                }
            }
            res
        }
    }

    /// `R` Q6_K rows (210 bytes per super-block) times `C` columns.
    ///
    /// # Safety
    /// As for [`q4k`], the columns' codes in their natural order.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q6k<const R: usize, const C: usize>(
        rows: &[*const u8; R],
        call: &Call,
    ) -> [[f32; C]; R] {
        const TS: usize = 210;
        // SAFETY: as in q4k.
        unsafe {
            let m4 = _mm512_set1_epi8(0x0f);
            let m30 = _mm512_set1_epi8(0x30);
            // per 64-bit lane: the low 32 bytes of a vector, then the high
            // 32: the shifts that bring the top bits of values 128 h + l
            // (l < 64) and 128 h + 64 + l to bits 4 and 5
            let shift_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);
            let shift_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
            // code vector v (values 64 v..64 v + 64) holds sub-blocks 4 v
            // .. 4 v + 4, one per 128-bit lane: their scales as 16-bit lanes
            let pick: [__m512i; 4] = std::array::from_fn(|v| {
                let idx: [i16; 32] = std::array::from_fn(|l| (4 * v + l / 8) as i16);
                _mm512_loadu_si512(idx.as_ptr() as *const __m512i)
            });
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            for sb in 0..call.nb {
                for r in 0..R {
                    let blk = rows[r].add(sb * TS);
                    prefetch_super_block::<TS>(blk.wrapping_add(call.ahead));
                    let s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192) as *const __m128i));
                    let s16w = _mm512_castsi256_si512(s16);
                    let d = f16_at(blk.add(208));
                    let mut u = [_mm512_setzero_si512(); 4];
                    for half in 0..2 {
                        // values 128 h + l (l < 64): low nibble of ql[64 h +
                        // l]; 128 h + 64 + l: its high nibble; their top two
                        // bits: bit pairs of qh[32 h + l % 32]
                        let ql = _mm512_loadu_si512(blk.add(64 * half) as *const __m512i);
                        let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                            blk.add(128 + 32 * half) as *const __m256i,
                        ));
                        u[2 * half] = _mm512_or_si512(
                            _mm512_and_si512(ql, m4),
                            _mm512_and_si512(_mm512_sllv_epi64(qh, shift_lo), m30),
                        );
                        u[2 * half + 1] = _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                            _mm512_and_si512(_mm512_srlv_epi64(qh, shift_hi), m30),
                        );
                    }
                    let s: [__m512i; 4] =
                        std::array::from_fn(|v| _mm512_permutexvar_epi16(pick[v], s16w));
                    for c in 0..C {
                        let col = &call.cols[c];
                        let xc = col.codes.add(sb * QK);
                        let mut t = _mm512_setzero_si512();
                        for v in 0..4 {
                            let x = _mm512_loadu_si512(xc.add(64 * v) as *const __m512i);
                            t = _mm512_dpwssd_epi32(t, _mm512_maddubs_epi16(u[v], x), s[v]);
                        }
                        // the codes' offset of 32, per sub-block of 16
                        let bs = _mm256_loadu_si256(col.bs16.add(sb * 16) as *const __m256i);
                        let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(s16, bs));
                        let t = _mm512_sub_epi32(t, _mm512_zextsi256_si512(off));
                        let scale = _mm512_set1_ps(d * *col.d.add(sb));
                        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), scale, acc[r][c]);
                    }
                }
            }
            let mut res = [[0f32; C]; R];
            for r in 0..R {
                for c in 0..C {
                    res[r][c] = _mm512_reduce_add_ps(acc[r][c]);
                }
            }
            res
        }
    }
}
