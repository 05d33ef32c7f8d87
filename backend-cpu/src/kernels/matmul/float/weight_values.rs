//! The values of float weight rows: the dtype codes of the const-generic
//! kernels, one value at a time, and a row segment converted to f32.

use ggraph_core::DType;
use ggraph_core::quant::{bf16_to_f32, f16_to_f32};

use crate::kernels::convert;
use crate::kernels::matmul::operands::WeightRows;
use crate::kernels::tensor_ref::read_scalar;

/// Weight dtype codes for the const-generic kernels.
pub(crate) const DT_F32: u8 = 0;
pub(crate) const DT_F16: u8 = 1;
pub(crate) const DT_BF16: u8 = 2;

/// Value `k` of a row of `DT` values at `p`.
///
/// # Safety
/// `p` holds at least `k + 1` values.
#[inline(always)]
pub(crate) unsafe fn scalar_w<const DT: u8>(p: *const u8, k: usize) -> f32 {
    // SAFETY: caller's contract.
    unsafe {
        match DT {
            DT_F32 => *(p as *const f32).add(k),
            DT_F16 => f16_to_f32(*(p as *const u16).add(k)),
            DT_BF16 => bf16_to_f32(*(p as *const u16).add(k)),
            _ => 0.0,
        }
    }
}

/// Converts values `k0..k0 + out.len()` of weight row `i` to f32.
///
/// # Safety
/// Row `i` must be in bounds and `k0 + out.len() <= a.k`; for quantised
/// weights (packed blocks), `k0` and `out.len()` are whole blocks.
pub(crate) unsafe fn load_row_segment(a: &WeightRows, i: usize, k0: usize, out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let len = out.len();
    // SAFETY (all arms): caller's contract; rows span k values at elem_stride.
    unsafe {
        let row = a.ptr.add(i * a.stride);
        if a.dtype.is_quantized() {
            // whole blocks (the packed path's chunks are block-aligned)
            let (bs, ts) = (a.dtype.block_size(), a.dtype.type_size());
            let src = std::slice::from_raw_parts(row.add(k0 / bs * ts), len.div_ceil(bs) * ts);
            let _ = ggraph_core::quant::dequantize_row(a.dtype, src, out);
            return;
        }
        if a.elem_stride == a.dtype.type_size() {
            let p = row.add(k0 * a.elem_stride);
            match a.dtype {
                DType::F32 => out.copy_from_slice(std::slice::from_raw_parts(p as *const f32, len)),
                DType::F16 => {
                    convert::f16_to_f32(std::slice::from_raw_parts(p as *const half::f16, len), out)
                }
                DType::BF16 => std::slice::from_raw_parts(p as *const half::bf16, len)
                    .convert_to_f32_slice(out),
                _ => {
                    for (j, o) in out.iter_mut().enumerate() {
                        *o = read_scalar(a.dtype, p.add(j * a.elem_stride));
                    }
                }
            }
        } else {
            for (j, o) in out.iter_mut().enumerate() {
                *o = read_scalar(a.dtype, row.add((k0 + j) * a.elem_stride));
            }
        }
    }
}
