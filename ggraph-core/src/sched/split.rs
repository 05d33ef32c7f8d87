//! Splits: contiguous runs of nodes on one backend, with the copies they
//! need from other backends.

use std::ops::Range;

use super::cause::BackendId;
use crate::ir::TensorId;

/// A tensor a split reads from another backend, and its copies.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitInput {
    /// The tensor as the graph has it (on its own backend).
    pub source: TensorId,
    /// The transfer node the split's nodes read instead.
    pub copy: TensorId,
    /// With pipeline depth > 1, the memory of each graph copy (the
    /// transfer node is a view of one of them at a time); else empty.
    pub storages: Vec<TensorId>,
    /// Bytes moved per run.
    pub bytes: u64,
}

/// A contiguous run of the scheduled graph's nodes on one backend.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// The backend that computes every node of the split.
    pub backend: BackendId,
    /// Positions in the scheduled graph's node list (transfers first).
    pub nodes: Range<usize>,
    /// The copies made before the split runs, one per tensor it reads from
    /// memory its backend cannot use.
    pub inputs: Vec<SplitInput>,
}

impl Split {
    /// Bytes copied into the split per run, over all its inputs.
    pub fn bytes_copied(&self) -> u64 {
        self.inputs.iter().map(|i| i.bytes).sum()
    }
}
