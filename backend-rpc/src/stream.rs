//! A stream on a server device: a split goes out as one graph, without
//! waiting; events are points in the connection's order. The server runs
//! a connection's commands in order, so work on the same server needs no
//! waiting at all, and a read of its memory waits by itself.

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
/// `synchronize` waits until the server has finished it. Errors of the
/// server surface there, or on the next request, since the server closes
/// the connection instead of replying.
pub struct RpcStream {
    conn: Arc<Connection>,
    device: u32,
    name: String,
    /// The last graph sent, and the connection generation of its memory.
    last: Option<(u64, u64)>,
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
    /// `None`: nothing was sent before the event.
    ticket: Option<(u64, u64)>,
}

impl Event for RpcEvent {
    fn synchronize(&self) -> Result<()> {
        match self.ticket {
            Some((generation, ticket)) => self.conn.wait(generation, ticket),
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
        let ticket = self
            .conn
            .compute(message.generation, self.device, message.payload)?;
        self.last = Some((message.generation, ticket));
        Ok(())
    }

    /// Waits for the last graph; a graph that failed is reported once.
    fn synchronize(&mut self) -> Result<()> {
        match self.last.take() {
            Some((generation, ticket)) => self.conn.wait(generation, ticket),
            None => Ok(()),
        }
    }

    fn record_event(&mut self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(RpcEvent {
            conn: self.conn.clone(),
            ticket: self.last,
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
