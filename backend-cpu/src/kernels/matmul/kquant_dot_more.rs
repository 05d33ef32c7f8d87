//! Q2_K, Q3_K, Q5_K and IQ4_XS weights times one to eight activation
//! columns on AVX2: token generation and small batches, as `kquant_dot`
//! does for Q4_K and Q6_K.
//!
//! Every weight super-block is read straight from memory, its codes
//! unpacked in registers 32 values at a time, against the columns in
//! ggml's Q8_K form. Per 32 values, `vpmaddubsw` (codes times activation
//! codes, pairs summed to 16 bits) then `vpmaddwd` by the scales of the two
//! 16-value halves (which also sums the pairs); one float multiply-add per
//! super-block, two where the sub-blocks carry mins:
//!
//! ```text
//! Q2_K:   dot = dx * (d * sum_j s_j * sum(u q)  -  dmin * sum_j m_j * bs16_j)
//! Q3_K:   dot = dx * d * sum_j s_j * (sum(u q) - 4 bs16_j)
//! Q5_K:   dot = dx * (d * sum_j s_j * sum(u q)  -  dmin * sum_j m_j * bs32_j)
//! IQ4_XS: dot = dx * d * sum_j s_j * sum(w q)
//! ```
//!
//! Pair sums stay below 2^15: Q2_K, Q3_K and Q5_K codes are below 32;
//! IQ4_XS's table values are signed, so `vpmaddubsw` takes `|w|` and the
//! activation codes with `w`'s sign (at most 2 * 127 * 127).

use std::arch::x86_64::*;
use std::ops::Range;

use ggraph_core::DType;
use ggraph_core::quant::IQ4_VALUES;

use super::kquant_operands::{Call, KernelFn, QK, codes32, row_groups, scale_pair};
use super::quant_format::q4k_scales_mins;
use crate::kernels::math::{f16_at, hsum256};

const Q2_K: u8 = 0;
const Q3_K: u8 = 1;
const Q5_K: u8 = 2;
const IQ4_XS: u8 = 3;

/// Bytes per super-block.
const fn block_bytes(t: u8) -> usize {
    match t {
        Q2_K => 84,
        Q3_K => 110,
        Q5_K => 176,
        _ => 136,
    }
}

/// The kernel for `r` rows and `c` columns (`r * c` at most four) of a
/// type this module reads: Q2_K, Q3_K, Q5_K or IQ4_XS (any other type
/// takes IQ4_XS's, which the caller never asks for).
pub(super) fn kernel(dtype: DType, r: usize, c: usize) -> KernelFn {
    macro_rules! pick {
        ($t:expr) => {
            match (r, c) {
                (4, _) => super_blocks::<4, 1, { $t }> as KernelFn,
                (2, 1) => super_blocks::<2, 1, { $t }> as KernelFn,
                (2, _) => super_blocks::<2, 2, { $t }> as KernelFn,
                (_, 1) => super_blocks::<1, 1, { $t }> as KernelFn,
                (_, 2) => super_blocks::<1, 2, { $t }> as KernelFn,
                (_, 3) => super_blocks::<1, 3, { $t }> as KernelFn,
                _ => super_blocks::<1, 4, { $t }> as KernelFn,
            }
        };
    }
    match dtype {
        DType::Q2_K => pick!(Q2_K),
        DType::Q3_K => pick!(Q3_K),
        DType::Q5_K => pick!(Q5_K),
        _ => pick!(IQ4_XS),
    }
}

/// # Safety
/// AVX2, FMA and F16C are available; see [`KernelFn`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn super_blocks<const R: usize, const C: usize, const T: u8>(
    call: &Call,
    rows: Range<usize>,
) {
    // SAFETY: caller's contract.
    unsafe { row_groups::<R, C>(call, rows, block_bytes(T), |row| dots::<R, C, T>(row, call)) }
}

/// What one super-block's 32-value groups share: the scale of each 16
/// values (signed bytes), the 16-value mins (Q2_K, 16-bit) or the
/// 32-value mins (Q5_K, 32-bit), the super-scales, and the high bits (Q3_K,
/// Q5_K).
struct Head {
    scales: __m128i,
    mins: __m256i,
    d: f32,
    dmin: f32,
    high: __m256i,
}

/// Reads the head of the super-block at `blk`.
///
/// # Safety
/// AVX2 and F16C; `blk` holds a super-block of type `T`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn head<const T: u8>(blk: *const u8) -> Head {
    // SAFETY: caller's contract; every read is inside the super-block.
    unsafe {
        let zero = _mm256_setzero_si256();
        match T {
            Q2_K => {
                let b = _mm_loadu_si128(blk as *const __m128i);
                let m4 = _mm_set1_epi8(0x0f);
                Head {
                    scales: _mm_and_si128(b, m4),
                    mins: _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4)),
                    d: f16_at(blk.add(80)),
                    dmin: f16_at(blk.add(82)),
                    high: zero,
                }
            }
            Q3_K => {
                let s = blk.add(96);
                let low = (s as *const u64).read_unaligned();
                let h = (s.add(8) as *const u32).read_unaligned();
                let pairs = |shift: u32| ((h >> shift) & 0x0303_0303) as u64;
                let m = 0x0f0f_0f0f_0f0f_0f0f_u64;
                // scale j: a nibble of byte j % 8 (the low one for j < 8),
                // two high bits from bits 2 (j / 4) of byte 8 + j % 4
                let s0 = (low & m) | ((pairs(0) | pairs(2) << 32) << 4);
                let s1 = ((low >> 4) & m) | ((pairs(4) | pairs(6) << 32) << 4);
                let six = _mm_set_epi64x(s1 as i64, s0 as i64);
                Head {
                    scales: _mm_sub_epi8(six, _mm_set1_epi8(32)),
                    mins: zero,
                    d: f16_at(blk.add(108)),
                    dmin: 0.0,
                    high: _mm256_loadu_si256(blk as *const __m256i),
                }
            }
            Q5_K => {
                let [sc_lo, sc_hi, mn_lo, mn_hi] =
                    q4k_scales_mins(&*(blk.add(4) as *const [u8; 12]));
                let sc8 = _mm_set_epi32(0, 0, sc_hi as i32, sc_lo as i32);
                Head {
                    scales: _mm_unpacklo_epi8(sc8, sc8),
                    mins: _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, mn_hi as i32, mn_lo as i32)),
                    d: f16_at(blk),
                    dmin: f16_at(blk.add(2)),
                    high: _mm256_loadu_si256(blk.add(16) as *const __m256i),
                }
            }
            _ => {
                let scales_h = (blk.add(2) as *const u16).read_unaligned();
                let scales_l = (blk.add(4) as *const u32).read_unaligned();
                let mut sc = [0i8; 16];
                for j in 0..8 {
                    let low = (scales_l >> (4 * j)) & 0x0f;
                    let high = ((scales_h >> (2 * j)) & 3) as u32;
                    let s = (low | (high << 4)) as i8 - 32;
                    sc[2 * j] = s;
                    sc[2 * j + 1] = s;
                }
                Head {
                    scales: _mm_loadu_si128(sc.as_ptr() as *const __m128i),
                    mins: zero,
                    d: f16_at(blk),
                    dmin: 0.0,
                    high: zero,
                }
            }
        }
    }
}

/// The codes of values `32 i..32 i + 32` of the super-block at `blk`:
/// unsigned, or IQ4_XS's signed table values.
///
/// # Safety
/// AVX2; `blk` holds a super-block of type `T`, `h` its head; `i < 8`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn codes<const T: u8>(blk: *const u8, h: &Head, i: usize) -> __m256i {
    // SAFETY: caller's contract; every read is inside the super-block.
    unsafe {
        // bit i of each high-bit byte, as all ones
        let high_bit = || {
            let bit = _mm256_set1_epi8((1u8 << i) as i8);
            _mm256_cmpeq_epi8(_mm256_and_si256(h.high, bit), bit)
        };
        match T {
            Q2_K | Q3_K => {
                // value 128 h + 32 s + l: bits 2s.. of byte 32 h + l
                let at = if T == Q2_K { 16 } else { 32 };
                let q = _mm256_loadu_si256(blk.add(at + 32 * (i / 4)) as *const __m256i);
                let shift = _mm_cvtsi32_si128(2 * (i % 4) as i32);
                let low = _mm256_and_si256(_mm256_srl_epi16(q, shift), _mm256_set1_epi8(3));
                if T == Q2_K {
                    low
                } else {
                    _mm256_or_si256(low, _mm256_and_si256(high_bit(), _mm256_set1_epi8(4)))
                }
            }
            Q5_K => {
                // value 64 g + 32 n + l: nibble n of byte 32 g + l
                let q = _mm256_loadu_si256(blk.add(48 + 32 * (i / 2)) as *const __m256i);
                let shift = _mm_cvtsi32_si128(4 * (i % 2) as i32);
                let low = _mm256_and_si256(_mm256_srl_epi16(q, shift), _mm256_set1_epi8(0x0f));
                _mm256_or_si256(low, _mm256_and_si256(high_bit(), _mm256_set1_epi8(0x10)))
            }
            _ => {
                // 16 bytes: values 0..16 in the low nibbles, 16..32 in the high
                let q = _mm_loadu_si128(blk.add(8 + 16 * i) as *const __m128i);
                let v = _mm256_broadcastsi128_si256(q);
                let shift = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
                let n = _mm256_and_si256(_mm256_srlv_epi32(v, shift), _mm256_set1_epi8(0x0f));
                let table = _mm_loadu_si128(IQ4_VALUES.as_ptr() as *const __m128i);
                _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), n)
            }
        }
    }
}

/// `R` rows of type `T` times `C` columns over the call's super-blocks.
///
/// # Safety
/// AVX2, FMA and F16C are available; the rows and the columns hold the
/// call's `nb` super-blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots<const R: usize, const C: usize, const T: u8>(
    rows: &[*const u8; R],
    call: &Call,
) -> [[f32; C]; R] {
    let ts = block_bytes(T);
    // SAFETY: caller's contract; every read is inside super-block sb of a
    // row or a column (prefetches may point past the end).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for sb in 0..call.nb {
            for r in 0..R {
                let blk = rows[r].add(sb * ts);
                let ahead = blk.wrapping_add(call.ahead);
                for line in (0..ts).step_by(64).chain([ts - 1]) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8);
                }
                let h = head::<T>(blk);
                // the 16 scales widened to 16 bits, scales 0..8 in both
                // halves of the first register, 8..16 in the second's
                let s16 = _mm256_cvtepi8_epi16(h.scales);
                let halves = [
                    _mm256_permute2x128_si256::<0x00>(s16, s16),
                    _mm256_permute2x128_si256::<0x11>(s16, s16),
                ];
                let mut t = [_mm256_setzero_si256(); C];
                for i in 0..8 {
                    let w = codes::<T>(blk, &h, i);
                    let s = if T == IQ4_XS {
                        // one scale per 32 values, in bytes 2i and 2i + 1
                        let pick = _mm_set1_epi8(2 * i as i8);
                        _mm256_cvtepi8_epi16(_mm_shuffle_epi8(h.scales, pick))
                    } else {
                        _mm256_shuffle_epi8(halves[i / 4], scale_pair(i % 4))
                    };
                    let aw = if T == IQ4_XS { _mm256_abs_epi8(w) } else { w };
                    for (c, t) in t.iter_mut().enumerate() {
                        let x = codes32(call.cols[c].codes.add(sb * QK + 32 * i));
                        let x = if T == IQ4_XS {
                            _mm256_sign_epi8(x, w)
                        } else {
                            x
                        };
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), s);
                        *t = _mm256_add_epi32(*t, p);
                    }
                }
                for (c, t) in t.into_iter().enumerate() {
                    let col = &call.cols[c];
                    let dx = *col.d.add(sb);
                    let bs16 = || _mm256_loadu_si256(col.bs16.add(sb * 16) as *const __m256i);
                    let t = if T == Q3_K {
                        // the codes' offset of 4, per sub-block of 16
                        let s16 = _mm256_cvtepi8_epi16(h.scales);
                        _mm256_sub_epi32(t, _mm256_slli_epi32::<2>(_mm256_madd_epi16(s16, bs16())))
                    } else {
                        t
                    };
                    let a = &mut acc[r][c];
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(h.d * dx), *a);
                    let mins = match T {
                        Q2_K => _mm256_madd_epi16(h.mins, bs16()),
                        Q5_K => {
                            let bs32 = _mm256_loadu_si256(col.bs32.add(sb * 8) as *const __m256i);
                            _mm256_mullo_epi32(h.mins, bs32)
                        }
                        _ => continue,
                    };
                    *a =
                        _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(h.dmin * dx), *a);
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
