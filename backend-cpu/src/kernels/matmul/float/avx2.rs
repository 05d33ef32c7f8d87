//! The float kernels for AVX2: the dot tile (its widest shapes in
//! `dot_asm_avx2`), the one-column row stream, the 16 x 6 micro-kernel and
//! its panel packing.

use std::arch::x86_64::*;

use super::dot_asm_avx2;
use super::weight_values::{DT_F16, DT_F32, scalar_w};
use crate::kernels::math::hsum256;
use crate::kernels::matmul::register_transpose::transpose8;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_w256<const DT: u8>(p: *const u8, k: usize) -> __m256 {
    // SAFETY: caller's contract (8 values at k).
    unsafe {
        match DT {
            DT_F32 => _mm256_loadu_ps((p as *const f32).add(k)),
            DT_F16 => _mm256_cvtph_ps(_mm_loadu_si128((p as *const u16).add(k) as *const __m128i)),
            _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                _mm_loadu_si128((p as *const u16).add(k) as *const __m128i),
            ))),
        }
    }
}

/// The row stream on AVX2 (see `row_stream::RowStream`): 32 values per
/// step into four accumulators, the dot summed in registers and
/// stored, then the next row. No software prefetch: the hardware
/// prefetchers follow the one sequential stream, and a fetch 8 KiB
/// ahead made F32 token generation slower (docs/performance.md).
///
/// # Safety
/// AVX2, FMA and F16C are available; `count` rows of `k` values from
/// `first`, `stride` bytes apart, the column `k` values and the output
/// `count` are readable (writable).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn row_stream_avx2<const DT: u8>(
    first: *const u8,
    stride: usize,
    count: usize,
    k: usize,
    col: *const f32,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe {
        let end32 = k / 32 * 32;
        for i in 0..count {
            let row = first.add(i * stride);
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut kk = 0;
            while kk < end32 {
                for (u, a) in acc.iter_mut().enumerate() {
                    let w = load_w256::<DT>(row, kk + 8 * u);
                    *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(col.add(kk + 8 * u)), *a);
                }
                kk += 32;
            }
            while kk + 8 <= k {
                let w = load_w256::<DT>(row, kk);
                acc[0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(col.add(kk)), acc[0]);
                kk += 8;
            }
            let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let mut dot = hsum256(sum);
            for t in kk..k {
                dot += scalar_w::<DT>(row, t) * *col.add(t);
            }
            *out.add(i) = dot;
        }
    }
}

/// `acc[r][c] += row r * column c` over values `kk..kk + 8`.
///
/// # Safety
/// AVX2, FMA and F16C are available; the rows and columns hold those
/// values.
#[inline(always)]
unsafe fn step8<const R: usize, const C: usize, const DT: u8>(
    rows: &[*const u8; R],
    cols: &[*const f32; C],
    kk: usize,
    acc: &mut [[__m256; C]; R],
) {
    // SAFETY: caller's contract.
    unsafe {
        if R <= C {
            // the rows' values in registers, then one column at a
            // time: R + 1 + R * C registers
            let w: [__m256; R] = std::array::from_fn(|r| load_w256::<DT>(rows[r], kk));
            for c in 0..C {
                let x = _mm256_loadu_ps(cols[c].add(kk));
                for r in 0..R {
                    acc[r][c] = _mm256_fmadd_ps(w[r], x, acc[r][c]);
                }
            }
        } else {
            // the columns' values in registers, then one row at a
            // time: C + 1 + R * C registers
            let x: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(cols[c].add(kk)));
            for r in 0..R {
                let w = load_w256::<DT>(rows[r], kk);
                for c in 0..C {
                    acc[r][c] = _mm256_fmadd_ps(w, x[c], acc[r][c]);
                }
            }
        }
    }
}

/// As `dot_tile_avx512`, with 8-lane vectors (lanes 8..16 of each
/// slot are zero).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_tile_avx2<const R: usize, const C: usize, const DT: u8>(
    rows: *const *const u8,
    k0: usize,
    cols: *const *const f32,
    kc: usize,
    acc_out: *mut f32,
    first: bool,
    ahead: usize,
) {
    // SAFETY: as for dot_tile_avx512.
    unsafe {
        // the pointers in registers, not reloaded on every step
        let rows: [*const u8; R] = std::array::from_fn(|r| *rows.add(r));
        let cols: [*const f32; C] = std::array::from_fn(|c| *cols.add(c));
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        if !first {
            for r in 0..R {
                for c in 0..C {
                    acc[r][c] = _mm256_loadu_ps(acc_out.add((r * C + c) * 16));
                }
            }
        }
        // one cache line of each row per outer step, fetched `ahead`
        // bytes further (see `dot::dot_range`); the steps of a line
        // unrolled, so that the accumulators stay in registers
        let bytes = if DT == DT_F32 { 4 } else { 2 };
        let line = 64 / bytes;
        let lines_end = k0 + kc / line * line;
        let end = k0 + kc / 8 * 8;
        let mut kk = k0;
        // the tiles that need all sixteen registers, in asm
        if lines_end > k0 && (R, C) == (3, 4) {
            // SAFETY: R and C are 3 and 4, so these are the same arrays.
            let acc = &mut *(acc.as_mut_ptr() as *mut [[__m256; 4]; 3]);
            let rows = &*(rows.as_ptr() as *const [*const u8; 3]);
            let cols = &*(cols.as_ptr() as *const [*const f32; 4]);
            dot_asm_avx2::lines_3x4::<DT>(rows, cols, kk, lines_end, acc);
            kk = lines_end;
        } else if lines_end > k0 && (R, C) == (4, 3) {
            // SAFETY: R and C are 4 and 3, so these are the same arrays.
            let acc = &mut *(acc.as_mut_ptr() as *mut [[__m256; 3]; 4]);
            let rows = &*(rows.as_ptr() as *const [*const u8; 4]);
            let cols = &*(cols.as_ptr() as *const [*const f32; 3]);
            dot_asm_avx2::lines_4x3::<DT>(rows, cols, kk, lines_end, acc);
            kk = lines_end;
        }
        while kk < lines_end {
            if ahead != 0 {
                for row in rows {
                    _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(kk * bytes + ahead) as *const i8);
                }
            }
            for s in 0..64 / (8 * bytes) {
                step8::<R, C, DT>(&rows, &cols, kk + 8 * s, &mut acc);
            }
            kk += line;
        }
        while kk < end {
            step8::<R, C, DT>(&rows, &cols, kk, &mut acc);
            kk += 8;
        }
        for r in 0..R {
            for c in 0..C {
                let slot = acc_out.add((r * C + c) * 16);
                _mm256_storeu_ps(slot, acc[r][c]);
                if first {
                    _mm256_storeu_ps(slot.add(8), _mm256_setzero_ps());
                }
                for t in end..k0 + kc {
                    *slot += scalar_w::<DT>(rows[r], t) * *cols[c].add(t);
                }
            }
        }
    }
}

/// The AVX2 micro-kernel: a 16 x 6 tile in 12 ymm accumulators.
///
/// # Safety
/// As for `packed::Kernel`, with MR = 16 and NR = 6.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn kernel_avx2(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *const *mut f32,
    first: bool,
) {
    const NR: usize = 6;
    // SAFETY: caller's contract.
    unsafe {
        let mut c0 = [_mm256_setzero_ps(); NR];
        let mut c1 = [_mm256_setzero_ps(); NR];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kc {
            let a0 = _mm256_loadu_ps(ap);
            let a1 = _mm256_loadu_ps(ap.add(8));
            for j in 0..NR {
                let bj = _mm256_broadcast_ss(&*bp.add(j));
                c0[j] = _mm256_fmadd_ps(a0, bj, c0[j]);
                c1[j] = _mm256_fmadd_ps(a1, bj, c1[j]);
            }
            ap = ap.add(16);
            bp = bp.add(NR);
        }
        for j in 0..NR {
            let p = *c.add(j);
            if first {
                _mm256_storeu_ps(p, c0[j]);
                _mm256_storeu_ps(p.add(8), c1[j]);
            } else {
                _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), c0[j]));
                _mm256_storeu_ps(p.add(8), _mm256_add_ps(_mm256_loadu_ps(p.add(8)), c1[j]));
            }
        }
    }
}

/// Packs 16 rows (null rows as zeros), values `k0..k0 + kc`, as a
/// `[kc][16]` f32 panel: eight rows by eight values at a time,
/// transposed in registers.
///
/// # Safety
/// AVX2, FMA and F16C are available; the non-null rows hold `k0 + kc`
/// values of type `DT`; `dst` holds `kc * 16` floats.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack_panel16_avx2<const DT: u8>(
    rows: &[*const u8; 16],
    k0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let k8 = kc / 8 * 8;
    // SAFETY: caller's contract.
    unsafe {
        for half in 0..2 {
            let mut kk = 0;
            while kk < k8 {
                let mut r = [_mm256_setzero_ps(); 8];
                for (i, v) in r.iter_mut().enumerate() {
                    let p = rows[half * 8 + i];
                    if !p.is_null() {
                        *v = load_w256::<DT>(p, k0 + kk);
                    }
                }
                transpose8(&mut r);
                for (j, v) in r.iter().enumerate() {
                    _mm256_storeu_ps(dst.as_mut_ptr().add((kk + j) * 16 + half * 8), *v);
                }
                kk += 8;
            }
            for t in k8..kc {
                for i in 0..8 {
                    let p = rows[half * 8 + i];
                    dst[t * 16 + half * 8 + i] = if p.is_null() {
                        0.0
                    } else {
                        scalar_w::<DT>(p, k0 + t)
                    };
                }
            }
        }
    }
}
