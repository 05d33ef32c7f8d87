//! The tiled order on AVX-512 VNNI as an outer product, sixteen rows by
//! sixteen columns: a super-block's integer sums come from `vpdpbusd` on
//! one row's four codes (broadcast) against four codes of each of sixteen
//! columns (the activations transposed once per product), so that each
//! instruction adds 64 products to sixteen dots; each 16 values' sum is
//! then scaled by `vpmulld`. The float steps per super-block are the
//! tiled order's (`r = dw * s`, `fma(-dmin, m, r)`, `fma(r, dx, acc)`),
//! sixteen columns at a time.
//!
//! The codes go unsigned: Q3_K's and IQ4_XS's with an offset `B` added
//! (Q6_K's are stored so, `B` being 32), whose share `B * sc * (the
//! activations' sum)` comes off with the mins' arithmetic (`vpdpwssd` on
//! the sums of each 16 values).

use std::arch::x86_64::*;

use super::outer_operands::{BAND_COLS, Band, Unpacked, with_bands, with_rows};
use super::x86::{has_mins, parts, signed};
use super::{Col, Cols, QK, WeightRows, block_bytes, tag};
use crate::kernels::matmul::register_transpose::{transpose8, transpose16};
use crate::kernels::parallel::par_ranges;

/// Rows and columns of a micro tile: a band's columns.
const MICRO: usize = BAND_COLS;

/// Values a scale covers in the type (Q4_K's, Q5_K's and IQ4_XS's cover
/// 32, the others' 16): the sums a `vpmulld` scales.
const fn scaled(t: u8) -> usize {
    match t {
        tag::Q4_K | tag::Q5_K | tag::IQ4_XS => 32,
        _ => 16,
    }
}

/// The offset a type's codes take to be unsigned.
const fn offset(t: u8) -> i16 {
    match t {
        tag::Q3_K => 4,
        tag::Q6_K => 32,
        tag::IQ4_XS => 128,
        _ => 0,
    }
}

/// `out[j][i] = dot(a row i, column j)`, `m` rows of type `T` (a
/// K-quant or IQ4_XS in GGUF's layout) by the Q8_K columns `cols` of
/// `nsb` super-blocks.
///
/// # Safety
/// AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C are available; the rows
/// hold `nsb` super-blocks of type `T`; each column `nsb * 256` codes,
/// `nsb` scales and `nsb * 16` sums; each output column `m` values.
pub(super) unsafe fn gemm<const T: u8>(
    a: WeightRows,
    m: usize,
    cols: &[Col],
    nsb: usize,
    out: &Cols<f32>,
) {
    let n = cols.len();
    let product = |bands: &[Band]| {
        par_ranges(m.div_ceil(MICRO), 1, |groups| {
            let rows = groups.start * MICRO..(groups.end * MICRO).min(m);
            // sixteen rows' whole rows at a time, unpacked once, while every
            // band passes over them (chunks of 64 rows by eight
            // super-blocks, their dots stored and reloaded from chunk to
            // chunk, were up to a sixth slower, docs/performance.md)
            with_rows(MICRO * nsb, |unpacked| {
                for g0 in rows.clone().step_by(MICRO) {
                    let live = MICRO.min(rows.end - g0);
                    for (r, i) in (g0..g0 + live).enumerate() {
                        for (s, to) in unpacked[r * nsb..(r + 1) * nsb].iter_mut().enumerate() {
                            let blk = a.row(i).wrapping_add(s * block_bytes(T));
                            // SAFETY: row i holds super-block s.
                            unsafe { unpack::<T>(blk, to) };
                        }
                    }
                    let tile: [*const Unpacked; MICRO] =
                        std::array::from_fn(|r| unpacked[r.min(live - 1) * nsb..].as_ptr());
                    for (b, band) in bands.chunks_exact(nsb).enumerate() {
                        let j0 = b * MICRO;
                        let live_cols = MICRO.min(n - j0);
                        // column by column, as the outputs lie
                        let mut acc = [[0f32; MICRO]; MICRO];
                        // SAFETY: the tile's rows hold nsb unpacked
                        // super-blocks, the band nsb.
                        unsafe {
                            if live_cols <= 8 {
                                micro::<T, Ymm>(tile, band.as_ptr(), nsb, &mut acc)
                            } else {
                                micro::<T, Zmm>(tile, band.as_ptr(), nsb, &mut acc)
                            }
                        }
                        for (c, col) in acc.iter().enumerate().take(live_cols) {
                            // SAFETY: output column j0 + c holds m values;
                            // this task owns rows g0..g0 + live.
                            let to = unsafe { out.0[j0 + c].add(g0) };
                            // SAFETY: as above.
                            unsafe { std::slice::from_raw_parts_mut(to, live) }
                                .copy_from_slice(&col[..live]);
                        }
                    }
                }
            })
        });
    };
    // SAFETY: caller's contract.
    unsafe { with_bands(cols, nsb, product) }
}

/// # Safety
/// AVX-512 F, BW and VL, AVX2 and F16C are available; `blk` holds a
/// super-block of type `T`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn unpack<const T: u8>(blk: *const u8, to: &mut Unpacked) {
    // SAFETY: caller's contract; every write is inside `to`.
    unsafe {
        let p = parts::<T>(blk);
        // Q6_K's codes come unsigned already
        let b = _mm256_set1_epi8(if signed(T) { offset(T) as i8 } else { 0 });
        for (g, &u) in p.u.iter().enumerate() {
            let codes = _mm256_add_epi8(u, b);
            _mm256_storeu_si256(to.codes.as_mut_ptr().add(32 * g) as *mut __m256i, codes);
        }
        _mm512_storeu_si512(
            to.scales.as_mut_ptr() as *mut __m512i,
            _mm512_cvtepi16_epi32(p.sc),
        );
        let corr = if has_mins(T) {
            p.mins
        } else {
            _mm256_mullo_epi16(p.sc, _mm256_set1_epi16(offset(T)))
        };
        _mm256_storeu_si256(to.corr.as_mut_ptr() as *mut __m256i, corr);
        (to.d, to.dmin) = (p.d, p.dmin);
    }
}

/// One register's columns of the micro tile: sixteen in 512 bits, or the
/// band's first eight in 256 (where no more are live, at the same
/// `vpdpbusd` rate: 256-bit ones issue on two ports).
trait Width {
    type I: Copy;
    type F: Copy;
    unsafe fn zero() -> Self::I;
    unsafe fn splat(v: i32) -> Self::I;
    /// From 64-byte aligned `p`.
    unsafe fn load(p: *const u8) -> Self::I;
    unsafe fn dpbusd(acc: Self::I, a: Self::I, b: Self::I) -> Self::I;
    unsafe fn dpwssd(acc: Self::I, a: Self::I, b: Self::I) -> Self::I;
    unsafe fn add(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn sub(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn mullo(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn float(a: Self::I) -> Self::F;
    unsafe fn splat_f(v: f32) -> Self::F;
    unsafe fn load_f(p: *const f32) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// The sixteen rows of `acc`, which holds a tile column by column
    /// (the register's columns of it).
    unsafe fn rows(acc: &[[f32; MICRO]; MICRO]) -> [Self::F; MICRO];
    /// `rows` into `acc` column by column.
    unsafe fn store_rows(rows: [Self::F; MICRO], acc: &mut [[f32; MICRO]; MICRO]);
}

/// Sixteen columns a register.
struct Zmm;
/// Eight columns a register.
struct Ymm;

// SAFETY (every method): the caller's AVX-512 F, BW, VL and VNNI, AVX2
// and FMA; pointers as the trait says.
impl Width for Zmm {
    type I = __m512i;
    type F = __m512;
    #[inline(always)]
    unsafe fn zero() -> __m512i {
        unsafe { _mm512_setzero_si512() }
    }
    #[inline(always)]
    unsafe fn splat(v: i32) -> __m512i {
        unsafe { _mm512_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        unsafe { _mm512_load_si512(p as *const __m512i) }
    }
    #[inline(always)]
    unsafe fn dpbusd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_dpbusd_epi32(acc, a, b) }
    }
    #[inline(always)]
    unsafe fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_dpwssd_epi32(acc, a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn mullo(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_mullo_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn float(a: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    unsafe fn splat_f(v: f32) -> __m512 {
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn rows(acc: &[[f32; MICRO]; MICRO]) -> [__m512; MICRO] {
        let mut r = [unsafe { _mm512_setzero_ps() }; MICRO];
        for (r, col) in r.iter_mut().zip(acc) {
            *r = unsafe { _mm512_loadu_ps(col.as_ptr()) };
        }
        unsafe { transpose16(&mut r) };
        r
    }
    #[inline(always)]
    unsafe fn store_rows(mut rows: [__m512; MICRO], acc: &mut [[f32; MICRO]; MICRO]) {
        unsafe { transpose16(&mut rows) };
        for (col, r) in acc.iter_mut().zip(rows) {
            unsafe { _mm512_storeu_ps(col.as_mut_ptr(), r) };
        }
    }
}

impl Width for Ymm {
    type I = __m256i;
    type F = __m256;
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn splat(v: i32) -> __m256i {
        unsafe { _mm256_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        unsafe { _mm256_load_si256(p as *const __m256i) }
    }
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_epi32(acc, a, b) }
    }
    #[inline(always)]
    unsafe fn dpwssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_dpwssd_epi32(acc, a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn mullo(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_mullo_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn float(a: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    unsafe fn splat_f(v: f32) -> __m256 {
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    /// Eight columns: rows 0..8 and 8..16 as two 8 x 8 blocks.
    #[inline(always)]
    unsafe fn rows(acc: &[[f32; MICRO]; MICRO]) -> [__m256; MICRO] {
        let zero = unsafe { _mm256_setzero_ps() };
        let (mut lo, mut hi) = ([zero; 8], [zero; 8]);
        for c in 0..8 {
            lo[c] = unsafe { _mm256_loadu_ps(acc[c].as_ptr()) };
            hi[c] = unsafe { _mm256_loadu_ps(acc[c].as_ptr().add(8)) };
        }
        unsafe { (transpose8(&mut lo), transpose8(&mut hi)) };
        let mut r = [zero; MICRO];
        r[..8].copy_from_slice(&lo);
        r[8..].copy_from_slice(&hi);
        r
    }
    #[inline(always)]
    unsafe fn store_rows(rows: [__m256; MICRO], acc: &mut [[f32; MICRO]; MICRO]) {
        let zero = unsafe { _mm256_setzero_ps() };
        let (mut lo, mut hi) = ([zero; 8], [zero; 8]);
        lo.copy_from_slice(&rows[..8]);
        hi.copy_from_slice(&rows[8..]);
        unsafe { (transpose8(&mut lo), transpose8(&mut hi)) };
        for c in 0..8 {
            unsafe { _mm256_storeu_ps(acc[c].as_mut_ptr(), lo[c]) };
            unsafe { _mm256_storeu_ps(acc[c].as_mut_ptr().add(8), hi[c]) };
        }
    }
}

/// Sixteen rows (`tile`, each at its first super-block) by a band's
/// columns (all sixteen with [`Zmm`], the first eight with [`Ymm`]) over
/// `nb` super-blocks, going on from `acc` (column by column).
///
/// # Safety
/// AVX-512 F, BW, VL and VNNI, AVX2 and FMA are available; every row holds
/// `nb` unpacked super-blocks, `band` `nb` super-blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn micro<const T: u8, V: Width>(
    tile: [*const Unpacked; MICRO],
    band: *const Band,
    nb: usize,
    acc: &mut [[f32; MICRO]; MICRO],
) {
    // SAFETY: caller's contract; every read is inside super-block sb.
    unsafe {
        let mut sum = V::rows(acc);
        for sb in 0..nb {
            let x = &*band.add(sb);
            let dx = V::load_f(x.dx.as_ptr());
            for (r, sum) in sum.iter_mut().enumerate() {
                let w = &*tile[r].add(sb);
                let code = |g: usize| {
                    V::splat((w.codes.as_ptr().add(4 * g) as *const i32).read_unaligned())
                };
                let mut s = V::zero();
                let (per, groups) = (scaled(T) / 16, scaled(T) / 4);
                for sub in 0..QK / scaled(T) {
                    let mut t = V::zero();
                    for g in groups * sub..groups * (sub + 1) {
                        t = V::dpbusd(t, code(g), V::load(x.x[g].as_ptr() as *const u8));
                    }
                    s = V::add(s, V::mullo(t, V::splat(w.scales[per * sub])));
                }
                let mut c = V::zero();
                for p in 0..8 {
                    let k = (w.corr.as_ptr().add(2 * p) as *const i32).read_unaligned();
                    c = V::dpwssd(c, V::splat(k), V::load(x.sums[p].as_ptr() as *const u8));
                }
                let d = V::splat_f(w.d);
                let r = if has_mins(T) {
                    let r = V::mul(d, V::float(s));
                    V::fmadd(V::splat_f(-w.dmin), V::float(c), r)
                } else {
                    V::mul(d, V::float(V::sub(s, c)))
                };
                *sum = V::fmadd(r, dx, *sum);
            }
        }
        V::store_rows(sum, acc);
    }
}
