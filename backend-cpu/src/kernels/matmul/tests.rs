//! Every path against an f64 product of the dequantised weights.

use ggraph_core::{DType, quant};

use super::dispatch::gemm as gemm_with;
use super::operands::{Cols, ProductOf, WeightRows};
use crate::kernels::interleave::Interleaved;
use crate::kernels::isa::{self, Isa};

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Runs `gemm_with(isa, ..)` on an m x k weight matrix of `dtype` and
/// n columns, returning the squared error against an f64 product of
/// the dequantised weights and the f32 activations, relative to the
/// sum of the squared terms (so that a dot product that happens to
/// cancel to near zero does not inflate the figure).
fn gemm_error(isa: Isa, dtype: DType, m: usize, n: usize, k: usize) -> f64 {
    gemm_error_rows_apart(isa, dtype, m, n, k, 0)
}

/// As `gemm_error`, with `pad` bytes between one weight row's end and
/// the next row's start (a view of every row of a wider tensor).
fn gemm_error_rows_apart(isa: Isa, dtype: DType, m: usize, n: usize, k: usize, pad: usize) -> f64 {
    let w = values(m * k, (m * 31 + k) as u32);
    let x = values(n * k, (n * 7 + k) as u32);
    product_error(isa, dtype, &w, &x, m, n, pad)
}

/// The error of `gemm_with(isa, ..)` (as `gemm_error`) for m weight
/// rows `w` quantised to `dtype`, `pad` bytes apart, times the n
/// columns `x`.
fn product_error(
    isa: Isa,
    dtype: DType,
    w: &[f32],
    x: &[f32],
    m: usize,
    n: usize,
    pad: usize,
) -> f64 {
    product_error_of(dtype, w, x, m, n, pad, &|a, m, b, out| {
        gemm_with(isa, ProductOf::MulMat, a, m, b, out)
    })
}

/// A product of m weight rows (the `usize`) and columns into outputs.
type RunRows<'a> = dyn Fn(WeightRows, usize, &Cols<f32>, &Cols<f32>) + 'a;

/// A product of an interleaved matrix of k values a row (the `usize`) and
/// columns into outputs.
#[cfg(target_arch = "x86_64")]
type RunInterleaved<'a> = dyn Fn(*const u8, usize, &Cols<f32>, &Cols<f32>) + 'a;

/// As `product_error`, for the product `run` makes.
fn product_error_of(
    dtype: DType,
    w: &[f32],
    x: &[f32],
    m: usize,
    n: usize,
    pad: usize,
    run: &RunRows<'_>,
) -> f64 {
    let k = w.len() / m;
    let packed = quant::quantize(dtype, w).unwrap();
    let wq = quant::dequantize(dtype, &packed, m * k).unwrap();
    let row_bytes = dtype.row_size(k).unwrap();
    let stride = row_bytes + pad;
    let mut bytes = vec![0xffu8; m * stride];
    for (i, row) in packed.chunks(row_bytes).enumerate() {
        bytes[i * stride..i * stride + row_bytes].copy_from_slice(row);
    }
    let mut y = vec![f32::NAN; n * m];
    let a = WeightRows {
        ptr: bytes.as_ptr(),
        stride,
        elem_stride: dtype.type_size(),
        dtype,
        k,
    };
    let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
    let out = Cols((0..n).map(|j| y[j * m..].as_mut_ptr()).collect());
    run(a, m, &b, &out);
    relative_error(&wq, x, &y, m, n)
}

/// The squared error of the products `y` (`[column][row]`) against an
/// f64 product of the weights `wq` (`[row][k]`) and the columns `x`,
/// relative to the sum of the squared terms.
fn relative_error(wq: &[f32], x: &[f32], y: &[f32], m: usize, n: usize) -> f64 {
    let k = wq.len() / m;
    let (mut num, mut den) = (0f64, 0f64);
    for j in 0..n {
        for i in 0..m {
            let terms = (0..k).map(|t| wq[i * k + t] as f64 * x[j * k + t] as f64);
            let want: f64 = terms.clone().sum();
            num += (y[j * m + i] as f64 - want).powi(2);
            den += terms.map(|v| v * v).sum::<f64>();
        }
    }
    num / den.max(1e-30)
}

/// Every weight type the mul_mat kernels take.
fn weight_types() -> impl Iterator<Item = DType> {
    DType::FLOATS.into_iter().chain(DType::QUANTIZED)
}

/// The largest `gemm_error` a kernel may make with weights of `dtype`:
/// the activations are rounded as ggml rounds them for the type (8-bit
/// codes for quantised weights, F16 or BF16 for those), against an f64
/// product of the unrounded ones.
fn nmse_bound(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-9,
        // half an ulp of 11 and 8 bits, squared
        DType::F16 => 1e-6,
        DType::BF16 => 3e-5,
        _ => 1e-4,
    }
}

#[test]
fn every_kernel_matches_the_reference_product() {
    for isa in isa::all_supported() {
        for dtype in weight_types() {
            let ks: &[usize] = match dtype.block_size() {
                // 1100 and 4200: F16/F32 rows past the dot path's
                // short-row size
                1 => &[3, 67, 300, 1100, 4200],
                32 => &[32, 96, 2112],
                _ => &[256, 2304],
            };
            let bound = nmse_bound(dtype);
            for &k in ks {
                // column counts on both sides of the path thresholds
                for (m, n) in [
                    (1, 1),
                    (37, 1),
                    (33, 3),
                    (31, 4),
                    (29, 5),
                    (41, 6),
                    (19, 7),
                    (70, 8),
                    (45, 9),
                    (67, 29),
                    // row blocks of the integer GEMM, the last partial
                    (300, 12),
                ] {
                    let e = gemm_error(isa, dtype, m, n, k);
                    assert!(
                        e <= bound,
                        "{isa:?} {dtype} m={m} n={n} k={k}: nmse {e:e} > {bound:e}"
                    );
                }
            }
        }
    }
}

#[test]
fn codes_at_their_extremes_do_not_saturate() {
    // every block of 16 values starts at -1 and goes on at +1, so that
    // nearly every weight code is at its largest magnitude; times
    // activations of all ones (codes of 127), the kernels' 16-bit pair
    // sums reach the most each format allows them
    let k = 2304;
    let w: Vec<f32> = (0..45 * k)
        .map(|i| if i % 16 == 0 { -1.0 } else { 1.0 })
        .collect();
    for isa in isa::all_supported() {
        for dtype in DType::QUANTIZED {
            for n in [1, 3, 8, 9, 29] {
                let x = vec![1.0f32; n * k];
                let e = product_error(isa, dtype, &w, &x, 45, n, 0);
                let bound = nmse_bound(dtype);
                assert!(e <= bound, "{isa:?} {dtype} n={n}: nmse {e:e} > {bound:e}");
            }
        }
    }
}

#[test]
fn many_columns_go_in_blocks_that_match_the_reference_product() {
    // 4100 columns of 300 values: past the packed GEMM's block of
    // activations (4 MiB of packed values) for every kernel, so the
    // product is made in two blocks of columns
    for isa in isa::all_supported() {
        for dtype in [DType::F32, DType::F16, DType::Q4_K] {
            let k = if dtype.is_quantized() { 512 } else { 300 };
            let e = gemm_error(isa, dtype, 5, 4100, k);
            let bound = nmse_bound(dtype);
            assert!(e <= bound, "{isa:?} {dtype} k={k}: nmse {e:e} > {bound:e}");
        }
    }
}

#[test]
fn weight_rows_apart_in_memory_match_the_reference_product() {
    // rows further apart than their length (a view of a wider
    // tensor): the one-column row streams, the tiles and the GEMM
    // must step by the stride, never read the gap (filled with 0xff,
    // a NaN for the float types)
    for isa in isa::all_supported() {
        for dtype in weight_types() {
            let ks: &[usize] = match dtype.block_size() {
                1 => &[67, 300, 1100],
                32 => &[96, 2112],
                _ => &[256, 2304],
            };
            let bound = nmse_bound(dtype);
            for &k in ks {
                for pad in [4, 64, 100] {
                    for (m, n) in [(37, 1), (21, 2), (19, 5), (45, 9)] {
                        let e = gemm_error_rows_apart(isa, dtype, m, n, k, pad);
                        assert!(
                            e <= bound,
                            "{isa:?} {dtype} m={m} n={n} k={k} pad={pad}: nmse {e:e} > {bound:e}"
                        );
                    }
                }
            }
        }
    }
}

/// The error of `run` (as `gemm_error`) for the m weight rows `w`
/// quantised and laid out as `layout`, times the n columns `x`; `run`
/// multiplies a matrix of k values a row.
#[cfg(target_arch = "x86_64")]
fn interleaved_error_of(
    layout: Interleaved,
    w: &[f32],
    x: &[f32],
    m: usize,
    n: usize,
    run: &RunInterleaved<'_>,
) -> ggraph_core::Result<f64> {
    let dtype = layout.dtype();
    let k = w.len() / m;
    let packed = quant::quantize(dtype, w)?;
    let wq = quant::dequantize(dtype, &packed, m * k)?;
    let mut laid = vec![0u8; packed.len()];
    layout.pack(&packed, &mut laid, packed.len() / m);
    let mut y = vec![f32::NAN; n * m];
    let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
    let out = Cols((0..n).map(|j| y[j * m..].as_mut_ptr()).collect());
    run(laid.as_ptr(), k, &b, &out);
    Ok(relative_error(&wq, x, &y, m, n))
}

/// The error of the interleaved kernels of `kernels`, as
/// `interleaved_error_of`.
#[cfg(target_arch = "x86_64")]
fn interleaved_error(
    kernels: super::interleaved_gemm::Kernels,
    layout: Interleaved,
    w: &[f32],
    x: &[f32],
    m: usize,
    n: usize,
) -> ggraph_core::Result<f64> {
    interleaved_error_of(layout, w, x, m, n, &|a, k, b, out| {
        // SAFETY: the processor has the kernels' instruction set; the
        // matrix is m rows (whole groups) of k values, the columns k
        // values and the outputs m.
        unsafe {
            super::interleaved_gemm::gemm_with(kernels, ProductOf::MulMat, layout, a, k, m, b, out)
        }
    })
}

#[cfg(target_arch = "x86_64")]
#[test]
fn every_interleaved_kernel_matches_the_reference_product() -> ggraph_core::Result<()> {
    use super::interleaved_gemm::Kernels;
    let layouts = [
        Interleaved::Q4_0,
        Interleaved::Q4_K,
        Interleaved::IQ4_NL,
        Interleaved::MXFP4,
    ];
    for kernels in Kernels::ALL
        .into_iter()
        .filter(|k| k.isa() <= isa::detected())
    {
        for layout in layouts {
            // 4608: past the panel GEMM's chunk of 4096 values
            let ks: &[usize] = match layout {
                Interleaved::Q4_K => &[256, 2304, 4608],
                _ => &[32, 96, 2112, 4608],
            };
            for &k in ks {
                // one, two, tiles of four with a partial last, and past
                // the tiles (the GEMM); row blocks of the tiles' driver
                // and a partial last one
                for (m, n) in [
                    (8, 1),
                    (40, 1),
                    (24, 2),
                    (16, 3),
                    (136, 4),
                    (8, 5),
                    (72, 8),
                    (40, 9),
                ] {
                    let w = values(m * k, (m * 31 + k) as u32);
                    let x = values(n * k, (n * 7 + k) as u32);
                    // the integer sums at their largest
                    let (w_extreme, x_ones) = extremes(m, n, k);
                    for (w, x) in [(&w, &x), (&w_extreme, &x_ones)] {
                        let e = interleaved_error(kernels, layout, w, x, m, n)?;
                        let bound = nmse_bound(layout.dtype());
                        assert!(
                            e <= bound,
                            "{kernels:?} {layout:?} m={m} n={n} k={k}: nmse {e:e} > {bound:e}"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// Weights of nearly every code at its largest magnitude and activations
/// of all ones (as in `codes_at_their_extremes_do_not_saturate`).
fn extremes(m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let w = (0..m * k)
        .map(|i| if i % 16 == 0 { -1.0 } else { 1.0 })
        .collect();
    (w, vec![1.0f32; n * k])
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_panel_gemm_on_amx_tiles_matches_the_reference_product() -> ggraph_core::Result<()> {
    use super::quant_dot::panel::{self, PanelKernel};
    use super::quant_format::format;
    use crate::kernels::amx::Unit;
    // the tile kernel's float work is AVX-512, as the panel's fill
    if isa::detected() < Isa::Avx512Vnni {
        return Ok(());
    }
    let mut kernels = vec![PanelKernel::Amx(Unit::Emulated)];
    if let Some(hw) = crate::kernels::amx::unit() {
        kernels.push(PanelKernel::Amx(Unit::Hardware(hw)));
    }
    for kernel in kernels {
        // the CPU's interleaved layout, whose panels are filled from it
        for layout in [
            Interleaved::Q4_0,
            Interleaved::Q4_K,
            Interleaved::IQ4_NL,
            Interleaved::MXFP4,
        ] {
            let Some(f) = format(layout.dtype()) else {
                continue;
            };
            let bound = nmse_bound(layout.dtype());
            let ks: &[usize] = match layout {
                Interleaved::Q4_K => &[256, 4608],
                _ => &[32, 96, 4608],
            };
            for &k in ks {
                for (m, n) in [(32, 17), (40, 9)] {
                    let w = values(m * k, (m * 31 + k) as u32);
                    let x = values(n * k, (n * 7 + k) as u32);
                    let (w_extreme, x_ones) = extremes(m, n, k);
                    for (w, x) in [(&w, &x), (&w_extreme, &x_ones)] {
                        let e = interleaved_error_of(layout, w, x, m, n, &|a, k, b, out| {
                            // SAFETY: the processor has AVX-512 VNNI; the
                            // matrix is m rows (whole groups) of k values.
                            unsafe {
                                panel::gemm_interleaved_with(kernel, f, layout, a, k, m, b, out)
                            }
                        })?;
                        assert!(
                            e <= bound,
                            "{kernel:?} {layout:?} m={m} n={n} k={k}: nmse {e:e} > {bound:e}"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_bf16_gemm_on_amx_tiles_matches_the_reference_product() {
    use super::float::bf16_tiles;
    use crate::kernels::amx::{self, Unit};
    // the columns are rounded to BF16 (eight significant bits), so the
    // bound is the quantised types', not the float paths'
    let bound = 1e-5;
    let mut units = vec![Unit::Emulated];
    units.extend(amx::bf16_unit().map(Unit::Hardware));
    for unit in units {
        for k in [32, 96, 2048] {
            // one row, a tile of 16 and one more, a full task and a
            // partial last; one column, a group of 16, partial groups
            for (m, n) in [(1, 1), (17, 9), (32, 16), (45, 17), (70, 40)] {
                let w = values(m * k, (m * 31 + k) as u32);
                let x = values(n * k, (n * 7 + k) as u32);
                // a stride with bytes between the rows, as the tiles take
                for pad in [0, 6] {
                    let e = product_error_of(DType::BF16, &w, &x, m, n, pad, &|a, m, b, out| {
                        assert!(bf16_tiles::gemm(unit, a, m, b, out), "the tiles take BF16");
                    });
                    assert!(
                        e <= bound,
                        "{unit:?} m={m} n={n} k={k}: nmse {e:e} > {bound:e}"
                    );
                }
            }
        }
        // rows that are not whole steps of 32 values, and other types, are
        // not taken and not written
        for (dtype, k) in [(DType::BF16, 48), (DType::F16, 64), (DType::F32, 64)] {
            let e = product_error_of(
                dtype,
                &vec![1.0; 2 * k],
                &vec![1.0; k],
                2,
                1,
                0,
                &|a, m, b, out| {
                    assert!(!bf16_tiles::gemm(unit, a, m, b, out), "{dtype} k={k} taken");
                },
            );
            assert!(e.is_nan(), "{dtype} k={k}: the outputs were written");
        }
    }
}

#[test]
fn rows_of_no_blocks_give_zeros() {
    let row = [0u8; 1];
    for isa in isa::all_supported() {
        for dtype in [DType::Q8_0, DType::Q4_1, DType::Q6_K] {
            let a = WeightRows {
                ptr: row.as_ptr(),
                stride: 0,
                elem_stride: dtype.type_size(),
                dtype,
                k: 0,
            };
            let (m, n) = (5, 6);
            let x = [0f32; 1];
            let mut got = vec![f32::NAN; m * n];
            let b = Cols(vec![x.as_ptr() as *mut f32; n]);
            let out = Cols((0..n).map(|j| got[j * m..].as_mut_ptr()).collect());
            gemm_with(isa, ProductOf::MulMat, a, m, &b, &out);
            assert!(got.iter().all(|&v| v == 0.0), "{dtype} {isa:?}: {got:?}");
        }
    }
}
