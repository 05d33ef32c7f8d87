//! Weights in the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! IQ4_NL) times one to eight activation columns on AVX2: token generation
//! and small batches. On AVX-512 VNNI the same kernels take the formats
//! that have no VNNI path of their own (Q4_1, Q5_0, Q5_1, IQ4_NL), with
//! `vpdpbusd` for the integer dot.
//!
//! The columns are quantised to 8 bits once per call (one scale per block
//! of 32, `activation_quant`), and every weight block is read straight
//! from memory, so that a mat-vec streams the weights once with no decode
//! pass. Per block and (row, column) pair the integer dot is `vpmaddubsw`
//! (unsigned times signed bytes, adjacent pairs summed to 16 bits) and
//! `vpmaddwd` by ones (to eight 32-bit lanes), then one float multiply-add
//! with the product of the two scales:
//!
//! - Q4_0, Q4_1 (codes `u` in 0..16) and Q5_0, Q5_1 (0..32) against
//!   activation codes `q`: a pair sum stays below 2^15. The `_0` codes'
//!   offset (8, 16) comes back in floats as `-o * dw * dx * sum(q)`, the
//!   `_1` blocks' min `m` as `m * dx * sum(q)`: one multiply-add for eight
//!   blocks.
//! - Q8_0 and IQ4_NL (its nibbles looked up in the table of values):
//!   signed codes `w`; `vpmaddubsw` takes `|w|` and `q` with `w`'s sign (a
//!   pair sum is at most 2 * 128 * 127 < 2^15).
//!
//! With VNNI, one `vpdpbusd` (unsigned times signed bytes, four products
//! summed to 32 bits) replaces `vpmaddubsw` and `vpmaddwd`, and IQ4_NL
//! looks its nibbles up in the table plus 128: unsigned codes, whose
//! offset comes back in floats as the `_0` formats' does, so that no
//! `|w|` and no sign move into the activations are needed.
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
use crate::kernels::isa::Isa;
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

/// How a block format lays out its bytes, as the kernel's const
/// parameter.
mod layout {
    pub(super) const Q4_0: u8 = 0;
    pub(super) const Q4_1: u8 = 1;
    pub(super) const Q5_0: u8 = 2;
    pub(super) const Q5_1: u8 = 3;
    pub(super) const Q8_0: u8 = 4;
    pub(super) const IQ4_NL: u8 = 5;

    /// Bytes per block.
    pub(super) const fn block_bytes(l: u8) -> usize {
        match l {
            Q4_0 | IQ4_NL => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            _ => 34,
        }
    }

    /// Where the codes (nibbles, or Q8_0's bytes) start in a block.
    pub(super) const fn codes_at(l: u8) -> usize {
        match l {
            Q4_1 => 4,
            Q5_0 => 6,
            Q5_1 => 8,
            _ => 2,
        }
    }

    /// Where a Q5 block's fifth bits are.
    pub(super) const fn fifth_bits_at(l: u8) -> usize {
        if l == Q5_1 { 4 } else { 2 }
    }

    /// The offset subtracted from the codes (the `_0` formats).
    pub(super) const fn offset(l: u8) -> f32 {
        match l {
            Q4_0 => 8.0,
            Q5_0 => 16.0,
            _ => 0.0,
        }
    }

    /// Whether blocks carry an f16 min after the scale (the `_1` formats).
    pub(super) const fn has_min(l: u8) -> bool {
        matches!(l, Q4_1 | Q5_1)
    }

    /// Whether the codes are signed (the sign trick).
    pub(super) const fn signed(l: u8) -> bool {
        matches!(l, Q8_0 | IQ4_NL)
    }
}

/// The kernel layout of a weight type this path takes.
fn layout_of(dtype: DType) -> Option<u8> {
    Some(match dtype {
        DType::Q4_0 => layout::Q4_0,
        DType::Q4_1 => layout::Q4_1,
        DType::Q5_0 => layout::Q5_0,
        DType::Q5_1 => layout::Q5_1,
        DType::Q8_0 => layout::Q8_0,
        DType::IQ4_NL => layout::IQ4_NL,
        _ => return None,
    })
}

/// `out[j][i] = dot(a row i, b[j])` for `i < m` and the (at most eight)
/// columns of `b`, packed rows of a 32-value block format. The caller has
/// checked that the processor has AVX2, FMA and F16C, and that it has
/// what `isa` names.
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let vnni = isa == Isa::Avx512Vnni;
    let n = b.0.len();
    let k = a.k;
    let (Some(f), Some(lay)) = (format(a.dtype), layout_of(a.dtype)) else {
        return;
    };
    let (_, per_group) = column_groups(n);
    with_scratch(&ACTS, qacts_len(n, k, QB, 1), |buf| {
        let acts = quantize_acts(b, k, f, 1, 8, buf);
        let nb = k / QB;
        let ts = a.dtype.type_size();
        let short_q8 = lay == layout::Q8_0 && nb * ts <= SHORT_ROW_BYTES;
        // one or two columns: four rows per call, except short Q8_0 rows
        // times one column, which stream from memory faster two at a time
        // (docs/performance.md). The other formats do more work per
        // byte: no gain for them.
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
        unsafe { few_columns::run(&a, m, n, out, plan, column, |r, c| kernel(lay, r, c, vnni)) };
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
/// With `vnni`, the `vpdpbusd` kernels of the formats VNNI machines send
/// here (Q4_0 and Q8_0 have paths of their own there).
fn kernel(lay: u8, r: usize, c: usize, vnni: bool) -> KernelFn {
    macro_rules! pick {
        ($f:ident, $l:expr) => {
            match (r, c) {
                (4, 1) => x86::$f::<4, 1, { $l }> as KernelFn,
                (4, _) => x86::$f::<4, 2, { $l }> as KernelFn,
                (2, 1) => x86::$f::<2, 1, { $l }> as KernelFn,
                (2, 2) => x86::$f::<2, 2, { $l }> as KernelFn,
                (2, 3) => x86::$f::<2, 3, { $l }> as KernelFn,
                (2, _) => x86::$f::<2, 4, { $l }> as KernelFn,
                (_, 1) => x86::$f::<1, 1, { $l }> as KernelFn,
                (_, 2) => x86::$f::<1, 2, { $l }> as KernelFn,
                (_, 3) => x86::$f::<1, 3, { $l }> as KernelFn,
                _ => x86::$f::<1, 4, { $l }> as KernelFn,
            }
        };
    }
    match (lay, vnni) {
        (layout::Q4_1, true) => pick!(blocks_vnni, layout::Q4_1),
        (layout::Q5_0, true) => pick!(blocks_vnni, layout::Q5_0),
        (layout::Q5_1, true) => pick!(blocks_vnni, layout::Q5_1),
        (layout::IQ4_NL, true) => pick!(blocks_vnni, layout::IQ4_NL),
        (layout::Q4_0, _) => pick!(blocks, layout::Q4_0),
        (layout::Q4_1, _) => pick!(blocks, layout::Q4_1),
        (layout::Q5_0, _) => pick!(blocks, layout::Q5_0),
        (layout::Q5_1, _) => pick!(blocks, layout::Q5_1),
        (layout::IQ4_NL, _) => pick!(blocks, layout::IQ4_NL),
        _ => pick!(blocks, layout::Q8_0),
    }
}

mod x86 {
    use std::arch::x86_64::*;

    use crate::kernels::math::hsum256;
    use std::ops::Range;

    use super::layout::{self, block_bytes, codes_at, fifth_bits_at, has_min};
    use super::{Call, GROUP, QB};
    use ggraph_core::quant::{IQ4_VALUES, f16_to_f32};

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

    /// IQ4_NL's values plus 128, for the unsigned codes of the VNNI
    /// kernels.
    const IQ4_BIASED: [u8; 16] = {
        let mut t = [0u8; 16];
        let mut i = 0;
        while i < 16 {
            t[i] = (IQ4_VALUES[i] as i16 + 128) as u8;
            i += 1;
        }
        t
    };

    /// The offset subtracted from the codes of layout `L` as the kernels
    /// read them (`V`: the VNNI kernels').
    const fn offset<const L: u8, const V: bool>() -> f32 {
        if V && L == layout::IQ4_NL {
            128.0
        } else {
            super::layout::offset(L)
        }
    }

    /// Whether the kernels read signed codes (the sign trick).
    const fn signed<const L: u8, const V: bool>() -> bool {
        super::layout::signed(L) && !(V && L == layout::IQ4_NL)
    }

    /// `R` rows of blocks of layout `L` times `C` columns.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; the call's first `R` rows and
    /// `C` columns hold `nb` blocks each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn blocks<const R: usize, const C: usize, const L: u8>(
        call: &Call,
        rows: Range<usize>,
    ) {
        // SAFETY: caller's contract.
        unsafe { blocks_with::<R, C, L, false>(call, rows) }
    }

    /// As [`blocks`], the integer dot in `vpdpbusd`.
    ///
    /// # Safety
    /// As [`blocks`], and AVX-512 VNNI and VL are available.
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn blocks_vnni<const R: usize, const C: usize, const L: u8>(
        call: &Call,
        rows: Range<usize>,
    ) {
        // SAFETY: caller's contract.
        unsafe { blocks_with::<R, C, L, true>(call, rows) }
    }

    /// The body of [`blocks`] (`V` false) and [`blocks_vnni`] (true),
    /// inlined into each so that the intrinsics take their features.
    ///
    /// # Safety
    /// As those.
    #[inline(always)]
    unsafe fn blocks_with<const R: usize, const C: usize, const L: u8, const V: bool>(
        call: &Call,
        rows: Range<usize>,
    ) {
        for i in rows.step_by(R) {
            // SAFETY: caller's contract.
            unsafe {
                let ts = block_bytes(L);
                let row: [*const u8; R] =
                    std::array::from_fn(|q| call.a.row(i + q).add(call.b0 * ts));
                let res = group::<R, C, L, V>(&row, call);
                for c in 0..C {
                    for (q, v) in res.iter().enumerate() {
                        let o = call.out[c].add(i + q);
                        *o = if call.add { *o + v[c] } else { v[c] };
                    }
                }
            }
        }
    }

    /// The 32 codes of the block at `p` (its start): unsigned (the 4- and
    /// 5-bit formats, and IQ4_NL's table values plus 128 for the VNNI
    /// kernels) or signed (Q8_0, IQ4_NL's table values).
    ///
    /// # Safety
    /// AVX2; `p` holds a block of layout `L`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes<const L: u8, const V: bool>(p: *const u8) -> __m256i {
        // SAFETY: caller's contract.
        unsafe {
            let q = p.add(codes_at(L));
            if L == layout::Q8_0 {
                return _mm256_loadu_si256(q as *const __m256i);
            }
            // the high half of a broadcast nibble row moves down to values 16..32
            let v = _mm256_broadcastsi128_si256(_mm_loadu_si128(q as *const __m128i));
            let shift = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
            let u = _mm256_and_si256(_mm256_srlv_epi32(v, shift), _mm256_set1_epi8(0x0f));
            match L {
                layout::IQ4_NL => {
                    let values = if V {
                        IQ4_BIASED.as_ptr()
                    } else {
                        IQ4_VALUES.as_ptr() as *const u8
                    };
                    let table = _mm_loadu_si128(values as *const __m128i);
                    _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), u)
                }
                layout::Q5_0 | layout::Q5_1 => {
                    let bits = (p.add(fifth_bits_at(L)) as *const u32).read_unaligned();
                    let fifth = _mm256_and_si256(spread_bits(bits), _mm256_set1_epi8(0x10));
                    _mm256_or_si256(u, fifth)
                }
                _ => u,
            }
        }
    }

    /// The 32 bits of `bits` as 32 bytes, byte j all ones where bit j is
    /// set.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn spread_bits(bits: u32) -> __m256i {
        let v = _mm256_set1_epi32(bits as i32);
        let pick = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        );
        let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let v = _mm256_and_si256(_mm256_shuffle_epi8(v, pick), mask);
        _mm256_cmpeq_epi8(v, mask)
    }

    /// `R` rows of blocks of layout `L` times the call's first `C`
    /// columns, over the call's blocks (`V`: with `vpdpbusd`).
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available, and with `V` AVX-512 VNNI and
    /// VL; the rows (at block `b0`) and the columns hold `nb` blocks each.
    #[inline(always)]
    unsafe fn group<const R: usize, const C: usize, const L: u8, const V: bool>(
        rows: &[*const u8; R],
        call: &Call,
    ) -> [[f32; C]; R] {
        let ts = block_bytes(L);
        // the codes' offset or the blocks' min times the sum of the
        // column's codes: -o * dw (the `_0` formats) or m (the `_1`)
        let offset = offset::<L, V>();
        let signed = signed::<L, V>();
        let affine = offset != 0.0 || has_min(L);
        // SAFETY: caller's contract; every read is inside a block of a
        // row or a column (prefetches may point past the end).
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            // sum over the blocks of the affine term's coefficient times dx * sum(q)
            let mut extra = [[_mm256_setzero_ps(); C]; R];
            let mut extra_tail = [[0f32; C]; R];
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
                        let coef = if has_min(L) {
                            scales8(p.add(2), ts)
                        } else {
                            _mm256_mul_ps(dw, _mm256_set1_ps(-offset))
                        };
                        for c in 0..C {
                            let dx = _mm256_loadu_ps(call.cols[c].d.add(g0));
                            _mm256_storeu_ps(scale[r][c].as_mut_ptr(), _mm256_mul_ps(dw, dx));
                            if affine {
                                let sx = _mm256_loadu_ps(call.cols[c].sx.add(g0));
                                extra[r][c] = _mm256_fmadd_ps(coef, sx, extra[r][c]);
                            }
                        }
                    } else {
                        for b in 0..gn {
                            let at = |o: usize| {
                                f16_to_f32((p.add(b * ts + o) as *const u16).read_unaligned())
                            };
                            let dw = at(0);
                            let coef = if has_min(L) { at(2) } else { -offset * dw };
                            for c in 0..C {
                                scale[r][c][b] = dw * *call.cols[c].d.add(g0 + b);
                                extra_tail[r][c] += coef * *call.cols[c].sx.add(g0 + b);
                            }
                        }
                    }
                }
                for b in 0..gn {
                    let blk = g0 + b;
                    for r in 0..R {
                        let w = codes::<L, V>(rows[r].add(blk * ts));
                        let aw = if signed { _mm256_abs_epi8(w) } else { w };
                        for c in 0..C {
                            let x = _mm256_loadu_si256(
                                call.cols[c].codes.add(blk * QB) as *const __m256i
                            );
                            let x = if signed { _mm256_sign_epi8(x, w) } else { x };
                            let s = if V {
                                _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, x)
                            } else {
                                _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), ones)
                            };
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
                    if affine {
                        res[r][c] += hsum256(extra[r][c]) + extra_tail[r][c];
                    }
                }
            }
            res
        }
    }
}
