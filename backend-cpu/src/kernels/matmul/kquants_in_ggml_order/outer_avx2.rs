//! The tiled order on AVX2 as an outer product, four rows by eight
//! columns: `vpmaddubsw` multiplies one row's four codes (broadcast)
//! with four codes of each of eight columns (the activations transposed
//! once per product), and `vpmaddwd` adds each column's two pairs with
//! the row's scale of those values as the multiplier, so that a
//! super-block's integer sums build up in one register a row, column by
//! column, with no horizontal sum. The float steps per super-block are
//! the tiled order's (`r = dw * s`, `fma(-dmin, m, r)`, `fma(r, dx,
//! acc)`), eight columns at a time.
//!
//! The codes go unsigned where the pairs of `vpmaddubsw` stay in 16 bits:
//! Q3_K's with 4 added (Q6_K's are stored with 32), whose share
//! `offset * sc * (the activations' sum)` comes off with the mins'
//! arithmetic (`vpmaddwd` on the sums of each 16 values). IQ4_XS's codes
//! reach 113 from -127, too wide to go unsigned: they keep their signs,
//! which `vpsignb` moves onto the activations (`SIGNED`).

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::outer_operands::{Unpacked, transpose_columns, with_rows};
use super::x86::{has_mins, parts, signed};
use super::{Col, Cols, QK, WeightRows, block_bytes, tag};
use crate::kernels::parallel::par_ranges;
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Columns a band (and a register) holds.
const COLS: usize = 8;
/// Rows of a micro tile.
const MICRO_ROWS: usize = 4;
/// Rows unpacked at a time, while every band passes over them.
const GROUP_ROWS: usize = 16;
/// Bands' super-blocks a task of the transposition takes.
const TRANSPOSE_TASK: usize = 16;

/// One super-block of a band of eight columns, transposed.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Band {
    /// Group `g` holds values `4g..4g + 4` of each column, column after
    /// column.
    x: [[i8; 4 * COLS]; QK / 4],
    /// Pair `p` holds the sums of 16 values `2p` and `2p + 1` of each
    /// column, column after column.
    sums: [[i16; 2 * COLS]; 8],
    dx: [f32; COLS],
}

impl Default for Band {
    fn default() -> Band {
        Band {
            x: [[0; 4 * COLS]; QK / 4],
            sums: [[0; 2 * COLS]; 8],
            dx: [0.0; COLS],
        }
    }
}

thread_local! {
    static BANDS: RefCell<Vec<Band>> = const { RefCell::new(Vec::new()) };
}

/// The offset a type's codes take to be unsigned (IQ4_XS's keep their
/// signs).
const fn offset(t: u8) -> i16 {
    match t {
        tag::Q3_K => 4,
        tag::Q6_K => 32,
        _ => 0,
    }
}

/// `out[j][i] = dot(a row i, column j)`, `m` rows of type `T` (a
/// K-quant or IQ4_XS in GGUF's layout) by the Q8_K columns `cols` of
/// `nsb` super-blocks.
///
/// # Safety
/// AVX2, FMA and F16C are available; the rows hold `nsb` super-blocks of
/// type `T`; each column `nsb * 256` codes, `nsb` scales and `nsb * 16`
/// sums; each output column `m` values.
pub(super) unsafe fn gemm<const T: u8>(
    a: WeightRows,
    m: usize,
    cols: &[Col],
    nsb: usize,
    out: &Cols<f32>,
) {
    let n = cols.len();
    let nbands = n.div_ceil(COLS);
    with_scratch(&BANDS, nbands * nsb, |bands| {
        team::for_each_chunk_mut(bands, TRANSPOSE_TASK, |t, chunk| {
            for (e, band) in chunk.iter_mut().enumerate() {
                let (b, sb) = (
                    (t * TRANSPOSE_TASK + e) / nsb,
                    (t * TRANSPOSE_TASK + e) % nsb,
                );
                let live = &cols[b * COLS..(b * COLS + COLS).min(n)];
                // SAFETY: caller's contract.
                unsafe { transpose(live, sb, band) };
            }
        });
        let bands = &*bands;
        par_ranges(m.div_ceil(GROUP_ROWS), 1, |groups| {
            let rows = groups.start * GROUP_ROWS..(groups.end * GROUP_ROWS).min(m);
            with_rows(GROUP_ROWS * nsb, |unpacked| {
                for g0 in rows.clone().step_by(GROUP_ROWS) {
                    let live = GROUP_ROWS.min(rows.end - g0);
                    for (r, i) in (g0..g0 + live).enumerate() {
                        for (s, to) in unpacked[r * nsb..(r + 1) * nsb].iter_mut().enumerate() {
                            let blk = a.row(i).wrapping_add(s * block_bytes(T));
                            // SAFETY: row i holds super-block s.
                            unsafe { unpack::<T>(blk, to) };
                        }
                    }
                    for (b, band) in bands.chunks_exact(nsb).enumerate() {
                        let j0 = b * COLS;
                        let live_cols = COLS.min(n - j0);
                        for r0 in (0..live).step_by(MICRO_ROWS) {
                            let live_rows = MICRO_ROWS.min(live - r0);
                            let tile = std::array::from_fn(|r| {
                                unpacked[(r0 + r.min(live_rows - 1)) * nsb..].as_ptr()
                            });
                            // SAFETY: the tile's rows hold nsb unpacked
                            // super-blocks, the band nsb.
                            let dots = unsafe { micro::<T>(tile, band.as_ptr(), nsb) };
                            for (r, row) in dots.iter().enumerate().take(live_rows) {
                                for (c, &v) in row.iter().enumerate().take(live_cols) {
                                    // SAFETY: output column j0 + c holds m
                                    // values; this task owns row g0 + r0 + r.
                                    unsafe { *out.0[j0 + c].add(g0 + r0 + r) = v };
                                }
                            }
                        }
                    }
                }
            })
        });
    })
}

/// Super-block `sb` of up to eight columns as a band (missing columns
/// zero).
///
/// # Safety
/// Each column holds super-block `sb`.
unsafe fn transpose(cols: &[Col], sb: usize, out: &mut Band) {
    if cols.len() < COLS {
        *out = Band::default();
    }
    let (x, sums) = (out.x.as_flattened_mut(), out.sums.as_flattened_mut());
    // SAFETY: caller's contract.
    unsafe { transpose_columns(cols, sb, COLS, x, sums, &mut out.dx) };
}

/// # Safety
/// AVX2 and F16C are available; `blk` holds a super-block of type `T`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack<const T: u8>(blk: *const u8, to: &mut Unpacked) {
    // SAFETY: caller's contract; every write is inside `to`.
    unsafe {
        let p = parts::<T>(blk);
        let b = _mm256_set1_epi8(if signed(T) { offset(T) as i8 } else { 0 });
        for (g, &u) in p.u.iter().enumerate() {
            let codes = _mm256_add_epi8(u, b);
            _mm256_storeu_si256(to.codes.as_mut_ptr().add(32 * g) as *mut __m256i, codes);
        }
        let words = to.scales.as_mut_ptr() as *mut __m256i;
        _mm256_storeu_si256(words, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(p.sc)));
        let high = _mm256_extracti128_si256::<1>(p.sc);
        _mm256_storeu_si256(words.add(1), _mm256_cvtepi16_epi32(high));
        let corr = if has_mins(T) {
            p.mins
        } else {
            _mm256_mullo_epi16(p.sc, _mm256_set1_epi16(offset(T)))
        };
        _mm256_storeu_si256(to.corr.as_mut_ptr() as *mut __m256i, corr);
        (to.d, to.dmin) = (p.d, p.dmin);
    }
}

/// Four rows (`tile`, each at its first super-block) by a band's eight
/// columns over `nb` super-blocks: each row's eight dots.
///
/// # Safety
/// AVX2, FMA and F16C are available; every row holds `nb` unpacked
/// super-blocks, `band` `nb` super-blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn micro<const T: u8>(
    tile: [*const Unpacked; MICRO_ROWS],
    band: *const Band,
    nb: usize,
) -> [[f32; COLS]; MICRO_ROWS] {
    // SAFETY: caller's contract; every read is inside super-block sb.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); MICRO_ROWS];
        for sb in 0..nb {
            let x = &*band.add(sb);
            let w: [&Unpacked; MICRO_ROWS] = std::array::from_fn(|r| &*tile[r].add(sb));
            let mut s = [_mm256_setzero_si256(); MICRO_ROWS];
            for sub in 0..16 {
                let sc: [__m256i; MICRO_ROWS] =
                    std::array::from_fn(|r| _mm256_set1_epi16(w[r].scales[sub] as i16));
                for g in 4 * sub..4 * sub + 4 {
                    let xg = _mm256_load_si256(x.x[g].as_ptr() as *const __m256i);
                    for r in 0..MICRO_ROWS {
                        let code = (w[r].codes.as_ptr().add(4 * g) as *const i32).read_unaligned();
                        let wr = _mm256_set1_epi32(code);
                        let pairs = if signed(T) && offset(T) == 0 {
                            _mm256_maddubs_epi16(_mm256_sign_epi8(wr, wr), _mm256_sign_epi8(xg, wr))
                        } else {
                            _mm256_maddubs_epi16(wr, xg)
                        };
                        s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(pairs, sc[r]));
                    }
                }
            }
            let dx = _mm256_load_ps(x.dx.as_ptr());
            for r in 0..MICRO_ROWS {
                let mut c = _mm256_setzero_si256();
                for p in 0..8 {
                    let k = (w[r].corr.as_ptr().add(2 * p) as *const i32).read_unaligned();
                    let sums = _mm256_load_si256(x.sums[p].as_ptr() as *const __m256i);
                    c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_set1_epi32(k), sums));
                }
                let d = _mm256_set1_ps(w[r].d);
                let rr = if has_mins(T) {
                    let rr = _mm256_mul_ps(d, _mm256_cvtepi32_ps(s[r]));
                    _mm256_fmadd_ps(_mm256_set1_ps(-w[r].dmin), _mm256_cvtepi32_ps(c), rr)
                } else {
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(s[r], c)))
                };
                acc[r] = _mm256_fmadd_ps(rr, dx, acc[r]);
            }
        }
        let mut dots = [[0f32; COLS]; MICRO_ROWS];
        for (row, a) in dots.iter_mut().zip(acc) {
            _mm256_storeu_ps(row.as_mut_ptr(), a);
        }
        dots
    }
}
