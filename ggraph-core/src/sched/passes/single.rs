//! Passes 2 to 4 for a scheduler with one backend: there is nothing to
//! spread, upgrade or copy. Every node the first pass left goes to the
//! only backend, which must run it, and the graph is one split.

use super::copy_insertion::Scheduled;
use super::{Assignments, PassContext};
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::sched::cause::{BackendId, Cause};
use crate::sched::split::Split;

/// Places every leaf and node pass 1 left on backend 0, the only one.
/// Errors with [`Error::Unsupported`] on the first op it does not run.
pub fn assign_rest(ctx: &PassContext, asg: &mut Assignments) -> Result<()> {
    let only = BackendId(0);
    let g = ctx.graph;
    for &id in g.leafs().iter().chain(g.nodes()) {
        if asg.get(id).is_some() {
            continue;
        }
        if !ctx.supports(only, id) {
            return Err(Error::Unsupported {
                device: ctx.device(only).name().to_string(),
                what: format!(
                    "{} ('{}'), and it is the scheduler's only backend",
                    g.tensor(id).op.label(),
                    g.display_name(id)
                ),
            });
        }
        asg.set(id, only, Cause::OnlyBackend);
    }
    Ok(())
}

/// The whole node list as one split on backend 0, with no inputs to copy
/// (no split at all for a graph with no nodes).
pub fn one_split(graph: Graph) -> Scheduled {
    let n = graph.nodes().len();
    let (splits, waits) = if n == 0 {
        (Vec::new(), Vec::new())
    } else {
        let split = Split {
            backend: BackendId(0),
            nodes: 0..n,
            inputs: Vec::new(),
        };
        (vec![split], vec![Vec::new()])
    };
    Scheduled {
        graph,
        splits,
        waits,
    }
}
