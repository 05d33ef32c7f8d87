//! The float kernels for AVX-512: the dot tile, the one-column row
//! stream, the 32 x 12 micro-kernel and its panel packing.

use std::arch::x86_64::*;

use super::weight_values::{DT_F16, DT_F32, scalar_w};
use crate::kernels::matmul::register_transpose::transpose16;
use crate::kernels::matmul::row_streaming::rows_ahead;

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn load_w512<const DT: u8>(p: *const u8, k: usize) -> __m512 {
    // SAFETY: caller's contract (16 values at k).
    unsafe {
        match DT {
            DT_F32 => _mm512_loadu_ps((p as *const f32).add(k)),
            DT_F16 => _mm512_cvtph_ps(_mm256_loadu_si256(
                (p as *const u16).add(k) as *const __m256i
            )),
            _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                _mm256_loadu_si256((p as *const u16).add(k) as *const __m256i),
            ))),
        }
    }
}

/// The AVX-512 dot tile (see `dot::DotTile`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn dot_tile_avx512<const R: usize, const C: usize, const DT: u8>(
    rows: *const *const u8,
    k0: usize,
    cols: *const *const f32,
    kc: usize,
    acc_out: *mut f32,
    first: bool,
    ahead: usize,
) {
    // SAFETY: rows and columns hold k0 + kc values each; acc_out holds
    // R * C slots of 16 floats.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        if !first {
            for r in 0..R {
                for c in 0..C {
                    acc[r][c] = _mm512_loadu_ps(acc_out.add((r * C + c) * 16));
                }
            }
        }
        let end = k0 + kc / 16 * 16;
        let mut kk = k0;
        // the weights are read once: fetch `ahead` bytes further (see
        // `dot::dot_range`) into L2 while this part is computed, once per
        // cache line
        let bytes = if DT == DT_F32 { 4 } else { 2 };
        while kk < end {
            let fetch = (kk * bytes) % 64 == 0;
            for r in 0..R {
                if fetch {
                    _mm_prefetch::<_MM_HINT_T1>(
                        (*rows.add(r)).wrapping_add(kk * bytes + ahead) as *const i8
                    );
                }
                let w = load_w512::<DT>(*rows.add(r), kk);
                for c in 0..C {
                    let x = _mm512_loadu_ps((*cols.add(c)).add(kk));
                    acc[r][c] = _mm512_fmadd_ps(w, x, acc[r][c]);
                }
            }
            kk += 16;
        }
        for r in 0..R {
            for c in 0..C {
                let slot = acc_out.add((r * C + c) * 16);
                _mm512_storeu_ps(slot, acc[r][c]);
                for t in end..k0 + kc {
                    *slot += scalar_w::<DT>(*rows.add(r), t) * *(*cols.add(c)).add(t);
                }
            }
        }
    }
}

/// Rows longer than this (bytes) go four side by side through the
/// AVX-512 row stream; shorter ones one at a time, so that a task
/// streams its rows in order. One at a time measured faster with 8 KiB
/// rows (F16, k = 4096) and with the small model's 1-3 KiB rows, no
/// faster with 16 KiB rows (F32), and slower with 28 KiB rows (F16,
/// k = 14336): long rows side by side are long streams already
/// (docs/performance.md).
const FOUR_ROWS_ABOVE: usize = 12 << 10;

/// The AVX-512 row stream (see `row_stream::RowStream`): rows of up to
/// [`FOUR_ROWS_ABOVE`] bytes one at a time, longer ones four at a time
/// (single rows at the end); two accumulators per row, 32 values per
/// step; each dot summed in registers and stored. Rows are prefetched
/// as the dot tiles do: whole groups of four rows ahead for short rows,
/// 1024 values further along for long ones.
///
/// # Safety
/// As for `row_stream_avx2`, with AVX-512 F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn rows4_avx512<const DT: u8>(
    first: *const u8,
    stride: usize,
    count: usize,
    k: usize,
    col: *const f32,
    out: *mut f32,
) {
    let bytes = if DT == DT_F32 { 4 } else { 2 };
    let ahead = rows_ahead(k * bytes, 4 * stride, 1024 * bytes);
    let per_call = if k * bytes > FOUR_ROWS_ABOVE { 4 } else { 1 };
    // SAFETY: caller's contract; prefetches may point past the rows.
    unsafe {
        let end32 = k / 32 * 32;
        let mut i = 0;
        while i < count {
            let rows = if count - i >= per_call { per_call } else { 1 };
            let row = |r: usize| first.add((i + r) * stride);
            let mut acc = [[_mm512_setzero_ps(); 2]; 4];
            let mut kk = 0;
            while kk < end32 {
                let x = [
                    _mm512_loadu_ps(col.add(kk)),
                    _mm512_loadu_ps(col.add(kk + 16)),
                ];
                for (r, a) in acc.iter_mut().enumerate().take(rows) {
                    let p = row(r);
                    // once per cache line of the row
                    for line in (0..32 * bytes).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T1>(
                            p.wrapping_add(kk * bytes + line + ahead) as *const i8
                        );
                    }
                    a[0] = _mm512_fmadd_ps(load_w512::<DT>(p, kk), x[0], a[0]);
                    a[1] = _mm512_fmadd_ps(load_w512::<DT>(p, kk + 16), x[1], a[1]);
                }
                kk += 32;
            }
            for (r, a) in acc.iter().enumerate().take(rows) {
                let p = row(r);
                let mut dot = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
                for t in end32..k {
                    dot += scalar_w::<DT>(p, t) * *col.add(t);
                }
                *out.add(i + r) = dot;
            }
            i += rows;
        }
    }
}

/// The AVX-512 micro-kernel: a 32 x 12 tile in 24 zmm accumulators.
///
/// # Safety
/// As for `packed::Kernel`, with MR = 32 and NR = 12.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn kernel_avx512(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *const *mut f32,
    first: bool,
) {
    const NR: usize = 12;
    // SAFETY: caller's contract.
    unsafe {
        let mut c0 = [_mm512_setzero_ps(); NR];
        let mut c1 = [_mm512_setzero_ps(); NR];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kc {
            let a0 = _mm512_loadu_ps(ap);
            let a1 = _mm512_loadu_ps(ap.add(16));
            for j in 0..NR {
                let bj = _mm512_set1_ps(*bp.add(j));
                c0[j] = _mm512_fmadd_ps(a0, bj, c0[j]);
                c1[j] = _mm512_fmadd_ps(a1, bj, c1[j]);
            }
            ap = ap.add(32);
            bp = bp.add(NR);
        }
        for j in 0..NR {
            let p = *c.add(j);
            if first {
                _mm512_storeu_ps(p, c0[j]);
                _mm512_storeu_ps(p.add(16), c1[j]);
            } else {
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), c0[j]));
                _mm512_storeu_ps(p.add(16), _mm512_add_ps(_mm512_loadu_ps(p.add(16)), c1[j]));
            }
        }
    }
}

/// Packs values `k0..k0 + kc` of 32 rows (null: a row past the end,
/// packed as zeros) as `[kc][32]` f32, widening F16/BF16.
///
/// # Safety
/// Non-null rows hold `k0 + kc` packed values; `dst` holds `kc * 32`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn pack_panel32_avx512<const DT: u8>(
    rows: &[*const u8; 32],
    k0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let k16 = kc / 16 * 16;
    // SAFETY: caller's contract.
    unsafe {
        for half in 0..2 {
            let mut kk = 0;
            while kk < k16 {
                let mut r = [_mm512_setzero_ps(); 16];
                for (i, v) in r.iter_mut().enumerate() {
                    let p = rows[half * 16 + i];
                    if !p.is_null() {
                        *v = load_w512::<DT>(p, k0 + kk);
                    }
                }
                transpose16(&mut r);
                for (j, v) in r.iter().enumerate() {
                    _mm512_storeu_ps(dst.as_mut_ptr().add((kk + j) * 32 + half * 16), *v);
                }
                kk += 16;
            }
            for t in k16..kc {
                for i in 0..16 {
                    let p = rows[half * 16 + i];
                    dst[t * 32 + half * 16 + i] = if p.is_null() {
                        0.0
                    } else {
                        scalar_w::<DT>(p, k0 + t)
                    };
                }
            }
        }
    }
}
