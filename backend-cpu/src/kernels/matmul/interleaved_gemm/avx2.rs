//! The interleaved kernels on AVX2: `vpmaddubsw` pairs summed in 16
//! bits, widened by `vpmaddwd`.

use std::arch::x86_64::*;

use super::{Acts, Q4kSums, lane_bytes, prefetch_ahead, q4_k_pair_min_words, q4_k_pair_mins};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved, block_scales, q4_k_scale_words};

/// `sums[c][r] += dot(row r of the group, column c)` over `nb` blocks
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
    pairs: bool,
    sums: &mut [[f32; GROUP_ROWS]; T],
    mins: &mut [[f32; GROUP_ROWS]; T],
) {
    // SAFETY: s holds eight floats.
    let init = sums.map(|s| unsafe { _mm256_loadu_ps(s.as_ptr()) });
    if layout == Interleaved::Q4_K {
        // SAFETY: caller's contract; m holds eight floats.
        unsafe {
            let start = Q4kSums {
                acc: init,
                mins: mins.map(|m| _mm256_loadu_ps(m.as_ptr())),
            };
            let end = q4_k::<T>(nb, w, x, pairs, start);
            for c in 0..T {
                _mm256_storeu_ps(sums[c].as_mut_ptr(), end.acc[c]);
                _mm256_storeu_ps(mins[c].as_mut_ptr(), end.mins[c]);
            }
        }
        return;
    }
    // SAFETY: caller's contract.
    let acc = unsafe {
        match layout {
            Interleaved::Q4_0 => q4_0::<T>(nb, w, x, init),
            Interleaved::Q4_K => unreachable!("Q4_K takes its two sums above"),
            Interleaved::IQ4_NL => looked_up::<T, false>(nb, w, x, init),
            Interleaved::MXFP4 => looked_up::<T, true>(nb, w, x, init),
        }
    };
    for (s, a) in sums.iter_mut().zip(acc) {
        // SAFETY: s holds eight floats.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr(), a) };
    }
}

/// Q4_0: a block's eight steps add up in 16 bits (codes below 16,
/// at most 30480), are widened once, and take the activations'
/// `-8 * sum(q)` as their bias.
///
/// # Safety
/// As for [`tile`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0<const T: usize>(nb: usize, w: *const u8, x: &Acts, acc: [__m256; T]) -> [__m256; T] {
    // SAFETY: caller's contract.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0x0f);
        let mut acc = acc;
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
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dx), *a);
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
unsafe fn q4_k<const T: usize>(
    nb: usize,
    w: *const u8,
    x: &Acts,
    pairs: bool,
    start: Q4kSums<T>,
) -> Q4kSums<T> {
    const SUB: usize = 8;
    let chunks = Interleaved::Q4_K.chunks_at();
    // SAFETY: caller's contract.
    unsafe {
        let low = _mm256_set1_epi8(0x0f);
        // byte j of each lane, as a 16-bit value in both halves
        let spread = |j: i8| lane_bytes(j, j);
        let spreads = [spread(0), spread(1), spread(2), spread(3)];
        let mut acc = start;
        let mut wp = w;
        for sb in 0..nb {
            if T == 1 {
                prefetch_ahead(wp, Interleaved::Q4_K.group_block_bytes());
            }
            let [sc_lo, sc_hi, mn_lo, mn_hi] = q4_k_scale_words(wp);
            let codes = wp.add(chunks + 3 * 32);
            let xp = (x.codes as *const i32).add(sb * SUB * 8 * T);
            let (dd, dm) = Q4kSums::<T>::scales(wp, x, sb);
            let min_words = q4_k_pair_min_words([mn_lo, mn_hi]);
            let mut total = [_mm256_setzero_si256(); T];
            let mut total_mins = [_mm256_setzero_si256(); T];
            for p in 0..SUB / 2 {
                let mut lo_pairs = [_mm256_setzero_si256(); T];
                let mut hi_pairs = [_mm256_setzero_si256(); T];
                for step in 0..8 {
                    let v = _mm256_loadu_si256(codes.add((p * 8 + step) * 32) as *const __m256i);
                    let lo = _mm256_and_si256(v, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                    for c in 0..T {
                        let xl = _mm256_set1_epi32(*xp.add(((2 * p) * 8 + step) * T + c));
                        let xh = _mm256_set1_epi32(*xp.add(((2 * p + 1) * 8 + step) * T + c));
                        lo_pairs[c] = _mm256_add_epi16(lo_pairs[c], _mm256_maddubs_epi16(lo, xl));
                        hi_pairs[c] = _mm256_add_epi16(hi_pairs[c], _mm256_maddubs_epi16(hi, xh));
                    }
                }
                let words = if p < 2 { sc_lo } else { sc_hi };
                let j = 2 * (p % 2);
                let (s_lo, s_hi) = (
                    _mm256_shuffle_epi8(words, spreads[j]),
                    _mm256_shuffle_epi8(words, spreads[j + 1]),
                );
                let mut pair = [_mm256_setzero_si256(); T];
                for c in 0..T {
                    let l = _mm256_madd_epi16(lo_pairs[c], s_lo);
                    let h = _mm256_madd_epi16(hi_pairs[c], s_hi);
                    pair[c] = _mm256_add_epi32(l, h);
                }
                let mins = q4_k_pair_mins::<T>(min_words[p], x, sb, p);
                if pairs {
                    acc.step(pair, mins, dd, dm);
                } else {
                    for c in 0..T {
                        total[c] = _mm256_add_epi32(total[c], pair[c]);
                        total_mins[c] = _mm256_add_epi32(total_mins[c], mins[c]);
                    }
                }
            }
            if !pairs {
                acc.step(total, total_mins, dd, dm);
            }
            wp = wp.add(Interleaved::Q4_K.group_block_bytes());
        }
        acc
    }
}

/// IQ4_NL and MXFP4 (`MX`): Q4_0's nibbles, looked up in the type's
/// table (signed values), then as Q8_0's signed codes: each step `|w|`
/// against the activations with `w`'s sign, widened every step.
///
/// # Safety
/// As for [`tile`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn looked_up<const T: usize, const MX: bool>(
    nb: usize,
    w: *const u8,
    x: &Acts,
    acc: [__m256; T],
) -> [__m256; T] {
    let layout = if MX {
        Interleaved::MXFP4
    } else {
        Interleaved::IQ4_NL
    };
    let (bytes, at) = (layout.group_block_bytes(), layout.chunks_at());
    // SAFETY: caller's contract.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0x0f);
        let values = layout.code_table().unwrap_or(&[0; 16]);
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(values.as_ptr() as *const __m128i));
        let mut acc = acc;
        let mut wp = w;
        let mut xp = x.codes as *const i32;
        for blk in 0..nb {
            if T == 1 {
                prefetch_ahead(wp, bytes);
            }
            let d = block_scales(layout, wp);
            let mut block = [_mm256_setzero_si256(); T];
            for j in 0..4 {
                let v = _mm256_loadu_si256(wp.add(at + 32 * j) as *const __m256i);
                let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                let hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16::<4>(v), low));
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
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dx), *a);
            }
            wp = wp.add(bytes);
            xp = xp.add(8 * T);
        }
        acc
    }
}
