//! The dot product of a row of F16 values and a row of f32 values already
//! rounded to F16, summed as `ggml_vec_dot_f16` sums it on x86 (the order
//! llama.cpp's matrix-vector products and flash attention's scores take):
//! the first `k - k % 32` products in four accumulators of eight lanes
//! (value `t` in accumulator `t % 32 / 8`, lane `t % 8`), the accumulators
//! folded as `(a0 + a2) + (a1 + a3)`, its lanes summed as `((s0 + s4) +
//! (s1 + s5)) + ((s2 + s6) + (s3 + s7))`, and the remaining products added
//! one by one in f64. A product of two F16 values is exact in f32, so the
//! order alone fixes the result.

use ggraph_core::quant::f16_to_f32;

use super::isa::Isa;

/// `dot(row, col)` over `k` values: the row `k` F16 values, the column
/// `k` f32.
pub(crate) type HalfDot = unsafe fn(row: *const u8, col: *const f32, k: usize) -> f32;

/// `out[i] = dot(row i, col)` for `count` rows `stride` bytes apart from
/// `first`, each summed as [`HalfDot`] sums it.
pub(crate) type HalfDotRows = unsafe fn(
    first: *const u8,
    stride: usize,
    count: usize,
    col: *const f32,
    k: usize,
    out: *mut f32,
);

/// The many-row kernel of this instruction set: on AVX2 two rows at a
/// time, on AVX-512 four, so that their sums overlap.
pub(crate) fn half_dot_rows(isa: Isa) -> HalfDotRows {
    #[cfg(target_arch = "x86_64")]
    {
        if isa >= Isa::Avx512 {
            return x86::dot_rows_avx512;
        }
        if isa >= Isa::Avx2 {
            return x86::dot_rows;
        }
    }
    let _ = isa;
    dot_rows_portable
}

/// # Safety
/// As for [`HalfDotRows`].
unsafe fn dot_rows_portable(
    first: *const u8,
    stride: usize,
    count: usize,
    col: *const f32,
    k: usize,
    out: *mut f32,
) {
    for i in 0..count {
        // SAFETY: caller's contract.
        unsafe { *out.add(i) = dot_portable(first.add(i * stride), col, k) };
    }
}

/// The kernel of this instruction set.
pub(crate) fn half_dot(isa: Isa) -> HalfDot {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return x86::dot;
    }
    let _ = isa;
    dot_portable
}

/// The f16 at `p` (two readable bytes) as f32.
///
/// # Safety
/// Value `i` of `p` exists.
pub(crate) unsafe fn half_at(p: *const u8, i: usize) -> f32 {
    // SAFETY: caller's contract.
    f16_to_f32(unsafe { (p as *const u16).add(i).read_unaligned() })
}

/// # Safety
/// The row holds `k` F16 values, the column `k` f32.
unsafe fn dot_portable(row: *const u8, col: *const f32, k: usize) -> f32 {
    let np = k & !31;
    let mut acc = [[0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (q, a) in acc.iter_mut().enumerate() {
            for (t, lane) in a.iter_mut().enumerate() {
                let v = i + 8 * q + t;
                // SAFETY: v < np <= k.
                *lane += unsafe { half_at(row, v) * *col.add(v) };
            }
        }
    }
    let s: [f32; 8] = std::array::from_fn(|t| (acc[0][t] + acc[2][t]) + (acc[1][t] + acc[3][t]));
    let h: [f32; 4] = std::array::from_fn(|t| s[t] + s[t + 4]);
    let mut sum = ((h[0] + h[1]) + (h[2] + h[3])) as f64;
    for v in np..k {
        // SAFETY: v < k.
        sum += unsafe { half_at(row, v) * *col.add(v) } as f64;
    }
    sum as f32
}

/// The AVX2 kernel itself, for callers compiled for AVX2 that inline it.
#[cfg(target_arch = "x86_64")]
pub(crate) use x86::dot as half_dot_avx2;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::half_at;

    /// # Safety
    /// AVX2, FMA and F16C; as `dot_portable`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn dot(row: *const u8, col: *const f32, k: usize) -> f32 {
        let np = k & !31;
        let mut acc = [_mm256_setzero_ps(); 4];
        for i in (0..np).step_by(32) {
            for (q, acc) in acc.iter_mut().enumerate() {
                let v = i + 8 * q;
                // SAFETY: values v..v + 8 exist.
                unsafe {
                    let x = _mm256_cvtph_ps(_mm_loadu_si128(row.add(2 * v) as *const __m128i));
                    *acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(col.add(v)), *acc);
                }
            }
        }
        // SAFETY: the caller's row and column.
        unsafe { finish(acc, row, col, np, k) }
    }

    /// The accumulators folded and summed as ggml does, and the products
    /// past `np` added in f64.
    ///
    /// # Safety
    /// AVX2 and F16C; the row and column hold `k` values.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn finish(
        acc: [__m256; 4],
        row: *const u8,
        col: *const f32,
        np: usize,
        k: usize,
    ) -> f32 {
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let h = _mm_hadd_ps(h, h);
        let mut sum = _mm_cvtss_f32(_mm_hadd_ps(h, h)) as f64;
        for v in np..k {
            // SAFETY: v < k.
            sum += unsafe { half_at(row, v) * *col.add(v) } as f64;
        }
        sum as f32
    }

    /// # Safety
    /// AVX2, FMA and F16C; as `HalfDotRows`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows(
        first: *const u8,
        stride: usize,
        count: usize,
        col: *const f32,
        k: usize,
        out: *mut f32,
    ) {
        let np = k & !31;
        let mut i = 0;
        while i + 2 <= count {
            // SAFETY: rows i and i + 1 hold k values; out holds count.
            unsafe {
                let (r0, r1) = (first.add(i * stride), first.add((i + 1) * stride));
                let ahead = 2 * stride;
                for line in (0..2 * k).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(r0.wrapping_add(ahead + line) as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(r1.wrapping_add(ahead + line) as *const i8);
                }
                let mut a0 = [_mm256_setzero_ps(); 4];
                let mut a1 = [_mm256_setzero_ps(); 4];
                for v0 in (0..np).step_by(32) {
                    for q in 0..4 {
                        let v = v0 + 8 * q;
                        let x = _mm256_loadu_ps(col.add(v));
                        let w0 = _mm256_cvtph_ps(_mm_loadu_si128(r0.add(2 * v) as *const __m128i));
                        let w1 = _mm256_cvtph_ps(_mm_loadu_si128(r1.add(2 * v) as *const __m128i));
                        a0[q] = _mm256_fmadd_ps(w0, x, a0[q]);
                        a1[q] = _mm256_fmadd_ps(w1, x, a1[q]);
                    }
                }
                *out.add(i) = finish(a0, r0, col, np, k);
                *out.add(i + 1) = finish(a1, r1, col, np, k);
            }
            i += 2;
        }
        if i < count {
            // SAFETY: row i holds k values.
            unsafe { *out.add(i) = dot(first.add(i * stride), col, k) };
        }
    }

    /// As [`dot_rows`], four rows at a time, two of each row's four
    /// accumulators to a 512-bit register (values `v..v + 16` of a step in
    /// one conversion).
    ///
    /// # Safety
    /// AVX-512 F, AVX2, FMA and F16C; as `HalfDotRows`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows_avx512(
        first: *const u8,
        stride: usize,
        count: usize,
        col: *const f32,
        k: usize,
        out: *mut f32,
    ) {
        const R: usize = 4;
        let np = k & !31;
        let mut i = 0;
        while i + R <= count {
            // SAFETY: rows i..i + 4 hold k values; out holds count.
            unsafe {
                let rows: [*const u8; R] = std::array::from_fn(|r| first.add((i + r) * stride));
                let mut lo = [_mm512_setzero_ps(); R];
                let mut hi = [_mm512_setzero_ps(); R];
                for v in (0..np).step_by(32) {
                    let x0 = _mm512_loadu_ps(col.add(v));
                    let x1 = _mm512_loadu_ps(col.add(v + 16));
                    for r in 0..R {
                        // the same place in the next group of rows
                        let next = rows[r].wrapping_add(R * stride + 2 * v);
                        _mm_prefetch::<_MM_HINT_T0>(next as *const i8);
                        let w = |at: usize| {
                            _mm512_cvtph_ps(_mm256_loadu_si256(
                                rows[r].add(2 * at) as *const __m256i
                            ))
                        };
                        lo[r] = _mm512_fmadd_ps(w(v), x0, lo[r]);
                        hi[r] = _mm512_fmadd_ps(w(v + 16), x1, hi[r]);
                    }
                }
                for r in 0..R {
                    // accumulators 0 and 1 in lo, 2 and 3 in hi
                    let half = |a: __m512, upper: bool| {
                        if upper {
                            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)))
                        } else {
                            _mm512_castps512_ps256(a)
                        }
                    };
                    let acc = [
                        half(lo[r], false),
                        half(lo[r], true),
                        half(hi[r], false),
                        half(hi[r], true),
                    ];
                    *out.add(i + r) = finish(acc, rows[r], col, np, k);
                }
            }
            i += R;
        }
        // SAFETY: the remaining rows hold k values.
        unsafe { dot_rows(first.add(i * stride), stride, count - i, col, k, out.add(i)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa;
    use ggraph_core::quant::f32_to_f16;

    #[test]
    fn every_instruction_set_sums_as_the_portable_kernel() {
        let mut s = 1u32;
        let mut next = || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1 << 24) as f32 - 0.5) * 2f32.powi((s % 13) as i32)
        };
        for k in [8, 31, 32, 64, 100, 256] {
            let row: Vec<u16> = (0..k).map(|_| f32_to_f16(next())).collect();
            let col: Vec<f32> = (0..k).map(|_| f16_to_f32(f32_to_f16(next()))).collect();
            let (r, c) = (row.as_ptr() as *const u8, col.as_ptr());
            // SAFETY: k values each.
            let want = unsafe { dot_portable(r, c, k) };
            for level in isa::all_supported() {
                // SAFETY: as above; the level is supported here.
                let got = unsafe { half_dot(level)(r, c, k) };
                assert_eq!(got.to_bits(), want.to_bits(), "k {k} {}", level.name());
                // three rows, the same one: two at a time, then one
                let mut rows = [0f32; 3];
                // SAFETY: stride 0: every row is the one row.
                unsafe { half_dot_rows(level)(r, 0, 3, c, k, rows.as_mut_ptr()) };
                assert_eq!(
                    rows.map(f32::to_bits),
                    [want.to_bits(); 3],
                    "k {k} {}",
                    level.name()
                );
            }
        }
    }
}
