//! The direct path: weight rows decoded a chunk at a time into codes in
//! L1 and dotted with each quantised column, for any format and any
//! instruction set.

use std::cell::RefCell;

#[cfg(target_arch = "x86_64")]
use super::avx2::{direct_avx2_16, direct_avx2_32, direct_avx2_q8};
#[cfg(target_arch = "x86_64")]
use super::avx512_vnni::{direct_vnni16, direct_vnni32};
use super::operands::{ACTS, ColsQ, DIRECT_C, DIRECT_R, Decoded};
use crate::kernels::isa::Isa;
use crate::kernels::matmul::activation_quant::{qacts_len, quantize_acts};
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::matmul::quant_format::{Format, decode};
use crate::kernels::parallel::par_ranges;
use crate::kernels::scratch::with_scratch;

/// Values per decoded chunk of a row on the direct path (a multiple of
/// 256, so whole super-blocks).
const DIRECT_KC: usize = 2048;

thread_local! {
    static DECODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `out[r * C + c] += dot` over `nb` blocks.
type DirectFn = unsafe fn(f: &Format, nb: usize, w: &Decoded, x: &ColsQ, out: *mut f32);

fn direct_fn(isa: Isa, f: &Format, r: usize, c: usize) -> DirectFn {
    macro_rules! by_c {
        ($k:ident, $r:literal) => {
            match c {
                1 => $k::<$r, 1> as DirectFn,
                2 => $k::<$r, 2> as DirectFn,
                3 => $k::<$r, 3> as DirectFn,
                _ => $k::<$r, 4> as DirectFn,
            }
        };
    }
    macro_rules! by_rc {
        ($k:ident) => {
            if r == DIRECT_R {
                by_c!($k, 4)
            } else {
                by_c!($k, 1)
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx512Vnni {
            return if f.qb == 32 {
                by_rc!(direct_vnni32)
            } else {
                by_rc!(direct_vnni16)
            };
        }
        if isa >= Isa::Avx2 {
            return match (f.qb, f.signed) {
                (32, true) => by_rc!(direct_avx2_q8),
                (32, false) => by_rc!(direct_avx2_32),
                _ => by_rc!(direct_avx2_16),
            };
        }
    }
    let _ = isa;
    by_rc!(direct_portable)
}

pub(crate) fn gemm(isa: Isa, f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    let lanes = if isa >= Isa::Avx2 {
        (f.qb / 4) as i32
    } else {
        1
    };
    with_scratch(&ACTS, qacts_len(n, k, f.qb, 1), |buf| {
        let acts = quantize_acts(b, k, f, 1, lanes, buf);
        let acts = &acts;
        let nblk = acts.nblk();
        par_ranges(m, 16, |range| {
            // a single column: whole rows (long streams, which the
            // prefetchers follow); more: chunks that stay in L1
            let kc = if n == 1 { k } else { DIRECT_KC.min(k) };
            let sb = kc / f.qb;
            let need = DIRECT_R * kc + 2 * DIRECT_R * sb * 4 + 64;
            with_scratch(&DECODED, need, |dec| {
                let (codes, rest) = dec.split_at_mut(DIRECT_R * kc);
                let pad = rest.as_ptr().align_offset(4);
                let rest = &mut rest[pad..];
                // SAFETY: aligned f32 region of 2 * R * sb values.
                let scales = unsafe {
                    std::slice::from_raw_parts_mut(rest.as_mut_ptr() as *mut f32, 2 * DIRECT_R * sb)
                };
                let (dw, mw) = scales.split_at_mut(DIRECT_R * sb);
                let mut res = [0f32; DIRECT_R * DIRECT_C];
                // partial sums on the stack unless there are many columns (only on
                // the fallback paths)
                let mut small = [0f32; DIRECT_R * 16];
                let mut big = Vec::new();
                let sums: &mut [f32] = if n <= 16 {
                    &mut small[..DIRECT_R * n]
                } else {
                    big.resize(DIRECT_R * n, 0f32);
                    &mut big
                };
                let mut i = range.start;
                while i < range.end {
                    let r = if range.end - i >= DIRECT_R {
                        DIRECT_R
                    } else {
                        1
                    };
                    sums.fill(0.0);
                    for v0 in (0..k).step_by(kc) {
                        let len = kc.min(k - v0);
                        let nb = len / f.qb;
                        for q in 0..r {
                            // SAFETY: row i + q < m; values v0..v0+len exist.
                            unsafe {
                                decode(
                                    f,
                                    a.row(i + q),
                                    v0,
                                    &mut codes[q * kc..q * kc + len],
                                    &mut dw[q * sb..q * sb + nb],
                                    &mut mw[q * sb..q * sb + nb],
                                )
                            };
                        }
                        let w = Decoded {
                            codes: codes.as_ptr(),
                            stride: kc,
                            dw: dw.as_ptr(),
                            mw: mw.as_ptr(),
                            sstride: sb,
                        };
                        let blk0 = v0 / f.qb;
                        for j0 in (0..n).step_by(DIRECT_C) {
                            let c = DIRECT_C.min(n - j0);
                            let mut x = ColsQ {
                                codes: [std::ptr::null(); DIRECT_C],
                                d: [std::ptr::null(); DIRECT_C],
                                bias: [std::ptr::null(); DIRECT_C],
                                sx: [std::ptr::null(); DIRECT_C],
                            };
                            for cc in 0..c {
                                let j = j0 + cc;
                                x.codes[cc] = acts.codes[j * k + v0..].as_ptr();
                                x.d[cc] = acts.d[j * nblk + blk0..].as_ptr();
                                x.bias[cc] = acts.bias[j * nblk + blk0..].as_ptr();
                                x.sx[cc] = acts.sx[j * nblk + blk0..].as_ptr();
                            }
                            res[..r * c].fill(0.0);
                            // SAFETY: r rows and c columns of nb blocks each.
                            unsafe { direct_fn(isa, &f, r, c)(&f, nb, &w, &x, res.as_mut_ptr()) };
                            for q in 0..r {
                                for cc in 0..c {
                                    sums[q * n + j0 + cc] += res[q * c + cc];
                                }
                            }
                        }
                    }
                    for q in 0..r {
                        for j in 0..n {
                            // SAFETY: output column j holds m values; row i + q is this task's.
                            unsafe { *out.0[j].add(i + q) = sums[q * n + j] };
                        }
                    }
                    i += r;
                }
            });
        });
    });
}

/// The portable direct kernel (also compiled for AVX2 below).
///
/// # Safety
/// `w` holds R rows and `x` C columns of `nb` blocks.
#[inline(always)]
unsafe fn direct_generic<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    let qb = f.qb;
    // SAFETY: caller's contract.
    unsafe {
        for r in 0..R {
            let codes = std::slice::from_raw_parts(w.codes.add(r * w.stride), nb * qb);
            for c in 0..C {
                let xs = std::slice::from_raw_parts(x.codes[c], nb * qb);
                let mut acc = 0f32;
                for blk in 0..nb {
                    let u = &codes[blk * qb..blk * qb + qb];
                    let q = &xs[blk * qb..blk * qb + qb];
                    let mut p = 0i32;
                    for (a, b) in u.iter().zip(q) {
                        p += *a as i32 * *b as i32;
                    }
                    p += *x.bias[c].add(blk);
                    let dw = *w.dw.add(r * w.sstride + blk);
                    acc += *x.d[c].add(blk) * dw * p as f32;
                    if f.has_min {
                        acc -= *w.mw.add(r * w.sstride + blk) * *x.sx[c].add(blk);
                    }
                }
                *out.add(r * C + c) += acc;
            }
        }
    }
}

unsafe fn direct_portable<const R: usize, const C: usize>(
    f: &Format,
    nb: usize,
    w: &Decoded,
    x: &ColsQ,
    out: *mut f32,
) {
    // SAFETY: caller's contract.
    unsafe { direct_generic::<R, C>(f, nb, w, x, out) }
}
