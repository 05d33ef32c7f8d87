//! CPU kernels, one module per family of ops, and the dispatch from a node
//! to its kernel.
//!
//! Layers, each importing only from those below it: this module
//! (`run_node`); the families of ops (`attention`, `matmul`, `copy`,
//! `elementwise`, `norm`, `rope`, `sort`); what they share (`tensor_ref`,
//! `parallel`, `scratch`, `indices`, `isa`, `amx`, `convert`, `math`, `alibi`).

mod alibi;
#[cfg(target_arch = "x86_64")]
pub(crate) mod amx;
mod attention;
mod convert;
mod copy;
mod delta_net;
mod elementwise;
mod half_dot;
mod indices;
pub(crate) mod interleave;
pub(crate) mod isa;
#[cfg(target_arch = "x86_64")]
mod math;
mod matmul;
mod norm;
mod parallel;
mod rope;
mod scratch;
mod sort;
mod ssm;
pub(crate) mod tensor_ref;

use ggraph_core::Result;
use ggraph_core::ir::{Graph, Op, Tensor, TensorId};
use smallvec::SmallVec;

use crate::kernels::tensor_ref::TRef;

/// A soft_max's or flash_attn_ext's mask and sinks among `src` (the
/// node's sources resolved).
fn extras(t: &Tensor, src: &[TRef]) -> (Option<TRef>, Option<TRef>) {
    let (mask, sinks) = t.mask_and_sinks_at();
    (mask.map(|i| src[i]), sinks.map(|i| src[i]))
}

/// Computes one node. `resolve` gives the memory of any tensor of the graph.
pub(crate) fn run_node(
    graph: &Graph,
    id: TensorId,
    resolve: &dyn Fn(TensorId) -> Result<TRef>,
) -> Result<()> {
    let t = graph.tensor(id);
    if t.op.is_noop() {
        return Ok(());
    }
    let dst = resolve(id)?;
    let src: SmallVec<[TRef; 4]> = t.src.iter().map(|&s| resolve(s)).collect::<Result<_>>()?;
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => Ok(()),
        Op::GetRows => copy::get_rows(dst, src[0], src[1]),
        Op::Binary(op) => {
            elementwise::binary(dst, src[0], src[1], *op);
            Ok(())
        }
        Op::Scale { scale, bias } => {
            elementwise::scale(dst, src[0], *scale, *bias);
            Ok(())
        }
        Op::Unary(u) => {
            elementwise::unary(dst, src[0], *u);
            Ok(())
        }
        Op::Glu { op, swapped } => {
            elementwise::glu(dst, src[0], src.get(1).copied(), *op, *swapped);
            Ok(())
        }
        Op::MulMat => {
            matmul::mul_mat(dst, src[0], src[1]);
            Ok(())
        }
        Op::MulMatId => matmul::mul_mat_id(dst, src[0], src[1], src[2]),
        Op::RmsNorm { eps } => {
            norm::rms_norm(dst, src[0], *eps);
            Ok(())
        }
        Op::Norm { eps } => {
            norm::norm(dst, src[0], *eps);
            Ok(())
        }
        Op::Rope(p) => {
            rope::rope(dst, src[0], src[1], src.get(2).copied(), p);
            Ok(())
        }
        Op::SoftMax {
            scale, max_bias, ..
        } => {
            let (mask, sinks) = extras(t, &src);
            norm::soft_max(dst, src[0], mask, sinks, *scale, *max_bias);
            Ok(())
        }
        Op::AddId => elementwise::add_id(dst, src[0], src[1], src[2]),
        Op::Cpy => {
            copy::copy_values(dst, src[0]);
            Ok(())
        }
        Op::Cont => {
            copy::copy_values(dst, src[0]);
            Ok(())
        }
        Op::SetRows => copy::set_rows(dst, src[1], src[2]),
        Op::Concat { dim } => {
            copy::concat(dst, src[0], src[1], *dim);
            Ok(())
        }
        Op::SumRows => {
            sort::sum_rows(dst, src[0]);
            Ok(())
        }
        Op::SsmConv => {
            ssm::ssm_conv(dst, src[0], src[1]);
            Ok(())
        }
        Op::GatedDeltaNet => {
            delta_net::gated_delta_net(
                dst,
                &delta_net::DeltaNetSources {
                    q: src[0],
                    k: src[1],
                    v: src[2],
                    g: src[3],
                    beta: src[4],
                    state: src[5],
                },
            );
            Ok(())
        }
        Op::SsmScan => ssm::ssm_scan(
            dst,
            &ssm::ScanSources {
                s: src[0],
                x: src[1],
                dt: src[2],
                a: src[3],
                b: src[4],
                c: src[5],
                ids: src[6],
            },
        ),
        Op::ArgSort { order } => {
            sort::argsort(dst, src[0], *order);
            Ok(())
        }
        Op::TopK { k } => {
            sort::top_k(dst, src[0], *k);
            Ok(())
        }
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
            ..
        } => {
            let (mask, sinks) = extras(t, &src);
            let ops = attention::Operands {
                q: src[0],
                k: src[1],
                v: src[2],
                mask,
                sinks,
            };
            attention::flash_attn_ext(dst, ops, *scale, *max_bias, *softcap);
            Ok(())
        }
    }
}
