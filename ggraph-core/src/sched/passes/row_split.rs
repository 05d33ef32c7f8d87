//! Pass 0, row split: a mul_mat whose weight is split by rows over
//! devices ([`RowSplitBuffer`]) becomes one partial mul_mat per device,
//! each reading its device's rows, and concats that gather the parts in
//! row order on the main device. It runs before the assignment passes, on
//! any backends that run mul_mat and concat; a graph without row-split
//! weights is left as it is.

use std::sync::Arc;

use super::{Assignments, PassContext, UNKNOWN_BUFT};
use crate::alloc::{ROW_SPLIT, RowSplitBuffer};
use crate::error::{Error, Result};
use crate::ir::{Flags, Graph, Op, Tensor, TensorId, contiguous_strides};
use crate::memory::Buffer;
use crate::sched::cause::{Cause, intern};

/// The row split a weight lives in, if any.
fn split_of(graph: &Graph, w: TensorId) -> Option<Arc<dyn Buffer>> {
    let base = graph.base_of(w);
    let data = graph.tensor(base).data.as_ref()?;
    data.buffer
        .as_any()
        .downcast_ref::<RowSplitBuffer>()
        .map(|_| data.buffer.clone())
}

/// What [`rewrite_row_split`] did to a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowSplitRewrite {
    /// How many mul_mats were rewritten.
    pub rewritten: usize,
    /// The concats that gather the partial results, in graph order, each
    /// with the split weight it gathers and the buffer type of the device
    /// that gathers ([`place_gathers`] puts them there; left alone, the
    /// passes would place each beside one of its parts).
    pub gathers: Vec<Gather>,
}

/// One concat that gathers partial products.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gather {
    /// The concat, which has the id of the mul_mat it replaces.
    pub node: TensorId,
    /// The row-split weight whose parts it gathers.
    pub weight: TensorId,
    /// Name of the buffer type of the gathering (main) device.
    pub buffer_type: String,
}

/// Rewrites every mul_mat whose weight is row-split into one partial
/// mul_mat per device (each reading its device's rows) and concats that
/// gather the parts in row order. The gathering concat keeps the original
/// node's id, so consumers are untouched.
pub fn rewrite_row_split(graph: &mut Graph) -> Result<RowSplitRewrite> {
    let reads_a_split = |&n: &TensorId| {
        let t = graph.tensor(n);
        t.op == Op::MulMat && split_of(graph, t.src[0]).is_some()
    };
    if !graph.nodes().iter().any(reads_a_split) {
        return Ok(RowSplitRewrite::default());
    }
    let mut nodes = Vec::with_capacity(graph.nodes().len());
    let mut leafs = graph.leafs().to_vec();
    let mut rewritten = 0;
    let mut gathers = Vec::new();
    for &node in &graph.nodes().to_vec() {
        let t = graph.tensor(node).clone();
        let split = (t.op == Op::MulMat)
            .then(|| split_of(graph, t.src[0]))
            .flatten();
        let Some(buffer) = split else {
            nodes.push(node);
            continue;
        };
        let rs = buffer
            .as_any()
            .downcast_ref::<RowSplitBuffer>()
            .expect("checked by split_of");
        let weight = t.src[0];
        let w = graph.tensor(weight).clone();
        if w.view.is_some() || !w.is_contiguous() || w.ne[2] * w.ne[3] != 1 {
            return Err(Error::Unsupported {
                device: ROW_SPLIT.into(),
                what: format!(
                    "mul_mat on a view or batch of the row-split weight '{}'",
                    w.name
                ),
            });
        }
        let x = t.src[1];
        let mut parts = Vec::new();
        for p in rs.parts() {
            let rows = p.rows.len();
            let ne = [w.ne[0], rows, 1, 1];
            let leaf = graph.push_tensor(Tensor {
                name: format!("{}[{}..{}]", w.name, p.rows.start, p.rows.end).into(),
                dtype: w.dtype,
                ne,
                nb: contiguous_strides(w.dtype, ne),
                op: Op::Leaf,
                src: Default::default(),
                view: None,
                flags: Flags {
                    weight: true,
                    ..Flags::default()
                },
                data: Some(p.data.clone()),
            });
            leafs.push(leaf);
            let out_ne = [rows, t.ne[1], t.ne[2], t.ne[3]];
            let mm = graph.push_tensor(Tensor {
                name: format!("{}@rows{}", graph.display_name(node), p.rows.start).into(),
                dtype: t.dtype,
                ne: out_ne,
                nb: contiguous_strides(t.dtype, out_ne),
                op: Op::MulMat,
                src: [leaf, x].into_iter().collect(),
                view: None,
                flags: Flags::default(),
                data: None,
            });
            nodes.push(mm);
            parts.push((mm, rows));
        }
        // gather: ((p0 ++ p1) ++ p2) ..., the last concat being `node`
        let (mut acc, mut acc_rows) = parts[0];
        for (i, &(p, rows)) in parts.iter().enumerate().skip(1) {
            let ne = [acc_rows + rows, t.ne[1], t.ne[2], t.ne[3]];
            let id = if i + 1 == parts.len() {
                node
            } else {
                graph.push_tensor(Tensor {
                    name: format!("{}@gather{i}", graph.display_name(node)).into(),
                    dtype: t.dtype,
                    ne,
                    nb: contiguous_strides(t.dtype, ne),
                    op: Op::Leaf,
                    src: Default::default(),
                    view: None,
                    flags: Flags::default(),
                    data: None,
                })
            };
            let c = graph.tensor_mut(id);
            c.op = Op::Concat { dim: 0 };
            c.src = [acc, p].into_iter().collect();
            nodes.push(id);
            gathers.push(Gather {
                node: id,
                weight,
                buffer_type: rs.gather_buffer_type().to_string(),
            });
            acc = id;
            acc_rows += rows;
        }
        if parts.len() == 1 {
            // one device holds every row: the node reads that part directly
            let only = graph.tensor(parts[0].0).src[0];
            nodes.pop();
            graph.tensor_mut(node).src[0] = only;
            nodes.push(node);
        }
        rewritten += 1;
    }
    graph.set_nodes(nodes);
    // the split weights themselves are read by no node any more
    let read: std::collections::HashSet<TensorId> = graph
        .nodes()
        .iter()
        .flat_map(|&n| graph.tensor(n).src.clone())
        .collect();
    leafs.retain(|&l| read.contains(&l) || split_of(graph, l).is_none());
    graph.set_leafs(leafs);
    Ok(RowSplitRewrite { rewritten, gathers })
}

/// Puts every gather on the first backend (in priority order) that uses
/// the gathering device's memory and runs concat; a gather no backend
/// takes is left to the other passes.
pub fn place_gathers(ctx: &PassContext, asg: &mut Assignments, rewrite: &RowSplitRewrite) {
    for g in &rewrite.gathers {
        let buft = ctx.bufts.id(&g.buffer_type);
        if buft == UNKNOWN_BUFT {
            continue;
        }
        if let Some(b) = ctx
            .ids()
            .find(|&b| ctx.supports_buft(b, buft) && ctx.supports(b, g.node))
        {
            asg.set(
                g.node,
                b,
                Cause::RowSplitGather {
                    weight: g.weight,
                    buffer_type: intern(&g.buffer_type),
                },
            );
        }
    }
}
