//! The kernels of the direct and panel paths for AVX-512 VNNI
//! (`vpdpbusd`), and the packing of the panel path.

use std::arch::x86_64::*;

use super::operands::{ColsQ, Decoded, PANEL_C, PANEL_R};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved, q4_k_scales};
use crate::kernels::math::hsum256;
use crate::kernels::matmul::quant_format::{Format, IQ4_CODES};
use crate::kernels::matmul::register_transpose::transpose16;

/// Direct kernel for 32-value blocks: one 256-bit `vpdpbusd` per
/// block, row and column.
///
/// # Safety
/// As for `direct::DirectFn`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn direct_vnni32<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut macc = [[0f32; C]; R];
        for blk in 0..nb {
            let mut xs = [_mm256_setzero_si256(); C];
            let mut init = [_mm256_setzero_si256(); C];
            let mut dx = [0f32; C];
            for c in 0..C {
                xs[c] = _mm256_loadu_si256(x.codes[c].add(blk * 32) as *const __m256i);
                init[c] = _mm256_set1_epi32(*x.bias[c].add(blk));
                dx[c] = *x.d[c].add(blk);
            }
            for r in 0..R {
                let u = _mm256_loadu_si256(w.codes.add(r * w.stride + blk * 32) as *const __m256i);
                let dw = *w.dw.add(r * w.sstride + blk);
                for c in 0..C {
                    let p = _mm256_dpbusd_epi32(init[c], u, xs[c]);
                    let s = _mm256_set1_ps(dw * dx[c]);
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[r][c]);
                }
                if f.has_min {
                    let mw = *w.mw.add(r * w.sstride + blk);
                    for c in 0..C {
                        macc[r][c] += mw * *x.sx[c].add(blk);
                    }
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                *out.add(r * C + c) += hsum256(acc[r][c]) - macc[r][c];
            }
        }
    }
}

/// Direct kernel for 16-value blocks (Q6_K), with 128-bit dots.
///
/// # Safety
/// As for `direct::DirectFn`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn direct_vnni16<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe {
        let mut acc = [[_mm_setzero_ps(); C]; R];
        let mut macc = [[0f32; C]; R];
        for blk in 0..nb {
            let mut xs = [_mm_setzero_si128(); C];
            let mut init = [_mm_setzero_si128(); C];
            let mut dx = [0f32; C];
            for c in 0..C {
                xs[c] = _mm_loadu_si128(x.codes[c].add(blk * 16) as *const __m128i);
                init[c] = _mm_set1_epi32(*x.bias[c].add(blk));
                dx[c] = *x.d[c].add(blk);
            }
            for r in 0..R {
                let u = _mm_loadu_si128(w.codes.add(r * w.stride + blk * 16) as *const __m128i);
                let dw = *w.dw.add(r * w.sstride + blk);
                for c in 0..C {
                    let p = _mm_dpbusd_epi32(init[c], u, xs[c]);
                    let s = _mm_set1_ps(dw * dx[c]);
                    acc[r][c] = _mm_fmadd_ps(_mm_cvtepi32_ps(p), s, acc[r][c]);
                }
                if f.has_min {
                    let mw = *w.mw.add(r * w.sstride + blk);
                    for c in 0..C {
                        macc[r][c] += mw * *x.sx[c].add(blk);
                    }
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let v = acc[r][c];
                let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
                let s = _mm_add_ss(s, _mm_movehdup_ps(s));
                *out.add(r * C + c) += _mm_cvtss_f32(s) - macc[r][c];
            }
        }
    }
}

/// The panel kernel: 32 interleaved rows times PANEL_C columns over
/// `nb` blocks, added block by block to `tile[c][r]`.
///
/// # Safety
/// The panel holds `nb` blocks of 32 rows; the activation tile `nb`
/// blocks of PANEL_C columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub(super) unsafe fn panel_vnni(
    f: &Format,
    nb: usize,
    codes: *const u8,
    dw: *const f32,
    mw: *const f32,
    xcodes: *const i8,
    xd: *const f32,
    xbias: *const i32,
    xsx: *const f32,
    tile: &mut [[f32; PANEL_R]; PANEL_C],
) {
    const C: usize = PANEL_C;
    let steps = f.qb / 4;
    // SAFETY: caller's contract.
    unsafe {
        let mut fa0: [__m512; C] = std::array::from_fn(|c| _mm512_loadu_ps(tile[c].as_ptr()));
        let mut fa1: [__m512; C] =
            std::array::from_fn(|c| _mm512_loadu_ps(tile[c].as_ptr().add(16)));
        let mut wp = codes;
        let mut xp = xcodes as *const i32;
        for blk in 0..nb {
            let mut ia0 = [_mm512_setzero_si512(); C];
            let mut ia1 = [_mm512_setzero_si512(); C];
            for c in 0..C {
                let b = _mm512_set1_epi32(*xbias.add(blk * C + c));
                ia0[c] = b;
                ia1[c] = b;
            }
            for _ in 0..steps {
                let w0 = _mm512_loadu_si512(wp as *const __m512i);
                let w1 = _mm512_loadu_si512(wp.add(64) as *const __m512i);
                for c in 0..C {
                    let xb = _mm512_set1_epi32(*xp.add(c));
                    ia0[c] = _mm512_dpbusd_epi32(ia0[c], w0, xb);
                    ia1[c] = _mm512_dpbusd_epi32(ia1[c], w1, xb);
                }
                wp = wp.add(128);
                xp = xp.add(C);
            }
            let d0 = _mm512_loadu_ps(dw.add(blk * PANEL_R));
            let d1 = _mm512_loadu_ps(dw.add(blk * PANEL_R + 16));
            for c in 0..C {
                let dx = _mm512_set1_ps(*xd.add(blk * C + c));
                fa0[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia0[c]), _mm512_mul_ps(d0, dx), fa0[c]);
                fa1[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia1[c]), _mm512_mul_ps(d1, dx), fa1[c]);
            }
            if f.has_min {
                let m0 = _mm512_loadu_ps(mw.add(blk * PANEL_R));
                let m1 = _mm512_loadu_ps(mw.add(blk * PANEL_R + 16));
                for c in 0..C {
                    let sx = _mm512_set1_ps(*xsx.add(blk * C + c));
                    fa0[c] = _mm512_fnmadd_ps(m0, sx, fa0[c]);
                    fa1[c] = _mm512_fnmadd_ps(m1, sx, fa1[c]);
                }
            }
        }
        for c in 0..C {
            _mm512_storeu_ps(tile[c].as_mut_ptr(), fa0[c]);
            _mm512_storeu_ps(tile[c].as_mut_ptr().add(16), fa1[c]);
        }
    }
}

/// Widens the f16 scales (first two bytes) of `nb` blocks of `ts`
/// bytes into `out`, 16 at a time with a gather (narrow stores and a
/// wide reload would stall on store forwarding).
///
/// # Safety
/// `row` must hold that many blocks (of at least 4 bytes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn block_scales(row: *const u8, ts: usize, nb: usize, out: &mut [f32]) {
    let mut b = 0;
    // SAFETY: caller's contract; each gathered dword lies in its block.
    unsafe {
        let idx = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(ts as i32),
        );
        while b + 16 <= nb {
            let g = _mm512_i32gather_epi32::<1>(idx, row.add(b * ts) as *const i32);
            let wide = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
            _mm512_storeu_ps(out.as_mut_ptr().add(b), wide);
            b += 16;
        }
        while b < nb {
            out[b] =
                ggraph_core::quant::f16_to_f32((row.add(b * ts) as *const u16).read_unaligned());
            b += 1;
        }
    }
}

/// Codes of blocks `blk` and `blk + 1` of a Q8_0 (`Q4 = false`) or Q4_0
/// row as one zmm of unsigned bytes, block `blk` in the low half.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn pair_codes<const Q4: bool>(row: *const u8, blk: usize) -> __m512i {
    // SAFETY: caller's contract (both blocks exist).
    unsafe {
        if Q4 {
            let p = row.add(blk * 18 + 2);
            let lo = _mm_loadu_si128(p as *const __m128i);
            let hi = _mm_loadu_si128(p.add(18) as *const __m128i);
            let t = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi);
            let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(t), _mm256_srli_epi16::<4>(t));
            let z = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
            // [n0, n1, n0 >> 4, n1 >> 4] -> [n0, n0 >> 4, n1, n1 >> 4]
            _mm512_shuffle_i64x2::<0xd8>(z, z)
        } else {
            let p = row.add(blk * 34 + 2);
            let lo = _mm256_loadu_si256(p as *const __m256i);
            let hi = _mm256_loadu_si256(p.add(34) as *const __m256i);
            let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
            _mm512_xor_si512(z, _mm512_set1_epi8(-128))
        }
    }
}

/// Codes of one block as a ymm of unsigned bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn one_codes<const Q4: bool>(row: *const u8, blk: usize) -> __m256i {
    // SAFETY: caller's contract (the block exists).
    unsafe {
        if Q4 {
            let t = _mm_loadu_si128(row.add(blk * 18 + 2) as *const __m128i);
            let z = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(t), _mm_srli_epi16::<4>(t));
            _mm256_and_si256(z, _mm256_set1_epi8(0x0f))
        } else {
            let z = _mm256_loadu_si256(row.add(blk * 34 + 2) as *const __m256i);
            _mm256_xor_si256(z, _mm256_set1_epi8(-128))
        }
    }
}

/// Interleaves `nb` blocks (from block `blk0`) of 32 Q8_0 or Q4_0 rows
/// into a panel: codes `[step][32 rows][4]`, scales `[block][32 rows]`.
/// Null rows (past the end of the matrix) get zero codes and scales.
///
/// # Safety
/// Non-null rows hold blocks `blk0..blk0 + nb`; `codes` has room for
/// `nb * 32 * 32` bytes and `dw` for `nb * 32` floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn repack_panel(
    q4: bool,
    rows: &[*const u8; PANEL_R],
    blk0: usize,
    nb: usize,
    codes: *mut u8,
    dw: *mut f32,
) {
    let ts = if q4 { 18 } else { 34 };
    // SAFETY: caller's contract.
    unsafe {
        for half in 0..2 {
            let mut b = 0;
            while b < nb {
                let two = b + 2 <= nb;
                let mut r = [_mm512_setzero_ps(); 16];
                for (i, v) in r.iter_mut().enumerate() {
                    let p = rows[half * 16 + i];
                    if p.is_null() {
                        continue;
                    }
                    let z = match (q4, two) {
                        (true, true) => pair_codes::<true>(p, blk0 + b),
                        (false, true) => pair_codes::<false>(p, blk0 + b),
                        (true, false) => _mm512_zextsi256_si512(one_codes::<true>(p, blk0 + b)),
                        (false, false) => _mm512_zextsi256_si512(one_codes::<false>(p, blk0 + b)),
                    };
                    *v = _mm512_castsi512_ps(z);
                }
                // r[i] holds 16 dwords of row i; afterwards r[j] holds
                // dword j of the 16 rows: one panel step
                transpose16(&mut r);
                let steps = if two { 16 } else { 8 };
                for (j, v) in r.iter().enumerate().take(steps) {
                    _mm512_storeu_ps(
                        codes.add(((b * 8 + j) * PANEL_R + half * 16) * 4) as *mut f32,
                        *v,
                    );
                }
                b += if two { 2 } else { 1 };
            }
        }
        let mut tmp = [0f32; 64];
        for (r, p) in rows.iter().enumerate() {
            let mut b = 0;
            while b < nb {
                let len = 64.min(nb - b);
                if p.is_null() {
                    tmp[..len].fill(0.0);
                } else {
                    block_scales(p.add((blk0 + b) * ts), ts, len, &mut tmp[..len]);
                }
                for t in 0..len {
                    *dw.add((b + t) * PANEL_R + r) = tmp[t];
                }
                b += len;
            }
        }
    }
}

/// As [`repack_panel`], from a matrix in the CPU's interleaved layout:
/// `groups[g]` is block `blk0` of the panel's group `g` (rows `8g..8g +
/// 8`), null past the matrix, and `nb` counts the panel's blocks of 32
/// values. A group's chunk already holds four codes of each of its eight
/// rows: one step of the panel for Q8_0, two (low and high nibbles) for
/// the others. IQ4_NL's codes are its table's values plus 128, as
/// `quant_format` decodes them; Q4_K's sub-block scales and mins go to
/// `dw` and `mw`, a super-block's low nibbles to its even sub-blocks and
/// its high nibbles to the odd ones.
///
/// # Safety
/// Non-null groups hold the `nb` blocks from theirs (`nb` a multiple of
/// eight for Q4_K); `codes` has room for `nb * 32 * 32` bytes, `dw` and
/// `mw` for `nb * 32` floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn interleaved_panel(
    layout: Interleaved,
    groups: &[*const u8; PANEL_R / GROUP_ROWS],
    nb: usize,
    codes: *mut u8,
    dw: *mut f32,
    mw: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe {
        let low = _mm256_set1_epi8(0x0f);
        let table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_CODES.as_ptr() as *const __m128i));
        let step = |b: usize, j: usize, g: usize| {
            codes.add(((b * 8 + j) * PANEL_R + g * GROUP_ROWS) * 4) as *mut __m256i
        };
        let rows_of = |v: *mut f32, b: usize, g: usize| v.add(b * PANEL_R + g * GROUP_ROWS);
        for (g, &p) in groups.iter().enumerate() {
            if p.is_null() {
                for b in 0..nb {
                    _mm256_storeu_ps(rows_of(dw, b, g), _mm256_setzero_ps());
                    _mm256_storeu_ps(rows_of(mw, b, g), _mm256_setzero_ps());
                    for j in 0..8 {
                        _mm256_storeu_si256(step(b, j, g), _mm256_setzero_si256());
                    }
                }
                continue;
            }
            if layout == Interleaved::Q4_K {
                let code_chunks = layout.chunks_at() + 3 * 32;
                for sb in 0..nb / 8 {
                    let block = p.add(sb * layout.group_block_bytes());
                    let (mut d, mut m) = ([[0f32; GROUP_ROWS]; 8], [[0f32; GROUP_ROWS]; 8]);
                    q4_k_scales(block, &mut d, &mut m);
                    for sub in 0..8 {
                        _mm256_storeu_ps(
                            rows_of(dw, sb * 8 + sub, g),
                            _mm256_loadu_ps(d[sub].as_ptr()),
                        );
                        _mm256_storeu_ps(
                            rows_of(mw, sb * 8 + sub, g),
                            _mm256_loadu_ps(m[sub].as_ptr()),
                        );
                    }
                    for c in 0..32 {
                        let v =
                            _mm256_loadu_si256(block.add(code_chunks + 32 * c) as *const __m256i);
                        let sub = sb * 8 + 2 * (c / 8);
                        _mm256_storeu_si256(step(sub, c % 8, g), _mm256_and_si256(v, low));
                        _mm256_storeu_si256(
                            step(sub + 1, c % 8, g),
                            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                        );
                    }
                }
                continue;
            }
            for b in 0..nb {
                let block = p.add(b * layout.group_block_bytes());
                _mm256_storeu_ps(
                    rows_of(dw, b, g),
                    _mm256_cvtph_ps(_mm_loadu_si128(block as *const __m128i)),
                );
                let chunk = |j: usize| _mm256_loadu_si256(block.add(16 + 32 * j) as *const __m256i);
                for j in 0..4 {
                    let v = chunk(j);
                    let mut lo = _mm256_and_si256(v, low);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                    if layout == Interleaved::IQ4_NL {
                        lo = _mm256_shuffle_epi8(table, lo);
                        hi = _mm256_shuffle_epi8(table, hi);
                    }
                    _mm256_storeu_si256(step(b, j, g), lo);
                    _mm256_storeu_si256(step(b, 4 + j, g), hi);
                }
            }
        }
    }
}

/// Interleaves 16 decoded rows (`len` codes each, `len` a multiple of 4,
/// rows `len` bytes apart) into rows `16 * half ..` of a panel: 64 codes
/// a row at a time with a 16 x 16 dword transpose, the rest (rows of
/// 32-value blocks an odd number of blocks long) four codes at a time.
///
/// # Safety
/// `rows` holds 16 * len bytes; `panel` len / 4 steps of 32 rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
pub(super) unsafe fn interleave16(rows: *const u8, len: usize, panel: *mut u8, half: usize) {
    // SAFETY: caller's contract.
    unsafe {
        for step in len / 64 * 16..len / 4 {
            for i in 0..16 {
                let dst = panel.add((step * PANEL_R + half * 16 + i) * 4);
                std::ptr::copy_nonoverlapping(rows.add(i * len + step * 4), dst, 4);
            }
        }
        for seg in 0..len / 64 {
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, v) in r.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(rows.add(i * len + seg * 64) as *const f32);
            }
            transpose16(&mut r);
            for (j, v) in r.iter().enumerate() {
                let step = seg * 16 + j;
                _mm512_storeu_ps(panel.add((step * PANEL_R + half * 16) * 4) as *mut f32, *v);
            }
        }
    }
}
