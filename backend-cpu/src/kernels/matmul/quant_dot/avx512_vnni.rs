//! The kernels of the direct and panel paths for AVX-512 VNNI
//! (`vpdpbusd`), and the packing of the panel path.

use std::arch::x86_64::*;

use super::operands::{PANEL_C, PANEL_R};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved, block_scales, q4_k_scales};
use crate::kernels::matmul::quant_format::{Format, IQ4_CODES, MXFP4_CODES};

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

/// As [`repack_panel`], from a matrix in the CPU's interleaved layout:
/// `groups[g]` is block `blk0` of the panel's group `g` (rows `8g..8g +
/// 8`), null past the matrix, and `nb` counts the panel's blocks of 32
/// values. A group's chunk already holds four codes of each of its eight
/// rows: one step of the panel for Q8_0, two (low and high nibbles) for
/// the others. IQ4_NL's and MXFP4's codes are their tables' values plus
/// 128, as `quant_format` decodes them; Q4_K's sub-block scales and mins go to
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
        let codes_of = if layout == Interleaved::MXFP4 {
            &MXFP4_CODES
        } else {
            &IQ4_CODES
        };
        let table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(codes_of.as_ptr() as *const __m128i));
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
            let at = layout.chunks_at();
            for b in 0..nb {
                let block = p.add(b * layout.group_block_bytes());
                _mm256_storeu_ps(rows_of(dw, b, g), block_scales(layout, block));
                let chunk = |j: usize| _mm256_loadu_si256(block.add(at + 32 * j) as *const __m256i);
                for j in 0..4 {
                    let v = chunk(j);
                    let mut lo = _mm256_and_si256(v, low);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                    if layout.code_table().is_some() {
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
