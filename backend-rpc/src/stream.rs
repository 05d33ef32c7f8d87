//! A stream on a server device: a split goes out as one graph, without
//! waiting; events are points in the connection's order. The server runs
//! a connection's commands in order, so nothing here waits for it: a
//! read of its memory (the only way to see a result) waits there by
//! itself, one round trip where waiting first would take two.

use std::any::Any;
use std::sync::Arc;

use ggraph_core::Result;
use ggraph_core::backend::{Event, Stream};
use ggraph_core::ir::{Graph, TensorId};

use crate::connection::Connection;
use crate::graph::serialize;

/// A stream on one device of a server, from `Device::new_stream`.
/// `compute` sends the nodes as one ggml graph and returns without waiting
/// (a graph the server already holds is only named again);
/// `synchronize` checks that the connection the graph went out on is
/// still open, without a round trip ([`Stream::synchronize`] allows it).
/// A graph the server fails closes the connection instead of a reply:
/// the next request reports it.
pub struct RpcStream {
    conn: Arc<Connection>,
    device: u32,
    name: String,
    /// The connection generation of the memory of the last graph sent.
    last: Option<u64>,
}

impl RpcStream {
    pub(crate) fn new(conn: Arc<Connection>, device: u32, name: String) -> RpcStream {
        RpcStream {
            conn,
            device,
            name,
            last: None,
        }
    }
}

/// The point after a graph sent to a server.
pub struct RpcEvent {
    conn: Arc<Connection>,
    /// The generation of the last graph before the event; `None`:
    /// nothing was sent before it.
    generation: Option<u64>,
}

impl Event for RpcEvent {
    fn synchronize(&self) -> Result<()> {
        match self.generation {
            Some(generation) => self.conn.wait(generation),
            None => Ok(()),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Stream for RpcStream {
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        let Some(message) = serialize(&self.conn, self.device, &self.name, graph, nodes)? else {
            return Ok(());
        };
        let _span = tracing::trace_span!(
            "rpc compute",
            device = %self.name,
            nodes = message.n_nodes,
            bytes = message.payload.len()
        )
        .entered();
        self.conn
            .compute(message.generation, self.device, message.payload)?;
        self.last = Some(message.generation);
        Ok(())
    }

    /// A graph lost with its connection is reported once.
    fn synchronize(&mut self) -> Result<()> {
        match self.last.take() {
            Some(generation) => self.conn.wait(generation),
            None => Ok(()),
        }
    }

    fn record_event(&mut self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(RpcEvent {
            conn: self.conn.clone(),
            generation: self.last,
        }))
    }

    /// Work of the same server is already in order; anything else is
    /// waited for here.
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        match event.as_any().downcast_ref::<RpcEvent>() {
            Some(e) if Arc::ptr_eq(&e.conn, &self.conn) => Ok(()),
            _ => event.synchronize(),
        }
    }
}
