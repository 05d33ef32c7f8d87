//! The interleaved kernels with AVX-512 VNNI: each step one 256-bit
//! `vpdpbusd` a column, unsigned weight codes against signed activation
//! codes, summed straight into 32 bits. Signed weights (IQ4_NL) are
//! made unsigned by adding 128 (a shifted table), which
//! the activations' `-128 * sum(q)` bias takes back off, as for Q4_0's 8.
//!
//! 256-bit rather than 512-bit: a chunk load holds one step of the group's
//! eight rows, and on the processors measured (Intel's with AVX-512, AMD
//! Zen 4) a 512-bit `vpdpbusd` does no more work a cycle than two 256-bit
//! ones.

use std::arch::x86_64::*;

use super::{Acts, Q4kSums, prefetch_ahead, q4_k_pair_min_words, q4_k_pair_mins};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved, block_scales, q4_k_scale_words};
use crate::kernels::matmul::quant_format::{IQ4_CODES, MXFP4_CODES};

/// `sums[c][r] += dot(row r of the group, column c)` over `nb` blocks of
/// an interleaved group from `w`, `T` columns of activations quantised
/// with the weights' offset (`quant_format::format`: 8 for Q4_0, 128 for
/// IQ4_NL) in their biases.
///
/// # Safety
/// AVX-512 F/BW/VL and VNNI, AVX2, FMA and F16C; `w` holds `nb` blocks of
/// the group and `x` `nb` blocks of `T` columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
            Interleaved::Q4_0 => nibbles::<T, PLAIN>(nb, w, x, init),
            Interleaved::IQ4_NL => nibbles::<T, IQ4>(nb, w, x, init),
            Interleaved::MXFP4 => nibbles::<T, MX>(nb, w, x, init),
            Interleaved::Q4_K => unreachable!("Q4_K takes its two sums above"),
        }
    };
    for (s, a) in sums.iter_mut().zip(acc) {
        // SAFETY: s holds eight floats.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr(), a) };
    }
}

/// The block's integer sums, scaled by the rows' `d` and the columns'
/// scales, added to `acc`.
///
/// # Safety
/// As for [`tile`]; `block` is the block's index, `wp` its group block of
/// `layout` (not Q4_K).
#[inline(always)]
unsafe fn add_block<const T: usize>(
    layout: Interleaved,
    acc: &mut [__m256; T],
    sums: [__m256i; T],
    wp: *const u8,
    x: &Acts,
    block: usize,
) {
    // SAFETY: caller's contract: the block's scales and the columns' lie
    // in their arrays.
    unsafe {
        let d = block_scales(layout, wp);
        for (c, (a, s)) in acc.iter_mut().zip(sums).enumerate() {
            let dx = _mm256_set1_ps(*x.d.add(block * T + c));
            *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dx), *a);
        }
    }
}

/// The nibble formats [`nibbles`] reads: Q4_0's codes, or indices into
/// IQ4_NL's or MXFP4's table.
const PLAIN: u8 = 0;
const IQ4: u8 = 1;
const MX: u8 = 2;

/// Q4_0, IQ4_NL and MXFP4: each chunk's low nibbles are one step, its
/// high nibbles the step 16 values on. Q4_0's nibbles are its codes;
/// IQ4_NL's and MXFP4's index their tables, shifted up by 128 to be
/// unsigned.
///
/// # Safety
/// As for [`tile`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn nibbles<const T: usize, const F: u8>(
    nb: usize,
    w: *const u8,
    x: &Acts,
    acc: [__m256; T],
) -> [__m256; T] {
    let (layout, codes) = match F {
        IQ4 => (Interleaved::IQ4_NL, &IQ4_CODES),
        MX => (Interleaved::MXFP4, &MXFP4_CODES),
        _ => (Interleaved::Q4_0, &IQ4_CODES),
    };
    let at = layout.chunks_at();
    // SAFETY: caller's contract.
    unsafe {
        let low = _mm256_set1_epi8(0x0f);
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(codes.as_ptr() as *const __m128i));
        let mut acc = acc;
        let mut wp = w;
        let mut xp = x.codes as *const i32;
        for blk in 0..nb {
            if T == 1 {
                prefetch_ahead(wp, layout.group_block_bytes());
            }
            let mut sums: [__m256i; T] =
                std::array::from_fn(|c| _mm256_set1_epi32(*x.bias.add(blk * T + c)));
            for j in 0..4 {
                let v = _mm256_loadu_si256(wp.add(at + 32 * j) as *const __m256i);
                let mut lo = _mm256_and_si256(v, low);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                if F != PLAIN {
                    lo = _mm256_shuffle_epi8(table, lo);
                    hi = _mm256_shuffle_epi8(table, hi);
                }
                for (c, s) in sums.iter_mut().enumerate() {
                    let xl = _mm256_set1_epi32(*xp.add(j * T + c));
                    let xh = _mm256_set1_epi32(*xp.add((j + 4) * T + c));
                    *s = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(*s, lo, xl), hi, xh);
                }
            }
            add_block(layout, &mut acc, sums, wp, x, blk);
            wp = wp.add(layout.group_block_bytes());
            xp = xp.add(8 * T);
        }
        acc
    }
}

/// Q4_K: per pair of sub-blocks, eight chunk loads whose low nibbles are
/// the first sub-block's steps and high nibbles the second's, each
/// sub-block summed in 32 bits and multiplied by its rows' 6-bit scales;
/// then the mins, as on AVX2 (`q4_k_add_super_block`).
///
/// # Safety
/// As for [`tile`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
        let byte = _mm256_set1_epi32(0xff);
        let mut acc = start;
        let mut wp = w;
        for sb in 0..nb {
            if T == 1 {
                prefetch_ahead(wp, Interleaved::Q4_K.group_block_bytes());
            }
            let [sc_lo, sc_hi, mn_lo, mn_hi] = q4_k_scale_words(wp);
            let scale = |sub: usize| {
                let words = if sub < 4 { sc_lo } else { sc_hi };
                let shifted = match sub % 4 {
                    0 => words,
                    1 => _mm256_srli_epi32::<8>(words),
                    2 => _mm256_srli_epi32::<16>(words),
                    _ => _mm256_srli_epi32::<24>(words),
                };
                _mm256_and_si256(shifted, byte)
            };
            let codes = wp.add(chunks + 3 * 32);
            let xp = (x.codes as *const i32).add(sb * SUB * 8 * T);
            let (dd, dm) = Q4kSums::<T>::scales(wp, x, sb);
            let min_words = q4_k_pair_min_words([mn_lo, mn_hi]);
            let mut total = [_mm256_setzero_si256(); T];
            let mut total_mins = [_mm256_setzero_si256(); T];
            for p in 0..SUB / 2 {
                let mut lo_sums = [_mm256_setzero_si256(); T];
                let mut hi_sums = [_mm256_setzero_si256(); T];
                for step in 0..8 {
                    let v = _mm256_loadu_si256(codes.add((p * 8 + step) * 32) as *const __m256i);
                    let lo = _mm256_and_si256(v, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                    for c in 0..T {
                        let xl = _mm256_set1_epi32(*xp.add(((2 * p) * 8 + step) * T + c));
                        let xh = _mm256_set1_epi32(*xp.add(((2 * p + 1) * 8 + step) * T + c));
                        lo_sums[c] = _mm256_dpbusd_epi32(lo_sums[c], lo, xl);
                        hi_sums[c] = _mm256_dpbusd_epi32(hi_sums[c], hi, xh);
                    }
                }
                let (s_lo, s_hi) = (scale(2 * p), scale(2 * p + 1));
                let mut pair = [_mm256_setzero_si256(); T];
                for c in 0..T {
                    let l = _mm256_mullo_epi32(lo_sums[c], s_lo);
                    let h = _mm256_mullo_epi32(hi_sums[c], s_hi);
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
