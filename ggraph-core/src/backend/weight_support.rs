//! Which ops that read weights a device runs for each weight type, asked
//! of the device itself on a small graph (what `ggraph check` prints).

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::GraphBuilder;

use super::Device;

/// The ops that read a weight matrix, and whether a device runs each with
/// weights of one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightOps {
    /// `get_rows` (embedding lookups).
    pub get_rows: bool,
    /// `mul_mat` with f32 activations.
    pub mul_mat: bool,
    /// `mul_mat_id` (experts) with f32 activations.
    pub mul_mat_id: bool,
}

impl WeightOps {
    /// Whether the device runs all three.
    pub fn all(self) -> bool {
        self.get_rows && self.mul_mat && self.mul_mat_id
    }
}

/// Asks `device` whether it runs each op of [`WeightOps`] with weights of
/// `dtype` (rows of eight blocks, so any block size fits).
pub fn weight_ops(device: &dyn Device, dtype: DType) -> Result<WeightOps> {
    let k = 8 * dtype.block_size();
    let mut b = GraphBuilder::new();
    let w = b.weight("w", dtype, &[k, 4])?;
    let experts = b.weight("experts", dtype, &[k, 4, 2])?;
    let rows = b.input("rows", DType::I32, &[2])?;
    let x = b.input("x", DType::F32, &[k, 1])?;
    let x3 = b.input("x3", DType::F32, &[k, 1, 1])?;
    let ids = b.input("ids", DType::I32, &[1, 1])?;
    let get_rows = b.get_rows(w, rows)?;
    let mul_mat = b.mul_mat(w, x)?;
    let mul_mat_id = b.mul_mat_id(experts, x3, ids)?;
    for t in [get_rows, mul_mat, mul_mat_id] {
        b.set_output(t)?;
    }
    let graph = b.build();
    Ok(WeightOps {
        get_rows: device.supports_op(&graph, get_rows),
        mul_mat: device.supports_op(&graph, mul_mat),
        mul_mat_id: device.supports_op(&graph, mul_mat_id),
    })
}
