//! Pass 1, weights location: a tensor whose memory (or whose view base's,
//! or whose weight's) already lives in a buffer runs on a backend that owns
//! that buffer type; graph inputs start on the host; with op offload, an op
//! whose weight is in host memory may be lifted to a higher-priority
//! backend when that device's policy says so. What the user placed by hand
//! goes where it was placed; what pass 0 placed (row-split gathers) stays.

use std::collections::HashMap;

use super::{Assignments, BuftId, PassContext};
use crate::error::{Error, Result};
use crate::ir::TensorId;
use crate::sched::cause::{BackendId, Cause};

/// The first backend (in priority order) that uses memory of type `buft`
/// and computes `node`.
fn owner_of(ctx: &PassContext, buft: BuftId, node: TensorId) -> Option<BackendId> {
    ctx.ids()
        .find(|&b| ctx.supports_buft(b, buft) && ctx.supports(b, node))
}

/// A manual placement must still be one the backend can run: it computes
/// the op and uses the memory the tensor already lives in.
fn check_manual(ctx: &PassContext, id: TensorId, b: BackendId) -> Result<()> {
    let name = || ctx.device(b).name().to_string();
    if !ctx.supports(b, id) {
        return Err(Error::Unsupported {
            device: name(),
            what: format!(
                "{} ('{}') placed there by hand: the device does not run it",
                ctx.graph.tensor(id).op.kind().name(),
                ctx.graph.display_name(id)
            ),
        });
    }
    if let Some(buft) = ctx.bound_buft(id)
        && !ctx.supports_buft(b, buft)
    {
        return Err(Error::Unsupported {
            device: name(),
            what: format!(
                "'{}' placed there by hand: its memory is in {}, which the device does not use",
                ctx.graph.display_name(id),
                ctx.bound_buft_name(id)
            ),
        });
    }
    Ok(())
}

/// Runs pass 1 over every leaf and node, in that order; `manual` holds the
/// user's placements. Errors with [`Error::Unsupported`] when a manual
/// placement's device does not run the op or use the tensor's memory, or
/// when a tensor's memory is of a type no backend of the scheduler uses (or
/// none that does runs its op).
pub fn weights_location(
    ctx: &PassContext,
    asg: &mut Assignments,
    manual: &HashMap<TensorId, BackendId>,
) -> Result<()> {
    let g = ctx.graph;
    for &id in g.leafs().iter().chain(g.nodes()) {
        if let Some(&b) = (!manual.is_empty()).then(|| manual.get(&id)).flatten() {
            check_manual(ctx, id, b)?;
            asg.set(id, b, Cause::Manual);
            continue;
        }
        if asg.get(id).is_some() {
            continue;
        }
        let t = g.tensor(id);
        if let Some(buft) = ctx.bound_buft(id) {
            let Some(b) = owner_of(ctx, buft, id) else {
                let reachable = ctx.ids().any(|b| ctx.supports_buft(b, buft));
                let buft = ctx.bound_buft_name(id);
                return Err(Error::Unsupported {
                    device: buft.clone(),
                    what: if reachable {
                        format!(
                            "{} ('{}'): its memory is in {buft}, and no backend that uses that memory runs the op",
                            t.op.label(),
                            g.display_name(id)
                        )
                    } else {
                        format!(
                            "tensor '{}': its memory is in {buft}, which no backend of this scheduler uses",
                            g.display_name(id)
                        )
                    },
                });
            };
            let buffer_type = ctx.bufts.name(buft);
            let cause = match t.view {
                Some(v) if t.data.is_none() => Cause::ViewOfAllocated {
                    base: v.base,
                    buffer_type,
                },
                _ => Cause::Allocated { buffer_type },
            };
            asg.set(id, b, cause);
            continue;
        }
        if t.flags.input {
            asg.set(id, ctx.host, Cause::GraphInput);
            continue;
        }
        if t.op.is_noop() {
            continue;
        }
        // the first source that is a weight decides
        for &s in &t.src {
            if !g.tensor(g.base_of(s)).flags.weight {
                continue;
            }
            let Some(buft) = ctx.bound_buft(s) else {
                continue;
            };
            let home = ctx.ids().find(|&b| ctx.supports_buft(b, buft));
            let Some(home) = home else { break };
            if ctx.is_host_buft(buft) {
                let lifted = ctx.ids().take_while(|&b| b < home).find(|&b| {
                    ctx.backends[b.index()].op_offload
                        && ctx.supports(b, id)
                        && ctx.offload.offload(ctx.device(b), g, id, s)
                });
                if let Some(b) = lifted {
                    asg.set(
                        id,
                        b,
                        Cause::OpOffload {
                            weight: s,
                            policy: ctx.offload_name,
                        },
                    );
                    break;
                }
            }
            if ctx.supports(home, id) {
                asg.set(
                    id,
                    home,
                    Cause::WeightSource {
                        weight: s,
                        buffer_type: ctx.bufts.name(buft),
                    },
                );
            } else {
                asg.refuse(id, home);
            }
            break;
        }
    }
    Ok(())
}
