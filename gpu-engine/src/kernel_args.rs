//! The kernels' side of a launch: the tensor struct they take, one
//! parameter value, and the error flags they set (all as in
//! `kernels/ggraph.cu`).

use crate::runtime::DevPtr;

/// A tensor as the kernels take it (`struct Tensor` of ggraph.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KTensor {
    pub data: DevPtr,
    pub ne: [i64; 4],
    pub nb: [i64; 4],
    pub dtype: i32,
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
