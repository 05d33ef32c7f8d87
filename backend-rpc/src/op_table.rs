//! The numbers of ggml's ops per protocol version. `rpc_tensor.op` holds
//! the server build's `enum ggml_op` value, and the patch version changes
//! when ops are inserted, so each version the client speaks has its own
//! table; a server of another version is refused when it connects.

use ggraph_core::ir::{GluOp, UnaryOp};

use crate::protocol::ProtocolVersion;

/// The ggml ops ggraph's IR maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GgmlOp {
    None,
    Add,
    AddId,
    Sub,
    Mul,
    Div,
    Sqr,
    Sqrt,
    SumRows,
    Concat,
    Norm,
    RmsNorm,
    MulMat,
    MulMatId,
    Scale,
    Cpy,
    Cont,
    Reshape,
    View,
    Permute,
    Transpose,
    GetRows,
    SetRows,
    SoftMax,
    Rope,
    ArgSort,
    TopK,
    FlashAttnExt,
    Unary,
    Glu,
    SsmConv,
    SsmScan,
    GatedDeltaNet,
}

/// One protocol version's op, unary-op and GLU numbers.
pub(crate) struct OpTable {
    pub version: ProtocolVersion,
    ops: &'static [(GgmlOp, u32)],
    unary: &'static [(UnaryOp, i32)],
    glu: &'static [(GluOp, i32)],
}

impl OpTable {
    /// The op's number, if this version has the op.
    pub fn op(&self, op: GgmlOp) -> Option<u32> {
        self.ops.iter().find(|(o, _)| *o == op).map(|&(_, n)| n)
    }

    pub fn unary(&self, op: UnaryOp) -> Option<i32> {
        self.unary.iter().find(|(o, _)| *o == op).map(|&(_, n)| n)
    }

    /// The GLU's number (its parameters, as swiglu_oai's, go apart).
    pub fn glu(&self, op: GluOp) -> Option<i32> {
        let kind = std::mem::discriminant(&op);
        self.glu
            .iter()
            .find(|(o, _)| std::mem::discriminant(o) == kind)
            .map(|&(_, n)| n)
    }
}

/// Protocol 7.0.0: ggml with `GGML_OP_COUNT == 101` (llama.cpp as the
/// llama-cpp-python 0.3.36 sdist vendors it).
static V7_0_0: OpTable = OpTable {
    version: ProtocolVersion {
        major: 7,
        minor: 0,
        patch: 0,
    },
    ops: &[
        (GgmlOp::None, 0),
        (GgmlOp::Add, 2),
        (GgmlOp::AddId, 3),
        (GgmlOp::Sub, 6),
        (GgmlOp::Mul, 7),
        (GgmlOp::Div, 8),
        (GgmlOp::Sqr, 9),
        (GgmlOp::Sqrt, 10),
        (GgmlOp::SumRows, 15),
        (GgmlOp::Concat, 22),
        (GgmlOp::Norm, 24),
        (GgmlOp::RmsNorm, 25),
        (GgmlOp::MulMat, 29),
        (GgmlOp::MulMatId, 30),
        (GgmlOp::Scale, 32),
        (GgmlOp::Cpy, 34),
        (GgmlOp::Cont, 35),
        (GgmlOp::Reshape, 36),
        (GgmlOp::View, 37),
        (GgmlOp::Permute, 38),
        (GgmlOp::Transpose, 39),
        (GgmlOp::GetRows, 40),
        (GgmlOp::SetRows, 42),
        (GgmlOp::SoftMax, 46),
        (GgmlOp::Rope, 48),
        (GgmlOp::ArgSort, 69),
        (GgmlOp::TopK, 70),
        (GgmlOp::FlashAttnExt, 74),
        (GgmlOp::SsmConv, 76),
        (GgmlOp::SsmScan, 77),
        (GgmlOp::GatedDeltaNet, 86),
        (GgmlOp::Unary, 91),
        (GgmlOp::Glu, 100),
    ],
    unary: &[
        (UnaryOp::Neg, 2),
        (UnaryOp::Tanh, 4),
        (UnaryOp::Relu, 6),
        (UnaryOp::Sigmoid, 7),
        (UnaryOp::Gelu, 8),
        (UnaryOp::Silu, 10),
        (UnaryOp::Exp, 13),
        (UnaryOp::Softplus, 15),
    ],
    glu: &[
        (GluOp::Geglu, 1),
        (GluOp::Swiglu, 2),
        (GluOp::SWIGLU_OAI, 3),
    ],
};

/// Every version the client speaks, oldest first.
static TABLES: [&OpTable; 1] = [&V7_0_0];

/// The table of exactly this version.
pub(crate) fn table_for(version: ProtocolVersion) -> Option<&'static OpTable> {
    TABLES.iter().copied().find(|t| t.version == version)
}

/// The versions the client speaks, for error messages.
pub(crate) fn known_versions() -> String {
    TABLES
        .iter()
        .map(|t| t.version.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_numbers_every_op_once() {
        for t in TABLES {
            let mut numbers: Vec<u32> = t.ops.iter().map(|&(_, n)| n).collect();
            numbers.sort_unstable();
            numbers.dedup();
            assert_eq!(numbers.len(), t.ops.len(), "{}", t.version);
            for u in UnaryOp::ALL {
                // Sqr and Sqrt are ops of their own in ggml
                let own_op = matches!(u, UnaryOp::Sqr | UnaryOp::Sqrt);
                assert_eq!(t.unary(u).is_none(), own_op, "{u:?}");
            }
        }
        let v = ProtocolVersion {
            major: 7,
            minor: 0,
            patch: 1,
        };
        assert!(table_for(v).is_none());
    }
}
