//! What every path of a product takes: the weight rows and the
//! activation and output columns.

use ggraph_core::DType;

/// Rows of a weight matrix: `m` rows of `k` values, `stride` bytes apart.
#[derive(Clone, Copy)]
pub(crate) struct WeightRows {
    pub ptr: *const u8,
    pub stride: usize,
    /// Bytes between values of a row (the type size when packed).
    pub elem_stride: usize,
    pub dtype: DType,
    pub k: usize,
}

/// The op a product belongs to. ggml picks its kernels, and so the order
/// of its sums, by op as well as by shape: `mul_mat_id` takes each
/// expert's columns one at a time (`vec_dot`, or the repacked GEMV) where
/// `mul_mat` would take several together (tinyBLAS, the repacked GEMM);
/// both take the tiled K-quant kernels from eight columns on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProductOf {
    MulMat,
    /// A `mul_mat` of F32 weights whose F32 columns are not one
    /// contiguous tensor (attention's permuted queries without a cache):
    /// tinyBLAS declines it, and ggml takes each dot with `vec_dot`.
    StridedMulMat,
    MulMatId,
}

/// Column pointers (k-long f32 inputs, m-long f32 outputs).
pub(crate) struct Cols<T>(pub Vec<*mut T>);

// SAFETY: the pointers address buffers alive for the whole call; output
// columns are written by exactly one task each (tiles are disjoint).
unsafe impl<T> Sync for Cols<T> {}
unsafe impl<T> Send for Cols<T> {}
unsafe impl Sync for WeightRows {}
unsafe impl Send for WeightRows {}

impl WeightRows {
    /// Start of row `i` (in bounds for `i` below the row count).
    #[inline]
    pub(crate) fn row(&self, i: usize) -> *const u8 {
        self.ptr.wrapping_add(i * self.stride)
    }
}
