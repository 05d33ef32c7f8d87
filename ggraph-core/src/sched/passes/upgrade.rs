//! Pass 3, upgrade: a node moves to a higher-priority backend that computes
//! in the same memory, supports the op, and reads every source where it
//! lies. Nodes still unassigned go to the backend that supports the op and
//! the most of their sources' memory (a fallback when the backend the
//! rules chose refused the op).

use super::{Assignments, PassContext};
use crate::error::{Error, Result};
use crate::sched::cause::Cause;

/// Runs pass 3 over the non-view nodes. Manual and memory-bound placements
/// stay. Errors with [`Error::Unsupported`] for a node no backend runs.
pub fn upgrade(ctx: &PassContext, asg: &mut Assignments) -> Result<()> {
    let g = ctx.graph;
    for &id in g.nodes() {
        let t = g.tensor(id);
        if t.op.is_view() {
            continue;
        }
        match asg.get(id) {
            Some(cur) => {
                if matches!(
                    asg.cause[id.index()],
                    Some(Cause::Manual | Cause::Allocated { .. } | Cause::ViewOfAllocated { .. })
                ) {
                    continue;
                }
                let up = ctx.ids().take_while(|&b| b < cur).find(|&b| {
                    ctx.same_compute_memory(b, cur)
                        && ctx.supports(b, id)
                        && t.src.iter().all(|&s| ctx.reads_in_place(b, s, asg))
                });
                if let Some(b) = up {
                    asg.set(id, b, Cause::Upgraded { from: cur });
                }
            }
            None => {
                if t.op.is_noop() {
                    continue;
                }
                let of = t.src.len();
                let best = ctx
                    .ids()
                    .filter(|&b| ctx.supports(b, id))
                    .map(|b| {
                        let n = t
                            .src
                            .iter()
                            .filter(|&&s| ctx.reads_in_place(b, s, asg))
                            .count();
                        (b, n)
                    })
                    // most supported sources, then priority
                    .max_by(|(b1, n1), (b2, n2)| n1.cmp(n2).then(b2.cmp(b1)));
                let Some((b, supported)) = best else {
                    return Err(Error::Unsupported {
                        device: "every backend".into(),
                        what: format!("{} ('{}')", t.op.label(), g.display_name(id)),
                    });
                };
                let cause = match asg.refused[id.index()] {
                    Some(refused_by) => Cause::Fallback { refused_by },
                    None => Cause::MostSupportedInputs { supported, of },
                };
                asg.set(id, b, cause);
            }
        }
    }
    Ok(())
}
