//! Activations quantised to 8 bits once per call, exactly as ggml rounds
//! them for the weight type (its partner, `Partner`: Q8_0, Q8_1 or Q8_K,
//! their scales and rounding), laid out for the integer dot kernels: one
//! scale per block of `QB` values, `QB` being the length over which the
//! weights keep one scale (32, 16 for Q2_K, Q3_K and Q6_K, or a whole
//! super-block); blocks inside one partner span share its scale.

use ggraph_core::quant::{f16_to_f32, f32_to_f16};

use super::operands::Cols;
use super::quant_format::{Format, Partner};
use crate::kernels::isa::Isa;
use crate::team;

/// Activations quantised to 8 bits, columns in tiles of `t`:
/// codes `[tile][k / 4][t][4]`, and per block `[tile][block][t]` the scale
/// `d`, the integer `bias` that starts the block's accumulator
/// (`-o * sum(q) / lanes`), and `sx`, the min term's `d * sum(q)` as the
/// partner keeps it.
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

/// The scale of one span of activations, as the partner type keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Scale {
    /// Multiplies a value into its code (before rounding).
    pub(crate) id: f32,
    /// Multiplies a code back into a value: what the dot products use.
    pub(crate) d: f32,
    /// `d` before Q8_0 and Q8_1 round it to f16 (Q8_1's sum uses it).
    exact: f32,
}

impl Scale {
    /// The scale of a span whose largest magnitude is `amax`. Q8_0 and
    /// Q8_1 (ggml's x86 quantisers): `id = 127 / amax`, `d = amax / 127`
    /// rounded to f16. Q8_K: `id = -127 / max` and `d = 1 / id`, `max`
    /// being the value of largest magnitude; its sign only flips every
    /// code and the scale together, so it is dropped here.
    pub(crate) fn new(partner: Partner, amax: f32) -> Scale {
        match partner {
            Partner::Q8_0 | Partner::Q8_1 => {
                let exact = amax / 127.0;
                Scale {
                    id: if amax != 0.0 { 127.0 / amax } else { 0.0 },
                    d: f16_round(exact),
                    exact,
                }
            }
            Partner::Q8K if amax == 0.0 => Scale {
                id: 0.0,
                d: 0.0,
                exact: 0.0,
            },
            Partner::Q8K => {
                let id = 127.0 / amax;
                Scale {
                    id,
                    d: 1.0 / id,
                    exact: 1.0 / id,
                }
            }
        }
    }

    /// `d * sum(q)` for a block whose codes sum to `sum`, as the min term
    /// reads it: Q8_1 keeps it as f16, from the scale before rounding.
    pub(crate) fn sum_term(self, partner: Partner, sum: i32) -> f32 {
        match partner {
            Partner::Q8_1 => f16_round(self.exact * sum as f32),
            Partner::Q8_0 | Partner::Q8K => self.d * sum as f32,
        }
    }
}

/// `x` rounded to the nearest f16 (ties to even), back as f32: with F16C
/// where the processor has it (one instruction each way, inlined into the
/// quantisers' instruction-set wrappers), else in software.
#[inline(always)]
fn f16_round(x: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: the processor has F16C.
        return unsafe { x86::f16_round(x) };
    }
    f16_to_f32(f32_to_f16(x))
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
    let partner = f.partner;
    let span = partner.span().max(qb);
    // blocks a span
    let per = span / qb;
    debug_assert!(
        span % qb == 0 && k % span == 0,
        "k {k}, qb {qb}, span {span}"
    );
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
        if t == 1 && tile < n {
            // one column per tile: the codes go straight in order, the
            // whole column in one call
            // SAFETY: column `tile` holds k values.
            let x = unsafe { std::slice::from_raw_parts(cols.0[tile], k) };
            quantize_column(partner, x, qb, codes, |blk, scale, sum| {
                d[blk] = scale.d;
                bias[blk] = -offset * sum / lanes;
                sx[blk] = scale.sum_term(partner, sum);
            });
            return;
        }
        let mut sums = [0i32; 16];
        // a span's codes, when a tile holds several columns
        let mut q = [0i8; 256];
        for c in 0..t {
            let j = tile * t + c;
            for s in 0..k / span {
                let sums = &mut sums[..per];
                let scale = if t == 1 {
                    // one column per tile: the codes go straight in order
                    let q = &mut codes[s * span..(s + 1) * span];
                    span_of(cols, j, s * span, f, q, sums)
                } else {
                    let scale = span_of(cols, j, s * span, f, &mut q[..span], sums);
                    for g in 0..span / 4 {
                        let at = ((s * span / 4 + g) * t + c) * 4;
                        codes[at..at + 4].copy_from_slice(&q[g * 4..g * 4 + 4]);
                    }
                    scale
                };
                for (b, &sum) in sums.iter().enumerate() {
                    let at = (s * per + b) * t + c;
                    d[at] = scale.d;
                    bias[at] = -offset * sum / lanes;
                    sx[at] = scale.sum_term(partner, sum);
                }
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

/// The columns rounded to F16 (`bf16` false) or BF16 into `out`, `k`
/// values a column one after another: ggml multiplies F16 and BF16 weights
/// by activations rounded to their type.
pub(crate) fn columns_as_half(cols: &Cols<f32>, k: usize, bf16: bool, out: &mut [f32]) {
    team::for_each_chunk_mut(out, k, |j, o| {
        // SAFETY: column j holds k values.
        o.copy_from_slice(unsafe { std::slice::from_raw_parts(cols.0[j], k) });
        if bf16 {
            for v in o.iter_mut() {
                *v = half::bf16::from_f32(*v).to_f32();
            }
        } else {
            crate::kernels::convert::round_to_f16(o);
        }
    });
}

/// The columns as the integer kernels see them, back in floats, into
/// `out`: each value `d * q` with its span's scale and code as `partner`
/// rounds them, `k` values a column one after another. The float paths
/// that multiply quantised weights read these, so that they round where
/// ggml rounds.
pub(crate) fn rounded_columns(cols: &Cols<f32>, k: usize, partner: Partner, out: &mut [f32]) {
    let span = partner.span();
    team::for_each_chunk_mut(out, k, |j, o| {
        let mut q = [0i8; 256];
        let mut sum = [0i32; 1];
        // SAFETY: column j holds k values.
        let x = unsafe { std::slice::from_raw_parts(cols.0[j], k) };
        for (xs, os) in x.chunks_exact(span).zip(o.chunks_exact_mut(span)) {
            let scale = quantize_span(partner, xs, span, &mut q[..span], &mut sum);
            for (v, &c) in os.iter_mut().zip(&q[..span]) {
                *v = scale.d * c as f32;
            }
        }
    });
}

/// Quantises the span of column `j` that starts at value `v0` into `q`,
/// its blocks' code sums into `sums`; a column past the last (padding of
/// the last tile) is all zeros.
fn span_of(
    cols: &Cols<f32>,
    j: usize,
    v0: usize,
    f: Format,
    q: &mut [i8],
    sums: &mut [i32],
) -> Scale {
    if j >= cols.0.len() {
        q.fill(0);
        sums.fill(0);
        return Scale::new(f.partner, 0.0);
    }
    // SAFETY: column j holds k values, and the span lies inside them.
    let x = unsafe { std::slice::from_raw_parts(cols.0[j].add(v0), q.len()) };
    quantize_span(f.partner, x, f.qb, q, sums)
}

/// Quantises one span of activations (`x`: a multiple of 16 values, all
/// sharing one scale) into codes `q` as `partner` rounds them: codes
/// `x * id` rounded to nearest, ties to even (as ggml's `_mm256_round_ps`
/// and `nearest_int`). The code sums of each `qb` values go to `sums`.
#[inline]
pub(crate) fn quantize_span(
    partner: Partner,
    x: &[f32],
    qb: usize,
    q: &mut [i8],
    sums: &mut [i32],
) -> Scale {
    let mut scale = Scale::new(partner, 0.0);
    quantize_column(partner, x, qb, q, |b, s, sum| {
        sums[b] = sum;
        scale = s;
    });
    scale
}

/// Quantises a whole column `x` (a multiple of the partner's span) into
/// `q` span by span, as [`quantize_span`] describes, in one call of the
/// instruction set's code: `block(b, scale, sum)` is told each `qb`-value
/// block's scale and code sum, in order.
#[inline]
pub(crate) fn quantize_column(
    partner: Partner,
    x: &[f32],
    qb: usize,
    q: &mut [i8],
    block: impl FnMut(usize, Scale, i32),
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
        unsafe fn avx512(
            p: Partner,
            x: &[f32],
            qb: usize,
            q: &mut [i8],
            block: impl FnMut(usize, Scale, i32),
        ) {
            // SAFETY: AVX2 and F16C are enabled here.
            unsafe { x86::quantize_column(p, x, qb, q, block) }
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2(
            p: Partner,
            x: &[f32],
            qb: usize,
            q: &mut [i8],
            block: impl FnMut(usize, Scale, i32),
        ) {
            // SAFETY: AVX2 and F16C are enabled here.
            unsafe { x86::quantize_column(p, x, qb, q, block) }
        }
        let isa = crate::kernels::isa::active();
        if isa >= Isa::Avx512 {
            // SAFETY: the processor has AVX-512 F/BW and F16C (checked by
            // `active`: its AVX2 level includes F16C).
            return unsafe { avx512(partner, x, qb, q, block) };
        }
        if isa >= Isa::Avx2 {
            // SAFETY: the processor has AVX2, FMA and F16C.
            return unsafe { avx2(partner, x, qb, q, block) };
        }
    }
    quantize_column_body(partner, x, qb, q, block)
}

#[inline(always)]
fn quantize_column_body(
    partner: Partner,
    x: &[f32],
    qb: usize,
    q: &mut [i8],
    mut block: impl FnMut(usize, Scale, i32),
) {
    let span = partner.span().max(qb);
    let per = span / qb;
    let mut sums = [0i32; 16];
    for (s, (xs, qs)) in x
        .chunks_exact(span)
        .zip(q.chunks_exact_mut(span))
        .enumerate()
    {
        let scale = quantize_span_body(partner, xs, qb, qs, &mut sums[..per]);
        for (b, &sum) in sums[..per].iter().enumerate() {
            block(s * per + b, scale, sum);
        }
    }
}

/// The body of [`quantize_span`]: lane-wise maxima and sums over fixed
/// chunks, so that each instruction-set wrapper vectorises it.
#[inline(always)]
fn quantize_span_body(
    partner: Partner,
    x: &[f32],
    qb: usize,
    q: &mut [i8],
    sums: &mut [i32],
) -> Scale {
    const L: usize = 16;
    let mut lanes = [0f32; L];
    for chunk in x.chunks_exact(L) {
        for l in 0..L {
            lanes[l] = lanes[l].max(chunk[l].abs());
        }
    }
    let amax = lanes.iter().fold(0f32, |m, v| m.max(*v));
    let scale = Scale::new(partner, amax);
    let id = scale.id;
    for ((qb_codes, xb), sum) in q.chunks_exact_mut(qb).zip(x.chunks_exact(qb)).zip(sums) {
        let mut acc = [0i32; L];
        for (qc, xc) in qb_codes.chunks_exact_mut(L).zip(xb.chunks_exact(L)) {
            for l in 0..L {
                // round to nearest (ties to even) by the 1.5 * 2^23 trick: |v * id| <= 127
                let r = ((xc[l] * id + 12582912.0) - 12582912.0) as i32;
                qc[l] = r as i8;
                acc[l] += r;
            }
        }
        *sum = acc.iter().sum();
    }
    scale
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Partner, Scale};

    /// [`super::f16_round`] with F16C.
    ///
    /// # Safety
    /// The processor has F16C.
    #[inline]
    #[target_feature(enable = "f16c")]
    pub(super) unsafe fn f16_round(x: f32) -> f32 {
        let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x));
        _mm_cvtss_f32(_mm_cvtph_ps(h))
    }

    /// [`super::quantize_column`]'s body on AVX2: spans of 32 values
    /// (Q8_0, Q8_1) through [`quantize32`], the others through the
    /// portable body (which the caller's features vectorise).
    ///
    /// # Safety
    /// AVX2 and F16C are available.
    #[inline(always)]
    pub(super) unsafe fn quantize_column(
        partner: Partner,
        x: &[f32],
        qb: usize,
        q: &mut [i8],
        mut block: impl FnMut(usize, Scale, i32),
    ) {
        if partner.span() != 32 || qb != 32 {
            return super::quantize_column_body(partner, x, qb, q, block);
        }
        for (b, (xs, qs)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
            // SAFETY: 32 values in and out; the caller's contract.
            let (scale, sum) = unsafe { quantize32(partner, xs.as_ptr(), qs.as_mut_ptr()) };
            block(b, scale, sum);
        }
    }

    /// [`super::quantize_span`] for one span of 32 values on AVX2, with
    /// the same arithmetic (so the same codes and scale).
    ///
    /// # Safety
    /// AVX2 and F16C are available; 32 values at `x` and room for 32 codes
    /// at `q`.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn quantize32(partner: Partner, x: *const f32, q: *mut i8) -> (Scale, i32) {
        // SAFETY: caller's contract.
        unsafe {
            let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.add(8 * i)));
            let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
            let a: [__m256; 4] = std::array::from_fn(|i| _mm256_and_ps(v[i], abs));
            let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let scale = Scale::new(partner, amax);
            let id = _mm256_set1_ps(scale.id);
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
            (scale, sum)
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

    /// ggml's `quantize_row_q8_0` (and `_q8_1`) on x86: the scale as f16,
    /// the codes, and Q8_1's `s`.
    fn ggml_q8_0(x: &[f32; 32]) -> (u16, [i8; 32], u16) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let q: [i8; 32] = std::array::from_fn(|i| (x[i] * id).round_ties_even() as i8);
        let sum: i32 = q.iter().map(|&v| v as i32).sum();
        (f32_to_f16(d), q, f32_to_f16(d * sum as f32))
    }

    /// ggml's `quantize_row_q8_K_ref`: the scale, the codes.
    fn ggml_q8_k(x: &[f32]) -> (f32, Vec<i8>) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            return (0.0, vec![0; x.len()]);
        }
        let iscale = -127.0 / max;
        let q = x
            .iter()
            .map(|&v| ((iscale * v).round_ties_even() as i32).min(127) as i8)
            .collect();
        (1.0 / iscale, q)
    }

    #[test]
    fn q8_0_and_q8_1_activations_are_ggml_s() {
        for x in blocks() {
            let (d, want, s) = ggml_q8_0(&x);
            for partner in [Partner::Q8_0, Partner::Q8_1] {
                let mut got = [0i8; 32];
                let mut sum = [0i32; 1];
                let scale = quantize_span(partner, &x, 32, &mut got, &mut sum);
                assert_eq!(got, want, "{x:?}");
                assert_eq!(scale.d.to_bits(), f16_to_f32(d).to_bits(), "{x:?}");
                assert_eq!(sum[0], want.iter().map(|&v| v as i32).sum::<i32>());
                if partner == Partner::Q8_1 {
                    assert_eq!(scale.sum_term(partner, sum[0]), f16_to_f32(s), "{x:?}");
                }
            }
            let mut got = [0i8; 32];
            let mut column = Vec::new();
            quantize_column(Partner::Q8_0, &x, 32, &mut got, |_, s, _| column.push(s.d));
            assert_eq!((column, got), (vec![f16_to_f32(d)], want));
        }
    }

    #[test]
    fn q8_k_activations_are_ggml_s_up_to_one_sign() {
        let blocks = blocks();
        // super-blocks of eight of the blocks, and one all zeros
        let mut spans: Vec<Vec<f32>> = blocks
            .chunks_exact(8)
            .map(|c| c.iter().flatten().copied().collect())
            .collect();
        spans.push(vec![0.0; 256]);
        for x in spans {
            let (d, want) = ggml_q8_k(&x);
            for qb in [16, 32, 256] {
                let mut got = [0i8; 256];
                let mut sums = [0i32; 16];
                let scale = quantize_span(Partner::Q8K, &x, qb, &mut got, &mut sums[..256 / qb]);
                // ggml's codes have the opposite sign of the values of the
                // largest magnitude's sign; so does its scale
                let sign = if d < 0.0 { -1 } else { 1 };
                assert_eq!(scale.d.to_bits(), (sign as f32 * d).to_bits());
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(*g as i32 * sign, *w as i32);
                }
                for (b, s) in sums[..256 / qb].iter().enumerate() {
                    assert_eq!(
                        *s,
                        got[b * qb..(b + 1) * qb]
                            .iter()
                            .map(|&v| v as i32)
                            .sum::<i32>()
                    );
                }
            }
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
            let (d, want, _) = ggml_q8_0(block);
            let sum: i32 = want.iter().map(|&v| v as i32).sum();
            let d = f16_to_f32(d);
            assert_eq!(&acts.codes[32 * b..32 * b + 32], &want[..], "block {b}");
            assert_eq!(acts.d[b].to_bits(), d.to_bits(), "block {b}");
            assert_eq!(acts.bias[b], -8 * sum / 8, "block {b}");
            assert_eq!(acts.sx[b], d * sum as f32, "block {b}");
        }
    }

    #[test]
    fn tiles_of_columns_hold_the_same_codes_and_scales() {
        // Q6_K: 16-value blocks sharing a super-block's scale, three
        // columns in tiles of two (the last padded with zeros)
        let blocks = blocks();
        let k = 256 * (blocks.len() / 8);
        let x: Vec<f32> = blocks.iter().flatten().copied().take(k).collect();
        let cols_x: Vec<Vec<f32>> = (0..3)
            .map(|c| x.iter().map(|v| v * (c + 1) as f32).collect())
            .collect();
        let f = format(DType::Q6_K).unwrap();
        let nblk = k / f.qb;
        let cols = Cols(cols_x.iter().map(|c| c.as_ptr() as *mut f32).collect());
        let mut one = vec![0u8; qacts_len(3, k, f.qb, 1)];
        let ones = quantize_acts(&cols, k, f, 1, 1, &mut one);
        let mut two = vec![0u8; qacts_len(3, k, f.qb, 2)];
        let twos = quantize_acts(&cols, k, f, 2, 1, &mut two);
        for c in 0..4 {
            for i in 0..k {
                let got = twos.codes[((c / 2) * k / 4 + i / 4) * 8 + (c % 2) * 4 + i % 4];
                let want = if c < 3 { ones.codes[c * k + i] } else { 0 };
                assert_eq!(got, want, "column {c} value {i}");
            }
            for b in 0..nblk {
                let at = (c / 2) * 2 * nblk + b * 2 + c % 2;
                let want = if c < 3 { ones.d[c * nblk + b] } else { 0.0 };
                assert_eq!(twos.d[at].to_bits(), want.to_bits());
                if c < 3 {
                    // one scale a super-block
                    assert_eq!(ones.d[c * nblk + b], ones.d[c * nblk + b / 16 * 16]);
                }
            }
        }
    }
}
