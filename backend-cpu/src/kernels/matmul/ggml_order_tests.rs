//! The products ggml sums in one fixed order, bit for bit: every path, on
//! every instruction set and in every layout, against a plain restatement
//! of what ggml's x86 kernels compute for that type (the orders
//! `float::in_ggml_order` and `blocks_in_ggml_order` describe, and the
//! repacked Q4_0 kernels' one float step a block). These are the types
//! whose logits on real models equal llama.cpp's exactly. A `mul_mat_id`'s
//! products take each column as a product of that column alone.

use ggraph_core::quant::{f16_to_f32, f32_to_f16};
use ggraph_core::{DType, quant};

use super::dispatch::gemm as gemm_with;
use super::operands::{Cols, ProductOf, WeightRows};
use crate::kernels::interleave::Interleaved;
use crate::kernels::isa;

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            ((s >> 8) as f32 / (1 << 24) as f32 - 0.5) * 2f32.powi((s % 7) as i32 - 3)
        })
        .collect()
}

/// A column as ggml's Q8_0 quantiser writes it: per 32 values the f16 of
/// `amax / 127`, and the codes `x * (127 / amax)` rounded half to even.
fn q8_0_column(x: &[f32]) -> (Vec<i8>, Vec<f32>) {
    let mut codes = Vec::with_capacity(x.len());
    let mut scales = Vec::new();
    for block in x.chunks_exact(32) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        scales.push(f16_to_f32(f32_to_f16(amax / 127.0)));
        codes.extend(block.iter().map(|v| (v * id).round_ties_even() as i8));
    }
    (codes, scales)
}

fn hsum8(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// ggml's dot of one row of `dtype` (GGUF's bytes) with one column, in the
/// order its x86 kernels sum it for a product of `m` rows and `n`
/// columns.
fn ggml_dot(dtype: DType, row: &[u8], x: &[f32], m: usize, n: usize) -> f32 {
    let k = x.len();
    match dtype {
        DType::F16 => {
            let p: Vec<f32> = (0..k)
                .map(|t| {
                    let w = f16_to_f32(u16::from_le_bytes([row[2 * t], row[2 * t + 1]]));
                    w * f16_to_f32(f32_to_f16(x[t]))
                })
                .collect();
            if n >= 2 && k % 8 == 0 && m % 4 == 0 {
                // tinyBLAS: lane t % 8
                let mut lanes = [0f32; 8];
                for (t, v) in p.iter().enumerate() {
                    lanes[t % 8] += v;
                }
                hsum8(lanes)
            } else {
                // ggml_vec_dot_f16: four accumulators of eight lanes
                let np = k & !31;
                let mut acc = [[0f32; 8]; 4];
                for (t, v) in p[..np].iter().enumerate() {
                    acc[t % 32 / 8][t % 8] += v;
                }
                let s: [f32; 8] =
                    std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
                let mut sum =
                    (((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))) as f64;
                for v in &p[np..] {
                    sum += *v as f64;
                }
                sum as f32
            }
        }
        DType::Q8_0 => {
            let (codes, scales) = q8_0_column(x);
            let mut lanes = [0f32; 8];
            for (b, block) in row.chunks_exact(34).enumerate() {
                let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]])) * scales[b];
                for (l, lane) in lanes.iter_mut().enumerate() {
                    let p: i32 = (4 * l..4 * l + 4)
                        .map(|v| block[2 + v] as i8 as i32 * codes[32 * b + v] as i32)
                        .sum();
                    *lane = d.mul_add(p as f32, *lane);
                }
            }
            hsum8(lanes)
        }
        DType::Q4_0 | DType::IQ4_NL => {
            let (codes, scales) = q8_0_column(x);
            let code = |block: &[u8], v: usize| {
                let byte = block[2 + v % 16];
                let nibble = if v < 16 { byte & 15 } else { byte >> 4 };
                if dtype == DType::IQ4_NL {
                    ggraph_core::quant::IQ4_VALUES[nibble as usize] as i32
                } else {
                    nibble as i32 - 8
                }
            };
            if m % 8 == 0 {
                // the repacked kernels: a block's whole sum, one step
                let mut acc = 0f32;
                for (b, block) in row.chunks_exact(18).enumerate() {
                    let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]])) * scales[b];
                    let p: i32 = (0..32)
                        .map(|v| code(block, v) * codes[32 * b + v] as i32)
                        .sum();
                    acc = (p as f32).mul_add(d, acc);
                }
                acc
            } else {
                // ggml's rows: eight lanes, as Q8_0's
                let mut lanes = [0f32; 8];
                for (b, block) in row.chunks_exact(18).enumerate() {
                    let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]])) * scales[b];
                    for (l, lane) in lanes.iter_mut().enumerate() {
                        let p: i32 = (4 * l..4 * l + 4)
                            .map(|v| code(block, v) * codes[32 * b + v] as i32)
                            .sum();
                        *lane = d.mul_add(p as f32, *lane);
                    }
                }
                hsum8(lanes)
            }
        }
        DType::MXFP4 => {
            let (codes, scales) = q8_0_column(x);
            let blocks: Vec<(f32, [i32; 8])> = row
                .chunks_exact(17)
                .enumerate()
                .map(|(b, block)| {
                    let d = scales[b] * quant::e8m0_to_f32_half(block[0]);
                    let lanes = std::array::from_fn(|l| {
                        (4 * l..4 * l + 4)
                            .map(|v| {
                                let byte = block[1 + v % 16];
                                let nibble = if v < 16 { byte & 15 } else { byte >> 4 };
                                quant::MXFP4_VALUES[nibble as usize] as i32
                                    * codes[32 * b + v] as i32
                            })
                            .sum()
                    });
                    (d, lanes)
                })
                .collect();
            if m % 8 == 0 {
                // the repacked GEMV and GEMM: a block's whole sum, one step
                blocks.iter().fold(0f32, |acc, (d, l)| {
                    (l.iter().sum::<i32>() as f32).mul_add(*d, acc)
                })
            } else {
                // ggml_vec_dot_mxfp4_q8_0: pairs of blocks, the even
                // blocks' lanes in one set and the odd in another; an odd
                // last block's whole sum added after the lanes
                let pairs = blocks.len() / 2 * 2;
                let mut sets = [[0f32; 8]; 2];
                for (b, (d, l)) in blocks[..pairs].iter().enumerate() {
                    for (lane, p) in sets[b % 2].iter_mut().zip(l) {
                        *lane = d.mul_add(*p as f32, *lane);
                    }
                }
                let sum = hsum8(std::array::from_fn(|t| sets[0][t] + sets[1][t]));
                match blocks.get(pairs) {
                    Some((d, l)) => (l.iter().sum::<i32>() as f32).mul_add(*d, sum),
                    None => sum,
                }
            }
        }
        _ => unreachable!("no fixed order for {dtype}"),
    }
}

/// `m` rows of `dtype` and `n` columns of `k` values, and ggml's
/// products of them, `[column][row]`.
fn case(dtype: DType, m: usize, n: usize, k: usize) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let w = values(m * k, (m * 31 + k) as u32);
    let x = values(n * k, (n * 7 + k) as u32);
    case_of(dtype, m, n, k, w, x)
}

/// As [`case`] for the weights `w` and the columns `x`.
fn case_of(
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    w: Vec<f32>,
    x: Vec<f32>,
) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let bytes = quant::quantize(dtype, &w).unwrap();
    let rb = bytes.len() / m;
    let want = (0..n * m)
        .map(|o| {
            let (j, i) = (o / m, o % m);
            ggml_dot(
                dtype,
                &bytes[i * rb..(i + 1) * rb],
                &x[j * k..(j + 1) * k],
                m,
                n,
            )
        })
        .collect();
    (bytes, x, want)
}

/// Where `got` and `want` are not the same bits: the case, how many
/// outputs differ and the first of them.
fn differences(got: &[f32], want: &[f32], case: String) -> Option<String> {
    let differ = got
        .iter()
        .zip(want)
        .filter(|(g, w)| g.to_bits() != w.to_bits())
        .count();
    let i = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits())?;
    Some(format!(
        "{case}: {differ} of {} differ, first [{i}] {:e} against {:e}",
        got.len(),
        got[i],
        want[i]
    ))
}

fn assert_none(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Shapes on both sides of every path's thresholds: one column, a few,
/// more than the dot paths take; rows not a multiple of four or eight;
/// `k` short, long, and (for F16) not a multiple of 8 or 32.
fn shapes(dtype: DType) -> Vec<(usize, usize, usize)> {
    let ks: &[usize] = match dtype {
        DType::F16 => &[8, 64, 100, 256, 1100],
        _ => &[32, 96, 2112],
    };
    let mn = [
        (1, 1),
        (37, 1),
        (36, 2),
        (33, 3),
        (40, 4),
        (29, 5),
        (64, 9),
        (67, 29),
        (300, 12),
    ];
    ks.iter()
        .flat_map(|&k| mn.iter().map(move |&(m, n)| (m, n, k)))
        .collect()
}

#[test]
fn every_path_gives_ggml_s_bits() {
    let mut failures = Vec::new();
    for isa in isa::all_supported() {
        for dtype in [
            DType::F16,
            DType::Q8_0,
            DType::Q4_0,
            DType::IQ4_NL,
            DType::MXFP4,
        ] {
            for (m, n, k) in shapes(dtype) {
                let (bytes, x, want) = case(dtype, m, n, k);
                let mut got = vec![f32::NAN; n * m];
                let a = WeightRows {
                    ptr: bytes.as_ptr(),
                    stride: bytes.len() / m,
                    elem_stride: dtype.type_size(),
                    dtype,
                    k,
                };
                let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
                let out = Cols((0..n).map(|j| got[j * m..].as_mut_ptr()).collect());
                gemm_with(isa, ProductOf::MulMat, a, m, &b, &out);
                let case = format!("{isa:?} {dtype} m={m} n={n} k={k}");
                failures.extend(differences(&got, &want, case));
            }
        }
    }
    assert_none(failures);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn every_repacked_kernel_gives_ggml_s_bits() {
    use super::interleaved_gemm::{Kernels, gemm_with as interleaved_with};
    let mut failures = Vec::new();
    let kernels = Kernels::ALL
        .into_iter()
        .filter(|k| k.isa() <= isa::detected());
    for (kernels, layout) in kernels.flat_map(|k| {
        [
            (k, Interleaved::Q4_0),
            (k, Interleaved::IQ4_NL),
            (k, Interleaved::MXFP4),
        ]
    }) {
        let dtype = layout.dtype();
        // past the VNNI panel's chunk of 4096 values too; and blocks whose
        // sums are at their largest, where `sum * dw` is not exact in f32
        let extreme = |m: usize, n: usize, k: usize| {
            let w = (0..m * k)
                .map(|i| if i % 32 == 0 { -1.0 } else { 0.9 })
                .collect();
            case_of(dtype, m, n, k, w, vec![1.0; n * k])
        };
        let cases = shapes(dtype)
            .into_iter()
            .chain([(40, 12, 4608), (16, 3, 4608)])
            .map(|(m, n, k)| (m.div_ceil(8) * 8, n, k, false))
            .chain([
                (40, 1, 2112, true),
                (40, 5, 2112, true),
                (40, 12, 4608, true),
            ]);
        for (m, n, k, at_most) in cases {
            let (bytes, x, want) = if at_most {
                extreme(m, n, k)
            } else {
                case(dtype, m, n, k)
            };
            let mut laid = vec![0u8; bytes.len()];
            layout.pack(&bytes, &mut laid, bytes.len() / m);
            let mut got = vec![f32::NAN; n * m];
            let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
            let out = Cols((0..n).map(|j| got[j * m..].as_mut_ptr()).collect());
            // SAFETY: the processor has the kernels' instruction set; m
            // rows (whole groups) of k values, columns of k values.
            unsafe {
                interleaved_with(
                    kernels,
                    ProductOf::MulMat,
                    layout,
                    laid.as_ptr(),
                    k,
                    m,
                    &b,
                    &out,
                )
            };
            failures.extend(differences(
                &got,
                &want,
                format!("{kernels:?} {dtype} m={m} n={n} k={k} extreme {at_most}"),
            ));
        }
    }
    assert_none(failures);
}

/// The interleaved Q4_K kernels against the K-quant restatement of ggml's
/// repacked `q4_K_8x8` steps (`kquants_in_ggml_order`'s portable
/// kernels on GGUF's rows): a super-block a step for ggml's GEMV's
/// columns, a pair of sub-blocks for its GEMM's.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_interleaved_q4_k_kernel_gives_ggml_s_bits() {
    use super::interleaved_gemm::{Kernels, gemm_with as interleaved_with};
    use super::kquants_in_ggml_order::gemm as in_order;
    let mut failures = Vec::new();
    let layout = Interleaved::Q4_K;
    let dtype = DType::Q4_K;
    for kernels in Kernels::ALL
        .into_iter()
        .filter(|k| k.isa() <= isa::detected())
    {
        for (m, n, k) in [
            (8, 1, 256),
            (40, 2, 2304),
            (16, 3, 768),
            (24, 4, 512),
            (16, 6, 4608),
            (32, 9, 1024),
            (136, 12, 512),
        ] {
            let w = values(m * k, (m * 31 + k) as u32);
            let x = values(n * k, (n * 7 + k) as u32);
            let bytes = quant::quantize(dtype, &w).unwrap();
            let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
            let mut want = vec![f32::NAN; n * m];
            let out = Cols((0..n).map(|j| want[j * m..].as_mut_ptr()).collect());
            let rows = WeightRows {
                ptr: bytes.as_ptr(),
                stride: bytes.len() / m,
                elem_stride: dtype.type_size(),
                dtype,
                k,
            };
            in_order(isa::Isa::Portable, ProductOf::MulMat, rows, m, &b, &out);
            let mut laid = vec![0u8; bytes.len()];
            layout.pack(&bytes, &mut laid, bytes.len() / m);
            let mut got = vec![f32::NAN; n * m];
            let out = Cols((0..n).map(|j| got[j * m..].as_mut_ptr()).collect());
            // SAFETY: the processor has the kernels' instruction set; m
            // rows (whole groups) of k values, columns of k values.
            unsafe {
                interleaved_with(
                    kernels,
                    ProductOf::MulMat,
                    layout,
                    laid.as_ptr(),
                    k,
                    m,
                    &b,
                    &out,
                )
            };
            failures.extend(differences(
                &got,
                &want,
                format!("{kernels:?} Q4_K m={m} n={n} k={k}"),
            ));
        }
    }
    assert_none(failures);
}

/// The matrices ggml repacks, in GGUF's rows (further apart than a row,
/// as in a view of a wider matrix), which take the interleaved layout's
/// kernels a group at a time from six or eight columns on: the portable
/// kernels' bits (which the tests above hold to ggml's) on every
/// instruction set, for `mul_mat` and `mul_mat_id`.
#[test]
fn rows_interleaved_in_scratch_give_the_portable_bits() {
    let mut failures = Vec::new();
    for dtype in [DType::Q4_K, DType::Q4_0, DType::IQ4_NL, DType::MXFP4] {
        let shapes = [
            (8, 8, 256),
            (24, 6, 768),
            (40, 9, 2304),
            (136, 12, 512),
            (16, 17, 4608),
        ];
        for (m, n, k) in shapes {
            let w = values(m * k, (m * 13 + k) as u32);
            let x = values(n * k, (n * 5 + k) as u32);
            let plain = weight_bytes(dtype, &w);
            let row_bytes = plain.len() / m;
            let stride = row_bytes + 2 * dtype.type_size();
            let mut bytes = vec![0xa5u8; m * stride];
            for (dst, src) in bytes
                .chunks_exact_mut(stride)
                .zip(plain.chunks_exact(row_bytes))
            {
                dst[..row_bytes].copy_from_slice(src);
            }
            let a = WeightRows {
                ptr: bytes.as_ptr(),
                stride,
                elem_stride: dtype.type_size(),
                dtype,
                k,
            };
            let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
            for of in [ProductOf::MulMat, ProductOf::MulMatId] {
                let mut want = vec![f32::NAN; n * m];
                let out = Cols((0..n).map(|j| want[j * m..].as_mut_ptr()).collect());
                gemm_with(isa::Isa::Portable, of, a, m, &b, &out);
                for isa in isa::all_supported() {
                    let mut got = vec![f32::NAN; n * m];
                    let out = Cols((0..n).map(|j| got[j * m..].as_mut_ptr()).collect());
                    gemm_with(isa, of, a, m, &b, &out);
                    let case = format!("{isa:?} {of:?} {dtype} m={m} n={n} k={k}");
                    failures.extend(differences(&got, &want, case));
                }
            }
        }
    }
    assert_none(failures);
}

/// Weight rows of `dtype` as bytes: floats as they are, quantised types
/// quantised.
fn weight_bytes(dtype: DType, w: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F32 => w.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => w
            .iter()
            .flat_map(|&v| f32_to_f16(v).to_le_bytes())
            .collect(),
        DType::BF16 => w
            .iter()
            .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
        _ => quant::quantize(dtype, w).unwrap(),
    }
}

/// ggml's `mul_mat_id` takes an expert's columns one at a time (`vec_dot`,
/// or the repacked GEMV), where `mul_mat` takes several together
/// (tinyBLAS, the repacked GEMM), up to the tiled K-quant kernels, which
/// both take from eight columns on: so below eight columns an expert's
/// product equals its columns' products taken alone, on every path.
#[test]
fn a_mul_mat_id_sums_each_column_as_a_product_of_it_alone() {
    let mut failures = Vec::new();
    let types = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q5_0,
        DType::IQ4_NL,
        DType::Q4_1,
        DType::Q5_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_XS,
        DType::MXFP4,
    ];
    for isa in isa::all_supported() {
        for dtype in types {
            for (m, n) in [(16, 2), (32, 5), (8, 7)] {
                let k = 512;
                let w = values(m * k, (m + n) as u32);
                let x = values(n * k, 3 * n as u32);
                let bytes = weight_bytes(dtype, &w);
                let a = WeightRows {
                    ptr: bytes.as_ptr(),
                    stride: bytes.len() / m,
                    elem_stride: dtype.type_size(),
                    dtype,
                    k,
                };
                let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
                let mut got = vec![f32::NAN; n * m];
                let out = Cols((0..n).map(|j| got[j * m..].as_mut_ptr()).collect());
                gemm_with(isa, ProductOf::MulMatId, a, m, &b, &out);
                let mut want = vec![f32::NAN; n * m];
                for j in 0..n {
                    let one = Cols(vec![b.0[j]]);
                    let o = Cols(vec![want[j * m..].as_mut_ptr()]);
                    gemm_with(isa, ProductOf::MulMat, a, m, &one, &o);
                }
                let case = format!("{isa:?} {dtype} m={m} n={n}");
                failures.extend(differences(&got, &want, case));
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        use super::interleaved_gemm::{Kernels, gemm_with as interleaved_with};
        for kernels in Kernels::ALL
            .into_iter()
            .filter(|k| k.isa() <= isa::detected())
        {
            for layout in [
                Interleaved::Q4_0,
                Interleaved::IQ4_NL,
                Interleaved::Q4_K,
                Interleaved::MXFP4,
            ] {
                let dtype = layout.dtype();
                let (m, n, k) = (16, 6, 512);
                let w = values(m * k, 11);
                let x = values(n * k, 12);
                let bytes = quant::quantize(dtype, &w).unwrap();
                let mut laid = vec![0u8; bytes.len()];
                layout.pack(&bytes, &mut laid, bytes.len() / m);
                let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
                let mut got = vec![f32::NAN; n * m];
                let out = Cols((0..n).map(|j| got[j * m..].as_mut_ptr()).collect());
                let of = ProductOf::MulMatId;
                // SAFETY: the processor has the kernels' instruction set; m
                // rows (whole groups) of k values, columns of k values.
                unsafe { interleaved_with(kernels, of, layout, laid.as_ptr(), k, m, &b, &out) };
                let mut want = vec![f32::NAN; n * m];
                for j in 0..n {
                    let one = Cols(vec![b.0[j]]);
                    let o = Cols(vec![want[j * m..].as_mut_ptr()]);
                    let of = ProductOf::MulMat;
                    // SAFETY: as above.
                    unsafe { interleaved_with(kernels, of, layout, laid.as_ptr(), k, m, &one, &o) };
                }
                let case = format!("{kernels:?} {dtype} interleaved m={m} n={n}");
                failures.extend(differences(&got, &want, case));
            }
        }
    }
    assert_none(failures);
}
