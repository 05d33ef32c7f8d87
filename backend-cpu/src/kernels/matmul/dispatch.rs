//! Which path computes a product.

use ggraph_core::DType;

use super::operands::{Cols, WeightRows};
use super::quant_format::format;
use super::row_streaming::SHORT_ROW_BYTES;
#[cfg(target_arch = "x86_64")]
use super::{block_dot_avx2, block_gemm_avx2, block_matvec, kquant_dot, transposed_matvec};
use super::{dequantized, float, quant_dot};
use crate::kernels::isa::Isa;

/// Column counts up to this use the dot path.
const DOT_MAX_N: usize = 8;
/// Above this many columns, the panel path (where VNNI is available).
const DIRECT_MAX_N: usize = 4;

/// `out[j][i] = dot(a row i, b[j])` for `i < m`, `j < b.len()`, with the
/// kernels of `isa`.
pub(super) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    if a.dtype.is_quantized() {
        quantized(isa, a, m, b, out)
    } else {
        float_gemm(isa, a, m, b, out)
    }
}

/// `out[j][i] = dot(weights row i, b[j])` for quantised weights.
fn quantized(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    if m == 0 || n == 0 {
        return;
    }
    let Some(f) = format(a.dtype).filter(|_| a.elem_stride == a.dtype.type_size()) else {
        dequantized::with_f32_rows(a, m, |rows| float_gemm(isa, rows, m, b, out));
        return;
    };
    // K-quants, few columns: blocks read in place (512-bit kernels with
    // VNNI, 256-bit ones on AVX2)
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 && kquant_dot::takes(&a, n) {
        kquant_dot::gemm(isa, a, m, b, out);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni {
        // short Q4_0 rows eight at a time, long ones streamed
        if n == 1 && transposed_matvec::takes(&a) {
            transposed_matvec::matvec(a, m, b, out);
            return;
        }
        if n == 1 && block_matvec::takes(&a) {
            block_matvec::matvec(a, m, b, out);
            return;
        }
    }
    // without VNNI, Q8_0/Q4_0 with few columns: blocks read in place
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Avx512Vnni && isa >= Isa::Avx2 {
        if block_dot_avx2::takes(&a, n) {
            block_dot_avx2::gemm(a, m, b, out);
            return;
        }
        // many columns: an integer GEMM over interleaved row panels
        if n > DOT_MAX_N && block_gemm_avx2::takes(&a) {
            block_gemm_avx2::gemm(a, m, b, out);
            return;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni && n > DIRECT_MAX_N {
        quant_dot::panel::gemm(f, a, m, b, out);
        return;
    }
    if isa != Isa::Avx512Vnni && n > DOT_MAX_N {
        // below AVX2, many columns go faster through the float GEMM, its
        // weight panels dequantised as they are packed
        float_gemm(isa, a, m, b, out);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni && matches!(f.dtype, DType::Q8_0 | DType::Q4_0) {
        quant_dot::fused::gemm(f, a, m, b, out);
        return;
    }
    quant_dot::direct::gemm(isa, f, a, m, b, out);
}

/// `out[j][i] = sum_k a[i][k] * b[j][k]` for `i < m`, `j < b.len()`.
fn float_gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    if m == 0 || n == 0 {
        return;
    }
    if a.k == 0 {
        for &o in &out.0 {
            // SAFETY: every output column holds m values.
            unsafe { std::slice::from_raw_parts_mut(o, m) }.fill(0.0);
        }
        return;
    }
    let rows_packed = a.elem_stride == a.dtype.type_size();
    if n <= DOT_MAX_N && rows_packed {
        let row_bytes = a.k * a.dtype.type_size();
        let streams = cfg!(target_arch = "x86_64")
            && matches!(a.dtype, DType::F32 | DType::F16 | DType::BF16)
            && (isa >= Isa::Avx512 || (isa == Isa::Avx2 && row_bytes <= SHORT_ROW_BYTES));
        if n == 1 && streams {
            float::row_stream::matvec(isa, a, m, b, out);
        } else {
            float::dot::gemm(isa, a, m, b, out);
        }
    } else {
        float::packed::gemm(isa, a, m, b, out);
    }
}
