//! Pass 2, expansion: assignments spread to unassigned neighbours so that
//! chains stay on one backend. GPU-class backends spread first, down the
//! node list then up; then every backend, down then up. Views are skipped:
//! they compute nothing and follow their base later. Last, a node spread
//! down past the end of its backend's run moves to the backend of all its
//! readers when what it reads crosses there anyway (a layer's input norm at
//! a layer-split boundary), so that one tensor crosses instead of two.

use smallvec::SmallVec;

use super::{Assignments, PassContext};
use crate::ir::TensorId;
use crate::sched::cause::{BackendId, Cause, Direction};

fn sweep(
    ctx: &PassContext,
    asg: &mut Assignments,
    order: impl Iterator<Item = TensorId>,
    direction: Direction,
    gpu_phase: bool,
) {
    let mut cur: Option<(BackendId, TensorId)> = None;
    for id in order {
        let t = ctx.graph.tensor(id);
        if t.op.is_view() {
            continue;
        }
        match asg.get(id) {
            Some(b) => {
                let spreads = !gpu_phase || ctx.is_gpu_class(b);
                cur = spreads.then_some((b, id));
            }
            None => {
                let Some((b, from)) = cur else { continue };
                // a node a backend already refused waits for pass 3
                if gpu_phase && asg.refused[id.index()].is_some() {
                    continue;
                }
                if ctx.supports(b, id) {
                    asg.set(
                        id,
                        b,
                        Cause::Expanded {
                            from,
                            direction,
                            gpu_phase,
                        },
                    );
                    cur = Some((b, id));
                } else {
                    asg.refuse(id, b);
                }
            }
        }
    }
}

/// The one backend every reader of `id` runs on, with the first reader;
/// `None` if there is none, readers disagree or one is a view or not
/// placed.
fn readers_backend(
    ctx: &PassContext,
    asg: &Assignments,
    readers: &[TensorId],
) -> Option<(BackendId, TensorId)> {
    let (&first, rest) = readers.split_first()?;
    if ctx.graph.tensor(first).op.is_view() {
        return None;
    }
    let b = asg.get(first)?;
    rest.iter()
        .all(|&r| !ctx.graph.tensor(r).op.is_view() && asg.get(r) == Some(b))
        .then_some((b, first))
}

/// Moves a node from backend A to backend B, the backend of all its readers,
/// where that copies less and splits no more:
/// - the sweeps put it on A by spreading down (nothing ties it to A);
/// - B runs it, and is not the CPU taking work from a GPU;
/// - every source is either read in place by B or read by another node on
///   B (it crosses to B anyway), so its own output no longer has to;
/// - the next node computed is on B: the node joins the run after it
///   instead of starting a new one.
///
/// Nodes are visited last to first, so a chain of such nodes moves whole.
/// The table of readers is built at the first candidate: most graphs
/// have a handful, many (one backend's) none.
fn pull_to_readers(ctx: &PassContext, asg: &mut Assignments) {
    let g = ctx.graph;
    let mut readers: Option<Vec<SmallVec<[TensorId; 2]>>> = None;
    let mut next: Option<BackendId> = None;
    for &id in g.nodes().iter().rev() {
        let t = g.tensor(id);
        if t.op.is_view() {
            continue;
        }
        let pulled = match (asg.cause[id.index()], asg.get(id), next) {
            (
                Some(Cause::Expanded {
                    direction: Direction::Down,
                    ..
                }),
                Some(a),
                Some(after),
            ) if after != a && !t.flags.output => {
                let readers = readers.get_or_insert_with(|| g.consumers());
                readers_backend(ctx, asg, &readers[id.index()]).filter(|&(b, _)| {
                    b == after
                        && (ctx.is_gpu_class(b) || !ctx.is_gpu_class(a))
                        && ctx.supports(b, id)
                        && t.src.iter().all(|&s| {
                            ctx.reads_in_place(b, s, asg)
                                || crosses_anyway(asg, &readers[s.index()], id, b)
                        })
                })
            }
            _ => None,
        };
        if let Some((b, reader)) = pulled {
            asg.set(id, b, Cause::PulledToReaders { reader });
        }
        next = asg.get(id);
    }
}

/// Whether a node other than `node` among `readers` runs on backend `b`.
fn crosses_anyway(asg: &Assignments, readers: &[TensorId], node: TensorId, b: BackendId) -> bool {
    readers.iter().any(|&r| r != node && asg.get(r) == Some(b))
}

/// Runs pass 2: four sweeps over the node list (GPU-class backends down and
/// up, then every backend down and up). Each sweep carries the backend of the
/// last assigned node (in the GPU phase, only a GPU-class one) to the
/// unassigned nodes after it, as long as that backend supports them; a
/// refusal is recorded in [`Assignments::refused`]. Then nodes at a boundary
/// move to their readers' backend where that saves a copy (see
/// `pull_to_readers`).
pub fn expansion(ctx: &PassContext, asg: &mut Assignments) {
    let nodes = ctx.graph.nodes();
    for gpu_phase in [true, false] {
        sweep(ctx, asg, nodes.iter().copied(), Direction::Down, gpu_phase);
        sweep(
            ctx,
            asg,
            nodes.iter().rev().copied(),
            Direction::Up,
            gpu_phase,
        );
    }
    pull_to_readers(ctx, asg);
}
