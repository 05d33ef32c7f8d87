//! A device of a server: its memory, buffer type and streams, and the
//! ops it takes.

use std::sync::{Arc, Mutex};

use ggraph_core::Result;
use ggraph_core::backend::{BufferType, Device, DeviceKind, MemoryInfo, MemorySource, Stream};
use ggraph_core::ir::{Graph, TensorId};

use crate::buffer::RpcBufferType;
use crate::connection::{Connection, RpcOptions, Traffic, server_error};
use crate::protocol::{Command, ProtocolVersion};
use crate::stream::RpcStream;
use crate::supports::supports;

/// More devices than any server has: a larger count is a broken reply.
const MAX_DEVICES: u32 = 256;

/// One device of a `ggml-rpc-server`, named `rpc:HOST:PORT:N`.
pub struct RpcDevice {
    conn: Arc<Connection>,
    index: u32,
    name: String,
    buffer_type: Arc<RpcBufferType>,
    /// The last memory figures read, for when the server cannot be asked.
    memory: Mutex<MemoryInfo>,
}

impl RpcDevice {
    /// Every device of the server at `endpoint` (`HOST:PORT`).
    pub fn connect(endpoint: &str, options: RpcOptions) -> Result<Vec<Arc<RpcDevice>>> {
        let conn = Connection::shared(endpoint, options)?;
        let [a, b, c, d]: [u8; 4] = conn.query(None, Command::DeviceCount, &[])?;
        let count = u32::from_le_bytes([a, b, c, d]);
        if count > MAX_DEVICES {
            return Err(server_error(
                endpoint,
                format!("the server claims {count} devices"),
            ));
        }
        (0..count)
            .map(|index| {
                let dev = index.to_le_bytes();
                let alignment =
                    u64::from_le_bytes(conn.query(None, Command::GetAlignment, &dev)?);
                let max_size = u64::from_le_bytes(conn.query(None, Command::GetMaxSize, &dev)?);
                if !alignment.is_power_of_two() || alignment > 1 << 20 || max_size == 0 {
                    return Err(server_error(
                        endpoint,
                        format!("device {index}: alignment {alignment}, largest buffer {max_size}"),
                    ));
                }
                let name = format!("rpc:{endpoint}:{index}");
                let buffer_type = Arc::new(RpcBufferType::new(
                    conn.clone(),
                    index,
                    name.clone(),
                    alignment,
                    max_size,
                ));
                let memory = query_memory(&conn, index)?;
                Ok(Arc::new(RpcDevice {
                    conn: conn.clone(),
                    index,
                    name,
                    buffer_type,
                    memory: Mutex::new(memory),
                }))
            })
            .collect()
    }

    /// The server's `HOST:PORT`.
    pub fn endpoint(&self) -> &str {
        self.conn.endpoint()
    }

    /// The device's index on its server.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The protocol version the server speaks.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.conn.table().version
    }

    /// Bytes and graphs exchanged with the server so far (all its
    /// devices: they share one connection).
    pub fn traffic(&self) -> Traffic {
        self.conn.traffic()
    }
}

fn query_memory(conn: &Connection, index: u32) -> Result<MemoryInfo> {
    let reply: [u8; 16] = conn.query(None, Command::GetDeviceMemory, &index.to_le_bytes())?;
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&reply[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let (free_bytes, total_bytes) = (word(0), word(8));
    Ok(MemoryInfo {
        free_bytes: free_bytes.min(total_bytes),
        total_bytes,
        source: MemorySource::Driver,
    })
}

impl Device for RpcDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        format!(
            "device {} of ggml-rpc-server {} (protocol {})",
            self.index,
            self.endpoint(),
            self.protocol_version()
        )
    }

    /// As llama.cpp reports remote devices: GPU-class, whatever serves them.
    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }

    fn memory(&self) -> MemoryInfo {
        let mut last = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        match query_memory(&self.conn, self.index) {
            Ok(m) => *last = m,
            Err(e) => tracing::warn!("{}: memory query failed, last figures used: {e}", self.name),
        }
        last.clone()
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buffer_type.clone()
    }

    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        supports(self.conn.table(), graph, node)
    }

    /// Never: a weight in host memory would cross the network on every
    /// batch.
    fn offload_op(&self, _graph: &Graph, _node: TensorId) -> bool {
        false
    }

    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        Ok(Box::new(RpcStream::new(
            self.conn.clone(),
            self.index,
            self.name.clone(),
        )))
    }
}
