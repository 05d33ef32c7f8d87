//! Activations quantised to 8 bits once per call, as ggml does: one f32
//! scale per block of `QB` values, `QB` being the length over which the
//! weights keep one scale (32, or 16 for Q6_K), laid out for the integer
//! dot kernels.

use super::operands::Cols;
use super::quant_format::Format;
use crate::kernels::isa::Isa;
use crate::team;

/// Activations quantised to 8 bits, columns in tiles of `t`:
/// codes `[tile][k / 4][t][4]`, and per block `[tile][block][t]` the scale
/// `d`, the integer `bias` that starts the block's accumulator
/// (`-o * sum(q) / lanes`), and `sx = d * sum(q)` for the min term.
pub(crate) struct QActs<'a> {
    k: usize,
    qb: usize,
    pub(crate) codes: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) bias: &'a [i32],
    pub(crate) sx: &'a [f32],
}

impl QActs<'_> {
    /// Values a column.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    pub(crate) fn nblk(&self) -> usize {
        self.k / self.qb
    }
}

/// Bytes of scratch for `n` columns in tiles of `t`.
pub(crate) fn qacts_len(n: usize, k: usize, qb: usize, t: usize) -> usize {
    let cols = n.div_ceil(t) * t;
    cols * k + 3 * cols * (k / qb) * 4 + 4 * 64
}

/// Quantises the columns into `buf` (see `QActs`). `lanes` is how many
/// accumulator lanes share a block in the kernel that will read them.
pub(crate) fn quantize_acts<'a>(
    cols: &Cols<f32>,
    k: usize,
    f: Format,
    t: usize,
    lanes: i32,
    buf: &'a mut [u8],
) -> QActs<'a> {
    let n = cols.0.len();
    let tiles = n.div_ceil(t);
    let ncols = tiles * t;
    let nblk = k / f.qb;
    let (codes, rest) = buf.split_at_mut(ncols * k);
    let pad = rest.as_ptr().align_offset(64);
    let rest = &mut rest[pad..];
    let (d, rest) = rest.split_at_mut(ncols * nblk * 4);
    let (bias, rest) = rest.split_at_mut(ncols * nblk * 4);
    let sx = &mut rest[..ncols * nblk * 4];
    // SAFETY: 64-byte aligned regions of the right lengths, reinterpreted.
    let (codes, d, bias, sx) = unsafe {
        (
            std::slice::from_raw_parts_mut(codes.as_mut_ptr() as *mut i8, codes.len()),
            std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut f32, ncols * nblk),
            std::slice::from_raw_parts_mut(bias.as_mut_ptr() as *mut i32, ncols * nblk),
            std::slice::from_raw_parts_mut(sx.as_mut_ptr() as *mut f32, ncols * nblk),
        )
    };
    let offset = f.offset;
    let qb = f.qb;
    struct Tiles {
        codes: *mut i8,
        d: *mut f32,
        bias: *mut i32,
        sx: *mut f32,
    }
    // SAFETY: each task writes the regions of its own tile only.
    unsafe impl Sync for Tiles {}
    let base = Tiles {
        codes: codes.as_mut_ptr(),
        d: d.as_mut_ptr(),
        bias: bias.as_mut_ptr(),
        sx: sx.as_mut_ptr(),
    };
    let base = &base;
    team::for_each(tiles, |tile| {
        // SAFETY: tile `tile` of each region (t * k codes, t * nblk of
        // the others) lies inside it and belongs to this task alone.
        let (codes, d, bias, sx) = unsafe {
            (
                std::slice::from_raw_parts_mut(base.codes.add(tile * t * k), t * k),
                std::slice::from_raw_parts_mut(base.d.add(tile * t * nblk), t * nblk),
                std::slice::from_raw_parts_mut(base.bias.add(tile * t * nblk), t * nblk),
                std::slice::from_raw_parts_mut(base.sx.add(tile * t * nblk), t * nblk),
            )
        };
        // a column past the last (padding of the last tile) is all zeros
        let quantize = |j: usize, blk: usize, q: &mut [i8]| {
            if j < n {
                // SAFETY: column j holds k values.
                let x = unsafe { std::slice::from_raw_parts(cols.0[j].add(blk * qb), qb) };
                quantize_block(x, q)
            } else {
                q.fill(0);
                (0.0, 0)
            }
        };
        #[cfg(target_arch = "x86_64")]
        if t == 1 && qb == 32 && tile < n && crate::kernels::isa::active() >= Isa::Avx2 {
            // SAFETY: AVX2 is available; column `tile` holds k values and
            // the regions nblk blocks.
            unsafe {
                x86::quantize_column32(
                    cols.0[tile],
                    nblk,
                    codes.as_mut_ptr(),
                    d.as_mut_ptr(),
                    bias.as_mut_ptr(),
                )
            };
            for blk in 0..nblk {
                let sum = bias[blk];
                bias[blk] = -offset * sum / lanes;
                sx[blk] = d[blk] * sum as f32;
            }
            return;
        }
        // a block of up to a super-block (Q8_K-style activations)
        let mut q = [0i8; 256];
        for c in 0..t {
            let j = tile * t + c;
            for blk in 0..nblk {
                let (dx, sum) = if t == 1 {
                    // one column per tile: the codes are in order
                    quantize(j, blk, &mut codes[blk * qb..(blk + 1) * qb])
                } else {
                    let r = quantize(j, blk, &mut q[..qb]);
                    for g in 0..qb / 4 {
                        let at = ((blk * qb / 4 + g) * t + c) * 4;
                        codes[at..at + 4].copy_from_slice(&q[g * 4..g * 4 + 4]);
                    }
                    r
                };
                d[blk * t + c] = dx;
                bias[blk * t + c] = -offset * sum / lanes;
                sx[blk * t + c] = dx * sum as f32;
            }
        }
    });
    QActs {
        k,
        qb,
        codes,
        d,
        bias,
        sx,
    }
}

/// Quantises one block to codes in -127..=127; returns the scale and the
/// sum of the codes.
#[inline]
pub(crate) fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
        unsafe fn avx512(x: &[f32], q: &mut [i8]) -> (f32, i32) {
            quantize_block_body(x, q)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &[f32], q: &mut [i8]) -> (f32, i32) {
            quantize_block_body(x, q)
        }
        let isa = crate::kernels::isa::active();
        if isa >= Isa::Avx512 {
            // SAFETY: the processor has AVX-512 F/BW (checked by `active`).
            return unsafe { avx512(x, q) };
        }
        if isa >= Isa::Avx2 && x.len() == 32 && q.len() == 32 {
            // SAFETY: the processor has AVX2 (checked by `active`); 32
            // values in and out.
            return unsafe { x86::quantize32(x.as_ptr(), q.as_mut_ptr()) };
        }
        if isa >= Isa::Avx2 {
            // SAFETY: the processor has AVX2 and FMA (checked by `active`).
            return unsafe { avx2(x, q) };
        }
    }
    quantize_block_body(x, q)
}

/// The body of [`quantize_block`]: lane-wise maxima and sums over fixed
/// chunks, so that each instruction-set wrapper vectorises it.
#[inline(always)]
fn quantize_block_body(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    const L: usize = 16;
    let mut lanes = [0f32; L];
    let whole = x.len() - x.len() % L;
    for chunk in x[..whole].chunks_exact(L) {
        for l in 0..L {
            lanes[l] = lanes[l].max(chunk[l].abs());
        }
    }
    let amax = x[whole..]
        .iter()
        .fold(lanes.iter().fold(0f32, |m, v| m.max(*v)), |m, v| {
            m.max(v.abs())
        });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sums = [0i32; L];
    for (qc, xc) in q[..whole]
        .chunks_exact_mut(L)
        .zip(x[..whole].chunks_exact(L))
    {
        for l in 0..L {
            // round to nearest (ties to even) by the 1.5 * 2^23 trick: |v * id| <= 127
            let r = ((xc[l] * id + 12582912.0) - 12582912.0) as i32;
            qc[l] = r as i8;
            sums[l] += r;
        }
    }
    let mut sum: i32 = sums.iter().sum();
    for (o, v) in q[whole..].iter_mut().zip(&x[whole..]) {
        let r = ((v * id + 12582912.0) - 12582912.0) as i32;
        *o = r as i8;
        sum += r;
    }
    (d, sum)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::quantize_block`] for 32 values on AVX2, with the same
    /// arithmetic (so the same codes): scale `amax / 127`, codes rounded
    /// to nearest, ties to even.
    ///
    /// # Safety
    /// AVX2 is available; 32 values at `x` and room for 32 codes at `q`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize32(x: *const f32, q: *mut i8) -> (f32, i32) {
        // SAFETY: caller's contract.
        unsafe {
            let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.add(8 * i)));
            let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
            let a: [__m256; 4] = std::array::from_fn(|i| _mm256_and_ps(v[i], abs));
            let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
            let i: [__m256i; 4] =
                std::array::from_fn(|j| _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id)));
            let s = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let sum = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)));
            // packs interleave the 128-bit lanes: values 0-3, 8-11, 16-19,
            // 24-27, 4-7, ... ; one permute puts them back in order
            let w = _mm256_packs_epi16(
                _mm256_packs_epi32(i[0], i[1]),
                _mm256_packs_epi32(i[2], i[3]),
            );
            let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(q as *mut __m256i, w);
            (d, sum)
        }
    }

    /// [`quantize32`] over `nblk` blocks of a column, their scales to `d`
    /// and code sums to `sum` (one call, so that the blocks' divisions
    /// overlap).
    ///
    /// # Safety
    /// AVX2 is available; `x` holds `nblk * 32` values, `codes` as many
    /// bytes and `d` and `sum` `nblk` values.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_column32(
        x: *const f32,
        nblk: usize,
        codes: *mut i8,
        d: *mut f32,
        sum: *mut i32,
    ) {
        for b in 0..nblk {
            // SAFETY: caller's contract.
            unsafe {
                let (db, sb) = quantize32(x.add(32 * b), codes.add(32 * b));
                *d.add(b) = db;
                *sum.add(b) = sb;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ggraph_core::DType;

    use super::*;
    use crate::kernels::matmul::quant_format::format;

    /// Blocks that reach every branch of the quantiser: random values,
    /// all zeros, values that land halfway between two codes, one huge
    /// value among tiny ones, and negative zeros.
    fn blocks() -> Vec<[f32; 32]> {
        let mut s = 0x2545_f491_u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as f32 / u32::MAX as f32 * 2.0 - 1.0
        };
        let mut out: Vec<[f32; 32]> = (0..200).map(|_| std::array::from_fn(|_| next())).collect();
        out.push([0.0; 32]);
        out.push([-0.0; 32]);
        // 127 at the maximum: the scale is 1, so x.5 values are ties
        out.push(std::array::from_fn(|i| {
            if i == 0 { 127.0 } else { i as f32 - 15.5 }
        }));
        out.push(std::array::from_fn(|i| {
            if i == 7 { -3.0e38 } else { 1.0e-30 * i as f32 }
        }));
        out
    }

    #[test]
    fn quantize_block_paths_give_the_same_codes() {
        for x in blocks() {
            let mut want = [0i8; 32];
            let expected = quantize_block_body(&x, &mut want);
            let mut got = [0i8; 32];
            let result = quantize_block(&x, &mut got);
            assert_eq!(result.0.to_bits(), expected.0.to_bits(), "{x:?}");
            assert_eq!((result.1, got), (expected.1, want), "{x:?}");
        }
    }

    #[test]
    fn a_quantised_column_holds_each_block_in_order() {
        let blocks = blocks();
        let x: Vec<f32> = blocks.iter().flatten().copied().collect();
        let k = x.len();
        let cols = Cols(vec![x.as_ptr() as *mut f32]);
        let f = format(DType::Q4_0).unwrap();
        let mut buf = vec![0u8; qacts_len(1, k, 32, 1)];
        let acts = quantize_acts(&cols, k, f, 1, 8, &mut buf);
        for (b, block) in blocks.iter().enumerate() {
            let mut want = [0i8; 32];
            let (d, sum) = quantize_block_body(block, &mut want);
            assert_eq!(&acts.codes[32 * b..32 * b + 32], &want[..], "block {b}");
            assert_eq!(acts.d[b].to_bits(), d.to_bits(), "block {b}");
            assert_eq!(acts.bias[b], -8 * sum / 8, "block {b}");
            assert_eq!(acts.sx[b], d * sum as f32, "block {b}");
        }
    }
}
