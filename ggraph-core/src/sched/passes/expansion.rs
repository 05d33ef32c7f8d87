//! Pass 2, expansion: assignments spread to unassigned neighbours so that
//! chains stay on one backend. GPU-class backends spread first, down the
//! node list then up; then every backend, down then up. Views are skipped:
//! they compute nothing and follow their base later.

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

/// Runs pass 2: four sweeps over the node list (GPU-class backends down and
/// up, then every backend down and up). Each sweep carries the backend of the
/// last assigned node (in the GPU phase, only a GPU-class one) to the
/// unassigned nodes after it, as long as that backend supports them; a
/// refusal is recorded in [`Assignments::refused`].
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
}
