//! Pass 4, copy insertion: sources still unplaced take their consumer's
//! backend (views their base's); the node list is cut into splits where the
//! backend changes; each source a split cannot read where it lies gets one
//! transfer per (tensor, backend) — per graph copy with pipelining — and
//! the split's nodes read the transfer instead. A transfer keeps its source
//! alive until it runs. There is no fixed limit on splits or inputs.

use std::fmt::Write;

use smallvec::SmallVec;

use super::{Assignments, PassContext};
use crate::error::{Error, Result};
use crate::ir::{Flags, Graph, Op, Tensor, TensorId, ViewOf};
use crate::sched::cause::{BackendId, Cause};
use crate::sched::split::{Split, SplitInput};

/// The graph as it will run: the user's tensors (same ids) plus transfers,
/// nodes regrouped by split.
pub struct Scheduled {
    /// The rewritten graph; the user's tensor ids keep their meaning.
    pub graph: Graph,
    /// The splits, in execution order; together they cover the node list.
    pub splits: Vec<Split>,
    /// For each split input (by split, then input), the split whose work
    /// must finish before the copy reads its source, if any.
    pub waits: Vec<Vec<Option<usize>>>,
}

/// Places the sources and views that no earlier pass placed.
fn place_remaining(ctx: &PassContext, asg: &mut Assignments) -> Result<()> {
    let g = ctx.graph;
    for &node in g.nodes() {
        let t = g.tensor(node);
        let Some(b) = asg.get(node).or_else(|| {
            // a view node nobody placed follows its base, if that is placed
            t.view.and_then(|v| asg.get(v.base))
        }) else {
            continue;
        };
        for &s in &t.src {
            if asg.get(s).is_some() {
                continue;
            }
            let st = g.tensor(s);
            match st.view {
                Some(v) => {
                    if asg.get(v.base).is_none() {
                        asg.set(v.base, b, Cause::SourceOfConsumer { consumer: node });
                    }
                    let base_b = asg.get(v.base).expect("just placed");
                    asg.set(s, base_b, Cause::ViewOfBase { base: v.base });
                }
                None => asg.set(s, b, Cause::SourceOfConsumer { consumer: node }),
            }
        }
        if asg.get(node).is_none() {
            let base = t.view.expect("only views reach here unplaced").base;
            let bb = asg.get(base).expect("checked above");
            asg.set(node, bb, Cause::ViewOfBase { base });
        }
    }
    // views whose base was placed only now
    for &node in g.nodes() {
        if asg.get(node).is_none() {
            match g
                .tensor(node)
                .view
                .and_then(|v| asg.get(v.base).map(|b| (v.base, b)))
            {
                Some((base, b)) => asg.set(node, b, Cause::ViewOfBase { base }),
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "scheduler: node '{}' ({}) was given no backend",
                        g.display_name(node),
                        g.tensor(node).op.label()
                    )));
                }
            }
        }
    }
    Ok(())
}

struct SplitBuild {
    backend: BackendId,
    /// Its nodes: a run of the graph's node list (splits are contiguous).
    nodes: std::ops::Range<usize>,
    /// Its inputs, one transfer each, in the order they were made.
    inputs: Vec<SplitInput>,
    waits: Vec<Option<usize>>,
}

/// What copy insertion decided, before the graph is changed: the splits,
/// the transfers to add (their ids are fixed in advance) and the sources
/// to rewrite.
pub struct CopyPlan {
    splits: Vec<SplitBuild>,
    /// (source, backend, transfer id, storage ids) in creation order.
    transfers: Vec<(TensorId, BackendId, TensorId, Vec<TensorId>)>,
    /// (node, source slot, transfer) rewrites.
    rewrites: Vec<(TensorId, usize, TensorId)>,
}

/// Runs pass 4 on the graph of `ctx`: places what is left, cuts the node
/// list into splits and plans one transfer per source a split cannot read
/// in place (with `n_copies` storages each when `n_copies > 1`). The graph
/// is not changed; [`apply`] does that. Errors with
/// [`Error::InvalidArgument`] if a node is still unplaced after its views
/// follow their bases (an earlier pass left it).
pub fn copy_insertion(
    ctx: &PassContext,
    asg: &mut Assignments,
    n_copies: usize,
) -> Result<CopyPlan> {
    place_remaining(ctx, asg)?;
    let g = ctx.graph;
    let n = g.n_tensors();
    let mut next_id = n as u32;
    let mut splits: Vec<SplitBuild> = Vec::new();
    let mut transfers = Vec::new();
    let mut rewrites = Vec::new();
    // per source: (backend, transfer, write epoch of the source's base)
    let mut copies: Vec<SmallVec<[(BackendId, TensorId, u64); 1]>> = vec![SmallVec::new(); n];
    let mut epoch = vec![0u64; n];
    // the split that last computed or wrote each base tensor
    let mut last_writer: Vec<Option<usize>> = vec![None; n];

    for (at, &node) in g.nodes().iter().enumerate() {
        let t = g.tensor(node);
        let b = asg.get(node).expect("every node is placed");
        let is_view = t.op.is_view();
        let new_split = match splits.last() {
            None => true,
            Some(cur) => !is_view && cur.backend != b,
        };
        if new_split {
            splits.push(SplitBuild {
                backend: b,
                nodes: at..at,
                inputs: Vec::new(),
                waits: Vec::new(),
            });
        }
        let si = splits.len() - 1;
        let sb = splits[si].backend;
        if !t.op.is_noop() {
            for (k, &s) in t.src.iter().enumerate() {
                if ctx.reads_in_place(sb, s, asg) {
                    continue;
                }
                let base = g.base_of(s);
                let known = copies[s.index()].iter().position(|c| c.0 == sb);
                let copy = match known.map(|i| copies[s.index()][i]) {
                    Some((_, c, e)) if e == epoch[base.index()] => c,
                    _ => {
                        // storages first, then the transfer (see `apply`)
                        let storages: Vec<TensorId> = if n_copies > 1 {
                            (0..n_copies as u32)
                                .map(|c| TensorId(next_id + c))
                                .collect()
                        } else {
                            Vec::new()
                        };
                        next_id += storages.len() as u32;
                        let c = TensorId(next_id);
                        next_id += 1;
                        for &st in &storages {
                            asg.set(st, sb, Cause::InputCopy { source: s });
                        }
                        asg.set(c, sb, Cause::InputCopy { source: s });
                        transfers.push((s, sb, c, storages.clone()));
                        let split = &mut splits[si];
                        split.inputs.push(SplitInput {
                            source: s,
                            copy: c,
                            storages,
                            bytes: g.tensor(s).nbytes() as u64,
                        });
                        split.waits.push(last_writer[base.index()]);
                        let entry = (sb, c, epoch[base.index()]);
                        match known {
                            Some(i) => copies[s.index()][i] = entry,
                            None => copies[s.index()].push(entry),
                        }
                        c
                    }
                };
                rewrites.push((node, k, copy));
            }
        }
        splits[si].nodes.end = at + 1;
        // computing a node, or writing into a base through a view, makes
        // earlier copies of that base stale
        if !t.op.is_noop() {
            let written = g.base_of(node);
            epoch[written.index()] += 1;
            last_writer[written.index()] = Some(si);
        }
    }
    Ok(CopyPlan {
        splits,
        transfers,
        rewrites,
    })
}

/// Applies a copy plan to the graph it was made for: adds the transfers
/// (and storages), points the readers at them, and regroups the nodes by
/// split.
pub fn apply(mut g: Graph, plan: CopyPlan) -> Scheduled {
    let mut leafs = g.leafs().to_vec();
    let added: usize = plan.transfers.iter().map(|t| 1 + t.3.len()).sum();
    g.reserve_tensors(added);
    for (source, backend, id, storages) in &plan.transfers {
        let st = g.tensor(*source);
        let (dtype, ne, nb) = (st.dtype, st.ne, st.nb);
        let mut name = match &*st.name {
            "" => g.display_name(*source),
            named => String::with_capacity(named.len() + 4) + named,
        };
        let _ = write!(name, "@{}", backend.0);
        let layout = |name: &str, op: Op| Tensor {
            name: name.into(),
            dtype,
            ne,
            nb,
            op,
            src: Default::default(),
            view: None,
            flags: Flags::default(),
            data: None,
        };
        for (c, &sid) in storages.iter().enumerate() {
            let mut storage = layout(&format!("{name}#{c}"), Op::Leaf);
            storage.flags.keep = true;
            let pushed = g.push_tensor(storage);
            debug_assert_eq!(pushed, sid);
            leafs.push(sid);
        }
        let mut transfer = layout(&name, Op::Transfer);
        transfer.src.push(*source);
        if let Some(&first) = storages.first() {
            transfer.view = Some(ViewOf {
                base: first,
                offset: 0,
            });
        }
        let pushed = g.push_tensor(transfer);
        debug_assert_eq!(pushed, *id);
    }
    g.set_leafs(leafs);
    for &(node, k, copy) in &plan.rewrites {
        g.tensor_mut(node).src[k] = copy;
    }
    let order = g.nodes();
    let mut nodes = Vec::with_capacity(order.len() + plan.transfers.len());
    let mut out = Vec::with_capacity(plan.splits.len());
    let mut waits = Vec::with_capacity(plan.splits.len());
    for s in plan.splits {
        let start = nodes.len();
        let own = &order[s.nodes.clone()];
        // a view that sits in this split (views do not cut splits) but
        // that a transfer of this split copies goes before the transfer:
        // every node comes after the nodes it reads
        let early = |n: TensorId| g.tensor(n).op.is_view() && feeds(&g, n, &s.inputs);
        nodes.extend(own.iter().copied().filter(|&n| early(n)));
        nodes.extend(s.inputs.iter().map(|i| i.copy));
        nodes.extend(own.iter().copied().filter(|&n| !early(n)));
        out.push(Split {
            backend: s.backend,
            nodes: start..nodes.len(),
            inputs: s.inputs,
        });
        waits.push(s.waits);
    }
    g.set_nodes(nodes);
    Scheduled {
        graph: g,
        splits: out,
        waits,
    }
}

/// Whether view node `view` is the source of one of `inputs`, or what one
/// of them views through a chain of views.
fn feeds(g: &Graph, view: TensorId, inputs: &[SplitInput]) -> bool {
    inputs.iter().any(|input| {
        let mut t = input.source;
        loop {
            if t == view {
                return true;
            }
            let tensor = g.tensor(t);
            match (tensor.op.is_view(), tensor.src.first()) {
                (true, Some(&next)) => t = next,
                _ => return false,
            }
        }
    })
}
