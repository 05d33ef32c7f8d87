//! The fused path: the direct path for Q8_0 and Q4_0 on AVX-512 VNNI
//! without a decode pass.

use ggraph_core::DType;

use super::avx512_vnni::{fused_matvec, fused_vnni};
use super::operands::{ACTS, ColsQ, DIRECT_C, DIRECT_R, FusedRows};
use crate::kernels::matmul::activation_quant::{qacts_len, quantize_acts};
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::matmul::quant_format::Format;
use crate::kernels::matmul::row_streaming::{matvec_prefetch, rows_ahead};
use crate::kernels::parallel::par_ranges;
use crate::kernels::scratch::with_scratch;

/// Blocks per chunk of a row on the fused path.
const FUSED_BLOCKS: usize = 64;

/// The direct path for Q8_0 and Q4_0 without a decode pass: the kernel
/// reads codes and scales straight from the weight blocks, two blocks
/// per zmm, so the weights are streamed exactly once.
pub(crate) fn gemm(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
    let lanes = (f.qb / 4) as i32;
    let ts = f.dtype.type_size();
    with_scratch(&ACTS, qacts_len(n, k, f.qb, 1), |buf| {
        let acts = quantize_acts(b, k, f, 1, lanes, buf);
        let acts = &acts;
        let nblk = acts.nblk();
        par_ranges(m, 16, |range| {
            if n == 1 {
                // one column: the kernel runs the task's whole rows (each
                // one long stream) in one call
                let x = ColsQ {
                    codes: [
                        acts.codes.as_ptr(),
                        std::ptr::null(),
                        std::ptr::null(),
                        std::ptr::null(),
                    ],
                    d: [
                        acts.d.as_ptr(),
                        std::ptr::null(),
                        std::ptr::null(),
                        std::ptr::null(),
                    ],
                    bias: [
                        acts.bias.as_ptr(),
                        std::ptr::null(),
                        std::ptr::null(),
                        std::ptr::null(),
                    ],
                    sx: [std::ptr::null(); DIRECT_C],
                };
                let ahead = matvec_prefetch(a.stride);
                // SAFETY: rows range of a hold nblk blocks each, a.stride
                // apart; output column 0 holds m values, these rows this
                // task's alone.
                unsafe {
                    fused_matvec(
                        f.dtype,
                        a.row(range.start),
                        a.stride,
                        range.len(),
                        nblk,
                        &x,
                        ahead,
                        out.0[0].add(range.start),
                    )
                };
                return;
            }
            let fb = FUSED_BLOCKS;
            {
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
                let mut res = [0f32; DIRECT_R * DIRECT_C];
                let mut i = range.start;
                while i < range.end {
                    let r = if range.end - i >= DIRECT_R {
                        DIRECT_R
                    } else {
                        1
                    };
                    sums.fill(0.0);
                    for b0 in (0..nblk).step_by(fb) {
                        let nb = fb.min(nblk - b0);
                        let mut rows = [std::ptr::null::<u8>(); DIRECT_R];
                        for q in 0..r {
                            // SAFETY: row i + q < m, block b0 exists.
                            rows[q] = unsafe { a.row(i + q).add(b0 * ts) };
                        }
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
                                x.codes[cc] = acts.codes[j * k + b0 * f.qb..].as_ptr();
                                x.d[cc] = acts.d[j * nblk + b0..].as_ptr();
                                x.bias[cc] = acts.bias[j * nblk + b0..].as_ptr();
                            }
                            // short whole rows: fetch rows
                            // PREFETCH_BYTES on; else further along the row
                            let ahead = if nb == nblk {
                                rows_ahead(nblk * ts, r * a.stride, 64 * ts)
                            } else {
                                64 * ts
                            };
                            let w = FusedRows { rows, ahead };
                            res[..r * c].fill(0.0);
                            // SAFETY: r rows of nb blocks from b0, c columns.
                            unsafe { fused_fn(f.dtype, r, c)(nb, &w, &x, res.as_mut_ptr()) };
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
            }
        });
    });
}

type FusedFn = unsafe fn(nb: usize, w: &FusedRows, x: &ColsQ, out: *mut f32);

fn fused_fn(dtype: DType, r: usize, c: usize) -> FusedFn {
    macro_rules! by_c {
        ($r:literal, $q4:literal) => {
            match c {
                1 => fused_vnni::<$r, 1, $q4> as FusedFn,
                2 => fused_vnni::<$r, 2, $q4> as FusedFn,
                3 => fused_vnni::<$r, 3, $q4> as FusedFn,
                _ => fused_vnni::<$r, 4, $q4> as FusedFn,
            }
        };
    }
    let q4 = dtype == DType::Q4_0;
    match (r == DIRECT_R, q4) {
        (true, false) => by_c!(4, false),
        (true, true) => by_c!(4, true),
        (false, false) => by_c!(1, false),
        (false, true) => by_c!(1, true),
    }
}
