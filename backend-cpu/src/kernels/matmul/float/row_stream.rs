//! One column over float weight rows: each task streams its rows one
//! after another, each dot summed in registers and stored.

use ggraph_core::DType;

#[cfg(target_arch = "x86_64")]
use super::avx2::row_stream_avx2;
#[cfg(target_arch = "x86_64")]
use super::avx512::rows4_avx512;
#[cfg(target_arch = "x86_64")]
use super::weight_values::{DT_BF16, DT_F16, DT_F32};
use crate::kernels::isa::Isa;
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::parallel::par_ranges;

/// `out[0][i] = dot(a row i, b[0])` for `i < m`, one column of rows of
/// F32, F16 or BF16, with AVX2 or AVX-512.
pub(crate) fn matvec(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let stream = kernel(isa, a.dtype).expect("a row stream for this ISA and weight type");
    par_ranges(m, 16, |range| {
        // SAFETY: the rows of range hold k values each, the column k;
        // the outputs of range are this task's alone.
        unsafe {
            stream(
                a.row(range.start),
                a.stride,
                range.len(),
                a.k,
                b.0[0],
                out.0[0].add(range.start),
            )
        }
    });
}

/// `out[i] = dot(row i, col)` for `i < count`, rows `k` values long from
/// `first`, `stride` bytes apart: one column over a task's consecutive
/// rows, each dot summed and stored by the kernel.
type RowStream = unsafe fn(
    first: *const u8,
    stride: usize,
    count: usize,
    k: usize,
    col: *const f32,
    out: *mut f32,
);

/// The row-stream kernel of this instruction set for rows of this weight
/// dtype: AVX-512, four rows at a time with the dots summed in
/// registers; AVX2, one row at a time.
fn kernel(isa: Isa, dtype: DType) -> Option<RowStream> {
    #[cfg(target_arch = "x86_64")]
    {
        if isa >= Isa::Avx512 {
            return match dtype {
                DType::F32 => Some(rows4_avx512::<DT_F32> as RowStream),
                DType::F16 => Some(rows4_avx512::<DT_F16> as RowStream),
                DType::BF16 => Some(rows4_avx512::<DT_BF16> as RowStream),
                _ => None,
            };
        }
        if isa != Isa::Avx2 {
            return None;
        }
        return match dtype {
            DType::F32 => Some(row_stream_avx2::<DT_F32> as RowStream),
            DType::F16 => Some(row_stream_avx2::<DT_F16> as RowStream),
            DType::BF16 => Some(row_stream_avx2::<DT_BF16> as RowStream),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = (isa, dtype);
        None
    }
}
