//! Quantised weights no integer kernel takes, as f32 rows.

use ggraph_core::DType;

use super::operands::WeightRows;

/// Weights whose blocks are not packed in a row (never made by the graph
/// builder, but representable): dequantise rows to f32 and use the float
/// kernels, through `gemm`.
pub(crate) fn with_f32_rows(a: WeightRows, m: usize, gemm: impl FnOnce(WeightRows)) {
    let k = a.k;
    let mut rows = vec![0f32; m * k];
    let bs = a.dtype.block_size();
    let mut tmp = vec![0f32; bs];
    for i in 0..m {
        for blk in 0..k / bs {
            // SAFETY: block blk of row i is in bounds.
            let src = unsafe {
                std::slice::from_raw_parts(
                    a.ptr.add(i * a.stride + blk * a.elem_stride),
                    a.dtype.type_size(),
                )
            };
            let _ = ggraph_core::quant::dequantize_row(a.dtype, src, &mut tmp);
            rows[i * k + blk * bs..i * k + (blk + 1) * bs].copy_from_slice(&tmp);
        }
    }
    let f = WeightRows {
        ptr: rows.as_ptr() as *const u8,
        stride: k * 4,
        elem_stride: 4,
        dtype: DType::F32,
        k,
    };
    gemm(f);
}
