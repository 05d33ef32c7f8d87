//! What the K-quant kernels for few columns share (`kquant_dot` and
//! `kquant_dot_more`): activation columns quantised to ggml's Q8_K form
//! (one scale per 256 values, the sums of the codes per 16 and per 32),
//! the kernels' call and column types, and small helpers.

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::activation_quant::Scale;
use super::few_columns;
use super::operands::Cols;
use super::quant_format::Partner;
use crate::kernels::scratch::with_scratch;

/// Values per super-block.
pub(super) const QK: usize = 256;

thread_local! {
    static ACTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Activation columns in Q8_K form, one after the other.
pub(super) struct Q8k<'a> {
    nsb: usize,
    codes: &'a [i8],
    /// Scale per super-block.
    d: &'a [f32],
    /// Sums of the codes per 16 values.
    bs16: &'a [i16],
    /// Sums of the codes per 32 values.
    bs32: &'a [i32],
}

impl Q8k<'_> {
    /// Column `j` from super-block `s0` on.
    pub(super) fn column(&self, j: usize, s0: usize) -> Column {
        let sb = j * self.nsb + s0;
        Column {
            codes: self.codes[sb * QK..].as_ptr(),
            d: self.d[sb..].as_ptr(),
            bs16: self.bs16[sb * 16..].as_ptr(),
            bs32: self.bs32[sb * 8..].as_ptr(),
        }
    }
}

/// Bytes of scratch for `n` columns of `nsb` super-blocks: codes, then
/// 32-byte aligned scales, sums per 16 and sums per 32.
fn q8k_layout(n: usize, nsb: usize) -> [usize; 4] {
    let codes = n * nsb * QK;
    let d_at = codes.next_multiple_of(32);
    let bs16_at = (d_at + n * nsb * 4).next_multiple_of(32);
    let bs32_at = (bs16_at + n * nsb * 32).next_multiple_of(32);
    [d_at, bs16_at, bs32_at, bs32_at + n * nsb * 32]
}

/// Quantises the columns of `b` (`nsb` super-blocks each) to Q8_K and
/// hands them to `f`; `paired` orders each column's 32-value groups as
/// [`paired_group`] says.
///
/// # Safety
/// AVX2 is available; every column of `b` holds `nsb * 256` values.
pub(super) unsafe fn with_q8k_columns<R>(
    b: &Cols<f32>,
    nsb: usize,
    paired: bool,
    f: impl FnOnce(&Q8k) -> R,
) -> R {
    let n = b.0.len();
    let [d_at, bs16_at, bs32_at, len] = q8k_layout(n, nsb);
    with_scratch(&ACTS, len, |buf| {
        let (codes, rest) = buf.split_at_mut(d_at);
        let (d, rest) = rest.split_at_mut(bs16_at - d_at);
        let (bs16, bs32) = rest.split_at_mut(bs32_at - bs16_at);
        // SAFETY: with_scratch gives a 64-byte aligned buffer; every region
        // starts at a multiple of 32 bytes and holds its n * nsb
        // super-blocks' values; the caller's contract for the columns.
        let acts = unsafe {
            let acts = Q8k {
                nsb,
                codes: std::slice::from_raw_parts_mut(codes.as_mut_ptr() as *mut i8, n * nsb * QK),
                d: std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut f32, n * nsb),
                bs16: std::slice::from_raw_parts_mut(bs16.as_mut_ptr() as *mut i16, n * nsb * 16),
                bs32: std::slice::from_raw_parts_mut(bs32.as_mut_ptr() as *mut i32, n * nsb * 8),
            };
            for j in 0..n {
                let s = j * nsb;
                quantize_q8k(
                    paired,
                    b.0[j],
                    nsb,
                    acts.codes.as_ptr().add(s * QK) as *mut i8,
                    acts.d.as_ptr().add(s) as *mut f32,
                    acts.bs16.as_ptr().add(s * 16) as *mut i16,
                    acts.bs32.as_ptr().add(s * 8) as *mut i32,
                );
            }
            acts
        };
        f(&acts)
    })
}

/// Where the codes of a column's 32-value group `g` (sub-block `g` of
/// Q4_K) go for the 512-bit Q4_K kernel: sub-blocks in the order 0, 2, 1,
/// 3, 4, 6, 5, 7, so that each 64 codes pair the sub-blocks whose weight
/// codes share 32 bytes of a super-block (low and high nibbles).
pub(super) fn paired_group(g: usize) -> usize {
    match g % 4 {
        1 => g + 1,
        2 => g - 1,
        _ => g,
    }
}

/// One activation column in Q8_K form, from the call's first super-block.
#[derive(Clone, Copy)]
pub(super) struct Column {
    pub(super) codes: *const i8,
    pub(super) d: *const f32,
    pub(super) bs16: *const i16,
    pub(super) bs32: *const i32,
}

pub(super) type Call<'a> = few_columns::Call<'a, Column>;
pub(super) type KernelFn = few_columns::KernelFn<Column>;

/// Quantises `nsb` super-blocks of `x` to codes in -127..=127 with
/// one scale each, as ggml's Q8_K (`activation_quant::Scale`), and the
/// sums of the codes per 16 and per 32 values. The codes of each
/// 32-value group `g` go to group [`paired_group`]`(g)` when `paired`.
///
/// # Safety
/// AVX2 is available; `x` holds `nsb * 256` values and the outputs
/// room for `nsb` super-blocks.
#[target_feature(enable = "avx2")]
unsafe fn quantize_q8k(
    paired: bool,
    x: *const f32,
    nsb: usize,
    codes: *mut i8,
    d: *mut f32,
    bs16: *mut i16,
    bs32: *mut i32,
) {
    // SAFETY: caller's contract; every access is inside super-block sb.
    unsafe {
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for sb in 0..nsb {
            let p = x.add(sb * QK);
            let mut m = _mm256_setzero_ps();
            for i in 0..QK / 8 {
                m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(p.add(8 * i)), abs));
            }
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let scale = Scale::new(Partner::Q8K, amax);
            *d.add(sb) = scale.d;
            let inv = _mm256_set1_ps(scale.id);
            for g in 0..QK / 32 {
                let q: [__m256i; 4] = std::array::from_fn(|i| {
                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p.add(32 * g + 8 * i)), inv))
                });
                // the sums of values 0..16 and 16..32
                let s = [_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])];
                let s = _mm256_hadd_epi32(s[0], s[1]);
                let s = _mm256_hadd_epi32(s, s);
                // lanes: [a0+a1, b0+b1, .., a2+a3, b2+b3, ..] for halves a, b
                let lo = _mm256_castsi256_si128(s);
                let hi = _mm256_extracti128_si256::<1>(s);
                let s = _mm_add_epi32(lo, hi);
                let (sa, sb2) = (_mm_cvtsi128_si32(s), _mm_extract_epi32::<1>(s));
                *bs16.add(sb * 16 + 2 * g) = sa as i16;
                *bs16.add(sb * 16 + 2 * g + 1) = sb2 as i16;
                *bs32.add(sb * 8 + g) = sa + sb2;
                let w = _mm256_packs_epi16(
                    _mm256_packs_epi32(q[0], q[1]),
                    _mm256_packs_epi32(q[2], q[3]),
                );
                let w = _mm256_permutevar8x32_epi32(w, order);
                let at = if paired { paired_group(g) } else { g };
                _mm256_storeu_si256(codes.add(sb * QK + 32 * at) as *mut __m256i, w);
            }
        }
    }
}

/// Prefetches every cache line of a `TS`-byte super-block at `p`: one
/// every 64 bytes from its start, and its last byte (a 210-byte Q6_K
/// block can touch five lines).
#[inline(always)]
pub(super) fn prefetch_super_block<const TS: usize>(p: *const u8) {
    // SAFETY: prefetches do not fault.
    unsafe {
        let mut at = 0;
        while at < TS {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at) as *const i8);
            at += 64;
        }
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(TS - 1) as *const i8);
    }
}

/// The 32 activation codes at `p`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn codes32(p: *const i8) -> __m256i {
    // SAFETY: caller's contract.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// Per 32 values `32 i..` of a 256-value super-block with 16 scales, the
/// shuffle of the 16-bit scales `8 (i / 4)..8 (i / 4) + 8`, in both
/// 128-bit halves of a register, that spreads the scale of the first 16
/// values (`2 (i % 4)` of those eight) over the low half and that of the
/// next 16 over the high half, for `vpmaddwd`.
static SCALE_PAIRS: [[u8; 32]; 4] = {
    let mut t = [[0u8; 32]; 4];
    let mut i = 0;
    while i < 4 {
        let mut b = 0;
        while b < 32 {
            let scale = 2 * i + b / 16;
            t[i][b] = (2 * scale + b % 2) as u8;
            b += 1;
        }
        i += 1;
    }
    t
};

/// [`SCALE_PAIRS`]`[step]`, `step < 4`.
///
/// # Safety
/// AVX is available.
#[inline(always)]
pub(super) unsafe fn scale_pair(step: usize) -> __m256i {
    // SAFETY: a 32-byte row of a static; the caller's AVX.
    unsafe { _mm256_loadu_si256(SCALE_PAIRS[step].as_ptr() as *const __m256i) }
}

/// The rows of a kernel call `R` at a time: `kernel` gives the dots of
/// `R` rows (their pointers at the call's first super-block) with the
/// call's `C` columns, which are stored in (or added to) the outputs.
///
/// # Safety
/// As for [`KernelFn`]; `kernel` reads only the call's super-blocks of the
/// rows it is given.
#[inline(always)]
pub(super) unsafe fn row_groups<const R: usize, const C: usize>(
    call: &Call,
    rows: std::ops::Range<usize>,
    ts: usize,
    kernel: impl Fn(&[*const u8; R]) -> [[f32; C]; R],
) {
    for i in rows.step_by(R) {
        // SAFETY: caller's contract: rows i..i + R exist, hold the call's
        // super-blocks, and their outputs are the caller's.
        unsafe {
            let row: [*const u8; R] = std::array::from_fn(|q| call.a.row(i + q).add(call.b0 * ts));
            let res = kernel(&row);
            for c in 0..C {
                for (q, v) in res.iter().enumerate() {
                    let o = call.out[c].add(i + q);
                    *o = if call.add { *o + v[c] } else { v[c] };
                }
            }
        }
    }
}
