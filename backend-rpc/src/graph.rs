//! A split as the GRAPH_COMPUTE message: its compute nodes in order and
//! every tensor they reach (sources, view bases, leaves), with server
//! addresses for pointers. Everything the server would abort on is
//! checked here first: memory of this server only, in bounds, sizes
//! that fit the wire's u32 fields.

use std::sync::Arc;

use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use ggraph_core::backend::Buffer;

use crate::buffer::RpcBuffer;
use crate::connection::Connection;
use crate::encode::{Encoded, encode};
use crate::protocol::{FLAG_COMPUTE, FLAG_INPUT, FLAG_OUTPUT, WIRE_TENSOR_BYTES};
use crate::wire_tensor::WireTensor;

/// A serialised split, and the connection generation of its memory.
pub(crate) struct GraphMessage {
    pub payload: Vec<u8>,
    pub generation: u64,
    pub n_nodes: usize,
}

/// The wire id of a tensor (0 means "none").
fn wire_id(id: TensorId) -> u64 {
    u64::from(id.0) + 1
}

/// Serialises `nodes` of `graph` for `device`; `None` when no node has
/// anything to compute.
pub(crate) fn serialize(
    conn: &Arc<Connection>,
    device: u32,
    device_name: &str,
    graph: &Graph,
    nodes: &[TensorId],
) -> Result<Option<GraphMessage>> {
    let table = conn.table();
    let unsupported = |id: TensorId| Error::Unsupported {
        device: device_name.to_string(),
        what: format!(
            "{} ('{}')",
            graph.tensor(id).op.label(),
            graph.display_name(id)
        ),
    };
    let compute: Vec<TensorId> = nodes
        .iter()
        .copied()
        .filter(|&n| !graph.tensor(n).op.is_noop())
        .collect();
    if compute.is_empty() {
        return Ok(None);
    }
    // every tensor the nodes reach, once, dependencies first
    let mut encoded: Vec<Option<Encoded>> = Vec::new();
    encoded.resize_with(graph.n_tensors(), || None);
    let mut order = Vec::new();
    let mut stack: Vec<(TensorId, bool)> = compute.iter().rev().map(|&n| (n, false)).collect();
    while let Some((id, expanded)) = stack.pop() {
        graph.get(id)?;
        if expanded {
            order.push(id);
            continue;
        }
        if encoded[id.index()].is_some() {
            continue;
        }
        let e = encode(table, graph, id).ok_or_else(|| unsupported(id))?;
        stack.push((id, true));
        let base = graph.tensor(id).view.map(|v| v.base);
        for &s in e.srcs.iter().flatten().chain(base.iter()).rev() {
            if encoded.get(s.index()).is_some_and(|e| e.is_none()) {
                stack.push((s, false));
            }
        }
        encoded[id.index()] = Some(e);
    }
    let mut is_node = vec![false; graph.n_tensors()];
    for &n in &compute {
        is_node[n.index()] = true;
    }
    let mut generation = None;
    let mut tensors = Vec::with_capacity(order.len() * WIRE_TENSOR_BYTES);
    for &id in &order {
        let Some(e) = encoded[id.index()].take() else {
            continue;
        };
        let t = graph.tensor(id);
        let too_large = || Error::Unsupported {
            device: device_name.to_string(),
            what: format!(
                "'{}' {:?}: sizes past 4 GiB do not fit the RPC protocol",
                graph.display_name(id),
                t.ne
            ),
        };
        let u32_of = |v: usize| u32::try_from(v).map_err(|_| too_large());
        let mut w = WireTensor {
            id: wire_id(id),
            ggml_type: t.dtype.ggml_id(),
            op: e.op,
            op_params: e.params,
            name: t.name.to_string(),
            ..WireTensor::default()
        };
        for d in 0..4 {
            w.ne[d] = u32_of(t.ne[d])?;
            w.nb[d] = u32_of(t.nb[d])?;
        }
        if t.flags.input {
            w.flags |= FLAG_INPUT;
        }
        if t.flags.output {
            w.flags |= FLAG_OUTPUT;
        }
        // ggml skips nodes without the compute flag
        if is_node[id.index()] {
            w.flags |= FLAG_COMPUTE;
        }
        for (slot, s) in w.src.iter_mut().zip(&e.srcs) {
            if let Some(s) = s {
                *slot = wire_id(*s);
            }
        }
        if e.self_as_src1 {
            w.src[1] = wire_id(id);
        }
        if let Some(v) = t.view {
            w.view_src = wire_id(v.base);
            w.view_offs = v.offset as u64;
        }
        match graph.memory_of(id) {
            Some((buffer, offset)) => {
                let remote = buffer
                    .as_any()
                    .downcast_ref::<RpcBuffer>()
                    .filter(|b| b.on(conn))
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "'{}' lives in {} memory, not on {device_name}",
                            graph.display_name(id),
                            buffer.buffer_type_name()
                        ))
                    })?;
                let end = offset.checked_add(t.nbytes() as u64);
                if end.is_none_or(|end| end > remote.size()) {
                    return Err(Error::OutOfBounds {
                        what: "rpc graph tensor",
                        offset,
                        end: end.unwrap_or(u64::MAX),
                        size: remote.size(),
                    });
                }
                let at = remote.allocation();
                match generation {
                    None => generation = Some(at.generation),
                    Some(g) if g != at.generation => {
                        return Err(Error::InvalidArgument(format!(
                            "'{}' is in memory of an earlier connection to {device_name}",
                            graph.display_name(id)
                        )));
                    }
                    Some(_) => {}
                }
                w.buffer = at.remote;
                w.data = at.address(offset);
            }
            // nothing to point at: only an empty tensor may be unbound
            None if t.is_empty() => {}
            None => return Err(Error::Unallocated(graph.display_name(id))),
        }
        w.encode_into(&mut tensors);
    }
    let Some(generation) = generation else {
        return Err(Error::InvalidArgument(format!(
            "a split for {device_name} touches no memory of it"
        )));
    };
    let mut payload = Vec::with_capacity(12 + 8 * compute.len() + tensors.len());
    payload.extend_from_slice(&device.to_le_bytes());
    payload.extend_from_slice(&(compute.len() as u32).to_le_bytes());
    for &n in &compute {
        payload.extend_from_slice(&wire_id(n).to_le_bytes());
    }
    payload.extend_from_slice(&(order.len() as u32).to_le_bytes());
    payload.extend_from_slice(&tensors);
    Ok(Some(GraphMessage {
        payload,
        generation,
        n_nodes: compute.len(),
    }))
}
