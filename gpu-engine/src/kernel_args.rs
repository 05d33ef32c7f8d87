//! The kernels' side of a launch: the tensor struct they take, one
//! parameter value, and the error flags they set (all as in
//! `kernels/ggraph.cu`).

use crate::runtime::DevPtr;

/// A tensor as the kernels take it (`struct Tensor` of ggraph.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KTensor {
    /// Device address of the tensor's first byte (its buffer's address
    /// plus its offset).
    pub data: DevPtr,
    /// Elements per dimension, `ne[0]` innermost, as ggml's `ne`.
    pub ne: [i64; 4],
    /// Stride of each dimension in bytes, as ggml's `nb`; for block
    /// quantised types `nb[0]` is the block size in bytes.
    pub nb: [i64; 4],
    /// ggml's type id of the elements (`DType::ggml_id`).
    pub dtype: i32,
    /// Zero: pads the struct to a multiple of 8 bytes, as in ggraph.cu.
    pub pad: i32,
}

/// One kernel parameter, by value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    T(KTensor),
    I(i32),
    F(f32),
    P(DevPtr),
}

/// Flags of the error word kernels set on bad indices (`ERR_*` of
/// ggraph.cu), with the op each names.
pub const ERR_GET_ROWS: i32 = 1;
pub const ERR_SET_ROWS: i32 = 2;
pub const ERR_MUL_MAT_ID: i32 = 4;
pub const ERR_SSM_SCAN: i32 = 8;
pub const ERR_ADD_ID: i32 = 16;
