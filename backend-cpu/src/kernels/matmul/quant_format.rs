//! How each quantised weight format reads as unsigned codes `u` with a
//! per-block scale `dw`, an integer offset `o` and (Q4_1, Q5_1, Q2_K,
//! Q4_K, Q5_K) a per-block min `mw`, and the decoder that unpacks a row
//! into them:
//!
//! ```text
//! w = dw * (u - o) - mw          x = dx * q
//! dot(w, x) over a block = dx * (dw * (sum(u * q) - o * sum(q)) - mw * sum(q))
//! ```
//!
//! `x = dx * q` is an activation quantised to 8 bits (`activation_quant`).
//!
//! The `_1` formats' min `m` is added, so their `mw` is `-m`. The IQ4
//! formats' codes index a table of signed values; `u` is the value plus
//! 128, as Q8_0's codes are.

use ggraph_core::DType;
use ggraph_core::quant::{IQ4_VALUES, f16_to_f32};

use crate::kernels::isa::Isa;

/// The 8-bit type ggml quantises the activations to for a weight type (its
/// `vec_dot_type`): ggraph rounds them the same way, so that its integer
/// sums are ggml's and only the order of float additions differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Partner {
    /// One scale `amax / 127` a 32 values, kept as f16 (Q4_0, Q5_0, Q8_0,
    /// IQ4_NL).
    Q8_0,
    /// Q8_0's codes and scale, and `d * sum(q)` kept as f16 for the min
    /// term (Q4_1, Q5_1).
    Q8_1,
    /// One f32 scale a 256-value super-block (the K-quants, IQ4_XS).
    Q8K,
}

impl Partner {
    /// Values that share one scale.
    pub(crate) const fn span(self) -> usize {
        match self {
            Partner::Q8_0 | Partner::Q8_1 => 32,
            Partner::Q8K => 256,
        }
    }
}

/// How one weight format reads as codes.
#[derive(Clone, Copy)]
pub(crate) struct Format {
    pub(crate) dtype: DType,
    /// Values per scale.
    pub(crate) qb: usize,
    /// Offset subtracted from the codes.
    pub(crate) offset: i32,
    /// Whether blocks carry a min (`mw`).
    pub(crate) has_min: bool,
    /// Whether the codes are signed bytes plus 128 (Q8_0, the IQ4s): up to
    /// 255, too large for `vpmaddubsw`'s 16-bit pair sums, so the AVX2
    /// kernels take them signed.
    pub(crate) signed: bool,
    /// How the activations are rounded for it.
    pub(crate) partner: Partner,
}

pub(crate) fn format(dtype: DType) -> Option<Format> {
    let (qb, offset, has_min) = match dtype {
        DType::Q8_0 | DType::IQ4_NL | DType::IQ4_XS => (32, 128, false),
        DType::Q4_0 => (32, 8, false),
        DType::Q5_0 => (32, 16, false),
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => (32, 0, true),
        DType::Q2_K => (16, 0, true),
        DType::Q3_K => (16, 4, false),
        DType::Q6_K => (16, 32, false),
        _ => return None,
    };
    let partner = match dtype {
        DType::Q4_1 | DType::Q5_1 => Partner::Q8_1,
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS => {
            Partner::Q8K
        }
        _ => Partner::Q8_0,
    };
    Some(Format {
        dtype,
        qb,
        offset,
        has_min,
        signed: offset == 128,
        partner,
    })
}

/// The IQ4 table as codes: each value plus 128.
pub(crate) const IQ4_CODES: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (IQ4_VALUES[i] as i32 + 128) as u8;
        i += 1;
    }
    t
};

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
pub(crate) fn q4k_scales_mins(s: &[u8; 12]) -> [u32; 4] {
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
pub(crate) unsafe fn decode(
    f: Format,
    row: *const u8,
    v0: usize,
    codes: &mut [u8],
    dw: &mut [f32],
    mw: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::isa::active() >= Isa::Avx2 {
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
            return unsafe { crate::kernels::math::f16_at(b[at..at + 2].as_ptr()) };
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
        DType::Q4_0 | DType::Q4_1 => {
            let with_min = f.dtype == DType::Q4_1;
            let qs_at = if with_min { 4 } else { 2 };
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                dw[bi] = f16(blk, 0);
                if with_min {
                    mw[bi] = -f16(blk, 2);
                }
                let c = &mut codes[bi * 32..bi * 32 + 32];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 16 bytes in, 32 codes out.
                    unsafe { x86::q4_codes(blk[qs_at..].as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for (j, q) in blk[qs_at..].iter().enumerate() {
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
        DType::Q5_0 | DType::Q5_1 => {
            let with_min = f.dtype == DType::Q5_1;
            let qh_at = if with_min { 4 } else { 2 };
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                dw[bi] = f16(blk, 0);
                if with_min {
                    mw[bi] = -f16(blk, 2);
                }
                let (qh, qs) = blk[qh_at..].split_at(4);
                let c = &mut codes[bi * 32..bi * 32 + 32];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 4 + 16 bytes in, 32 codes out.
                    unsafe { x86::q5_codes(qh.as_ptr(), qs.as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
                for (j, q) in qs.iter().enumerate() {
                    c[j] = (q & 0x0f) | ((((high >> j) & 1) as u8) << 4);
                    c[j + 16] = (q >> 4) | ((((high >> (j + 16)) & 1) as u8) << 4);
                }
            }
        }
        DType::Q2_K => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let (sc, rest) = blk.split_at(16);
                let (qs, ds) = rest.split_at(64);
                let d = f16(ds, 0);
                let dmin = f16(ds, 2);
                for (j, s) in sc.iter().enumerate() {
                    dw[bi * 16 + j] = d * (s & 0x0f) as f32;
                    mw[bi * 16 + j] = dmin * (s >> 4) as f32;
                }
                let c = &mut codes[bi * 256..bi * 256 + 256];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 64 bytes in, 256 codes out.
                    unsafe { x86::q2k_codes(qs.as_ptr(), std::ptr::null(), c.as_mut_ptr()) };
                    continue;
                }
                for (i, c) in c.iter_mut().enumerate() {
                    let (half, s, l) = (i / 128, (i % 128) / 32, i % 32);
                    *c = (qs[32 * half + l] >> (2 * s)) & 3;
                }
            }
        }
        DType::Q3_K => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let (hmask, rest) = blk.split_at(32);
                let (qs, rest) = rest.split_at(64);
                let (sc, ds) = rest.split_at(12);
                let d = f16(ds, 0);
                for j in 0..16 {
                    let low = (sc[j % 8] >> (4 * (j / 8))) & 0x0f;
                    let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
                    dw[bi * 16 + j] = d * ((low | (high << 4)) as i32 - 32) as f32;
                }
                let c = &mut codes[bi * 256..bi * 256 + 256];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 64 + 32 bytes in, 256 codes out.
                    unsafe { x86::q2k_codes(qs.as_ptr(), hmask.as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for (i, c) in c.iter_mut().enumerate() {
                    let (half, s, l) = (i / 128, (i % 128) / 32, i % 32);
                    let low = (qs[32 * half + l] >> (2 * s)) & 3;
                    *c = low | (((hmask[i % 32] >> (i / 32)) & 1) << 2);
                }
            }
        }
        DType::Q5_K => {
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let d = f16(blk, 0);
                let dmin = f16(blk, 2);
                let scales = &blk[4..16];
                let (qh, qs) = blk[16..].split_at(32);
                for j in 0..8 {
                    let (sc, mn) = q4k_scale_min(j, scales);
                    dw[bi * 8 + j] = d * sc as f32;
                    mw[bi * 8 + j] = dmin * mn as f32;
                }
                let c = &mut codes[bi * 256..bi * 256 + 256];
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    // SAFETY: AVX2 is available; 32 + 128 bytes in, 256 codes out.
                    unsafe { x86::q5k_codes(qh.as_ptr(), qs.as_ptr(), c.as_mut_ptr()) };
                    continue;
                }
                for g in 0..4 {
                    for l in 0..32 {
                        let q = qs[32 * g + l];
                        c[64 * g + l] = (q & 0x0f) | (((qh[l] >> (2 * g)) & 1) << 4);
                        c[64 * g + 32 + l] = (q >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
                    }
                }
            }
        }
        DType::IQ4_NL | DType::IQ4_XS => {
            let xs = f.dtype == DType::IQ4_XS;
            for (bi, blk) in src.chunks_exact(ts).enumerate() {
                let d = f16(blk, 0);
                let (groups, qs) = if xs {
                    let scales_h = u16::from_le_bytes([blk[2], blk[3]]);
                    for j in 0..8 {
                        let low = (blk[4 + j / 2] >> (4 * (j % 2))) & 0x0f;
                        let high = ((scales_h >> (2 * j)) & 3) as u8;
                        dw[bi * 8 + j] = d * ((low | (high << 4)) as i32 - 32) as f32;
                    }
                    (8, &blk[8..])
                } else {
                    dw[bi] = d;
                    (1, &blk[2..])
                };
                for g in 0..groups {
                    let q = &qs[16 * g..16 * g + 16];
                    let c = &mut codes[(bi * groups + g) * 32..(bi * groups + g) * 32 + 32];
                    #[cfg(target_arch = "x86_64")]
                    if SIMD {
                        // SAFETY: AVX2 is available; 16 bytes in, 32 codes out.
                        unsafe { x86::iq4_codes(q.as_ptr(), c.as_mut_ptr()) };
                        continue;
                    }
                    for (j, b) in q.iter().enumerate() {
                        c[j] = IQ4_CODES[(b & 0x0f) as usize];
                        c[j + 16] = IQ4_CODES[(b >> 4) as usize];
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

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

    /// Q5_0/Q5_1 codes: Q4_0's nibble order, the fifth bit of value j
    /// from bit j of the little-endian u32 at `qh`.
    ///
    /// # Safety
    /// AVX2; 4 bytes at `qh`, 16 at `qs`, room for 32 at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q5_codes(qh: *const u8, qs: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            q4_codes(qs, out);
            let low = _mm256_loadu_si256(out as *const __m256i);
            let high = spread_bits(std::ptr::read_unaligned(qh as *const u32));
            let fifth = _mm256_and_si256(high, _mm256_set1_epi8(0x10));
            _mm256_storeu_si256(out as *mut __m256i, _mm256_or_si256(low, fifth));
        }
    }

    /// The 32 bits of `bits` as 32 bytes, byte j 0xff where bit j is set.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn spread_bits(bits: u32) -> __m256i {
        let v = _mm256_set1_epi32(bits as i32);
        // byte j takes source byte j / 8, then tests bit j % 8
        let pick = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        );
        let v = _mm256_shuffle_epi8(v, pick);
        let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask)
    }

    /// Q2_K codes (0..4) from 64 code bytes, or Q3_K codes (0..8) when
    /// `hmask` (32 bytes, bit `i / 32` of byte `i % 32` for value i) is
    /// not null.
    ///
    /// # Safety
    /// AVX2; 64 bytes at `qs`, 32 at `hmask` unless null, room for 256
    /// at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q2k_codes(qs: *const u8, hmask: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            let m2 = _mm256_set1_epi8(3);
            let h = if hmask.is_null() {
                _mm256_setzero_si256()
            } else {
                _mm256_loadu_si256(hmask as *const __m256i)
            };
            for half in 0..2 {
                let q = _mm256_loadu_si256(qs.add(32 * half) as *const __m256i);
                for s in 0..4 {
                    let shifted = match s {
                        0 => q,
                        1 => _mm256_srli_epi16::<2>(q),
                        2 => _mm256_srli_epi16::<4>(q),
                        _ => _mm256_srli_epi16::<6>(q),
                    };
                    let mut c = _mm256_and_si256(shifted, m2);
                    if !hmask.is_null() {
                        // value 128 * half + 32 * s + l takes bit 4 * half + s of hmask[l]
                        let bit = _mm256_set1_epi8(1 << (4 * half + s));
                        let set = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
                        c = _mm256_or_si256(c, _mm256_and_si256(set, _mm256_set1_epi8(4)));
                    }
                    _mm256_storeu_si256(out.add(128 * half + 32 * s) as *mut __m256i, c);
                }
            }
        }
    }

    /// Q5_K codes: Q4_K's nibbles, the fifth bit of value `64 g + 32 h + l`
    /// from bit `2 g + h` of `qh[l]`.
    ///
    /// # Safety
    /// AVX2; 32 bytes at `qh`, 128 at `qs`, room for 256 at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn q5k_codes(qh: *const u8, qs: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            q4k_codes(qs, out);
            let h = _mm256_loadu_si256(qh as *const __m256i);
            for i in 0..8 {
                let bit = _mm256_set1_epi8(1 << i);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
                let p = out.add(32 * i) as *mut __m256i;
                let c = _mm256_loadu_si256(p);
                _mm256_storeu_si256(
                    p,
                    _mm256_or_si256(c, _mm256_and_si256(set, _mm256_set1_epi8(0x10))),
                );
            }
        }
    }

    /// IQ4 codes: each nibble looked up in the table of values plus 128.
    ///
    /// # Safety
    /// AVX2; 16 bytes at `q`, room for 32 at `out`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn iq4_codes(q: *const u8, out: *mut u8) {
        // SAFETY: caller's contract.
        unsafe {
            q4_codes(q, out);
            let n = _mm256_loadu_si256(out as *const __m256i);
            let table = _mm_loadu_si128(super::IQ4_CODES.as_ptr() as *const __m128i);
            let table = _mm256_broadcastsi128_si256(table);
            _mm256_storeu_si256(out as *mut __m256i, _mm256_shuffle_epi8(table, n));
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
