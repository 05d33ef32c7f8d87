//! Remote memory: a buffer type per server device and its buffers. A
//! buffer is the server's allocation, known by its handle and base
//! address; ggraph's allocators hand out offsets in it exactly as in
//! local memory, and a tensor's server address is the base plus its
//! offset.

use std::any::Any;
use std::sync::{Arc, Mutex};

use ggraph_core::backend::{Buffer, BufferType, BufferUsage, check_range};
use ggraph_core::{Error, Result};

use crate::connection::{Connection, Reply};
use crate::protocol::{Command, HASH_THRESHOLD, fnv1a64};
use crate::wire_tensor::WireTensor;

/// Byte ranges travel as I8 tensors whose sizes are u32 on the wire.
const MAX_CHUNK: usize = 1 << 30;

/// The memory of one device of a server.
pub struct RpcBufferType {
    conn: Arc<Connection>,
    device: u32,
    name: String,
    alignment: u64,
    max_size: u64,
}

impl RpcBufferType {
    pub(crate) fn new(
        conn: Arc<Connection>,
        device: u32,
        name: String,
        alignment: u64,
        max_size: u64,
    ) -> RpcBufferType {
        RpcBufferType {
            conn,
            device,
            name,
            alignment,
            max_size,
        }
    }
}

impl BufferType for RpcBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alignment(&self) -> u64 {
        self.alignment
    }

    fn max_size(&self) -> u64 {
        self.max_size
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(RpcBuffer::alloc(self, size, usage)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One allocation on a server.
pub struct RpcBuffer {
    conn: Arc<Connection>,
    type_name: String,
    device: u32,
    alignment: u64,
    size: u64,
    usage: BufferUsage,
    /// Where the memory is now: a restore after the server lost it
    /// allocates it again.
    at: Mutex<Allocation>,
}

/// A buffer's memory on the server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Allocation {
    /// The connection generation it was allocated on.
    pub generation: u64,
    /// The server's handle of the buffer.
    pub remote: u64,
    /// The server address of its first byte.
    base: u64,
}

impl Allocation {
    /// The server address of byte `offset`.
    pub fn address(&self, offset: u64) -> u64 {
        self.base + offset
    }
}

impl RpcBuffer {
    fn alloc(buft: &RpcBufferType, size: u64, usage: BufferUsage) -> Result<RpcBuffer> {
        let at = allocate(&buft.conn, buft.device, &buft.name, size, buft.alignment)?;
        Ok(RpcBuffer {
            conn: buft.conn.clone(),
            type_name: buft.name.clone(),
            device: buft.device,
            alignment: buft.alignment,
            size,
            usage,
            at: Mutex::new(at),
        })
    }

    /// Where the memory is now.
    pub(crate) fn allocation(&self) -> Allocation {
        *self.at.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn generation(&self) -> u64 {
        self.allocation().generation
    }

    pub(crate) fn on(&self, conn: &Arc<Connection>) -> bool {
        Arc::ptr_eq(&self.conn, conn)
    }

    fn range(&self, offset: u64, len: usize) -> WireTensor {
        let at = self.allocation();
        WireTensor::byte_range(at.remote, at.address(offset), len as u32)
    }

    fn set(&self, offset: u64, data: &[u8], cache: bool) -> Result<()> {
        let mut head = Vec::with_capacity(305);
        self.range(offset, data.len()).encode_into(&mut head);
        head.push(cache as u8);
        head.extend_from_slice(&0u64.to_le_bytes());
        self.conn.request(
            Some(self.generation()),
            Command::SetTensor,
            &[&head, data],
            Reply::None,
        )
    }

    /// Whether the server had these bytes in its cache and wrote them.
    fn set_from_cache(&self, offset: u64, data: &[u8]) -> Result<bool> {
        let mut req = Vec::with_capacity(312);
        self.range(offset, data.len()).encode_into(&mut req);
        req.extend_from_slice(&0u64.to_le_bytes());
        req.extend_from_slice(&fnv1a64(data).to_le_bytes());
        let [hit]: [u8; 1] =
            self.conn
                .query(Some(self.generation()), Command::SetTensorHash, &req)?;
        Ok(hit == 1)
    }
}

/// Allocates `size` bytes on `device` of the server.
fn allocate(
    conn: &Connection,
    device: u32,
    type_name: &str,
    size: u64,
    alignment: u64,
) -> Result<Allocation> {
    let generation = conn.generation()?;
    // the server gives a zero-size buffer no base address
    let asked = size.max(alignment);
    let mut req = device.to_le_bytes().to_vec();
    req.extend_from_slice(&asked.to_le_bytes());
    let reply: [u8; 16] = conn.query(Some(generation), Command::AllocBuffer, &req)?;
    let remote = u64_at(&reply, 0);
    let remote_size = u64_at(&reply, 8);
    if remote == 0 {
        return Err(Error::OutOfMemory {
            buffer_type: type_name.to_string(),
            requested_bytes: size,
            available_bytes: 0,
        });
    }
    let base = conn.query(
        Some(generation),
        Command::BufferGetBase,
        &remote.to_le_bytes(),
    );
    let refused = match base {
        Ok(base) => {
            let base = u64::from_le_bytes(base);
            if remote_size >= asked && base != 0 && base.checked_add(asked).is_some() {
                return Ok(Allocation {
                    generation,
                    remote,
                    base,
                });
            }
            crate::connection::server_error(
                conn.endpoint(),
                format!(
                    "ALLOC_BUFFER of {asked} bytes answered {remote_size} bytes at base {base:#x}"
                ),
            )
        }
        Err(e) => e,
    };
    if let Err(e) = conn.free_buffer(generation, remote) {
        tracing::warn!("freeing a refused buffer: {e}");
    }
    Err(refused)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Drop for RpcBuffer {
    fn drop(&mut self) {
        let at = self.allocation();
        if let Err(e) = self.conn.free_buffer(at.generation, at.remote) {
            tracing::warn!("freeing a buffer: {e}");
        }
    }
}

impl Buffer for RpcBuffer {
    fn buffer_type_name(&self) -> &str {
        &self.type_name
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range("rpc write", offset, data.len() as u64, self.size)?;
        let mut at = offset;
        for chunk in data.chunks(MAX_CHUNK) {
            let hashed = self.usage == BufferUsage::Weights && chunk.len() > HASH_THRESHOLD;
            if !(hashed && self.set_from_cache(at, chunk)?) {
                self.set(at, chunk, hashed)?;
            }
            at += chunk.len() as u64;
        }
        Ok(())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_range("rpc read", offset, out.len() as u64, self.size)?;
        let mut at = offset;
        for chunk in out.chunks_mut(MAX_CHUNK) {
            let mut req = Vec::with_capacity(312);
            self.range(at, chunk.len()).encode_into(&mut req);
            req.extend_from_slice(&0u64.to_le_bytes());
            req.extend_from_slice(&(chunk.len() as u64).to_le_bytes());
            at += chunk.len() as u64;
            self.conn.request(
                Some(self.generation()),
                Command::GetTensor,
                &[&req],
                Reply::Into(chunk),
            )?;
        }
        Ok(())
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        check_range("rpc fill", offset, len, self.size)?;
        if offset == 0 && len == self.size {
            let at = self.allocation();
            let mut req = at.remote.to_le_bytes().to_vec();
            req.push(value);
            return self.conn.request(
                Some(at.generation),
                Command::BufferClear,
                &[&req],
                Reply::None,
            );
        }
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let n = (end - at).min(MAX_CHUNK as u64);
            let mut req = Vec::with_capacity(313);
            self.range(at, n as usize).encode_into(&mut req);
            req.extend_from_slice(&0u64.to_le_bytes());
            req.extend_from_slice(&n.to_le_bytes());
            req.push(value);
            self.conn.request(
                Some(self.generation()),
                Command::MemsetTensor,
                &[&req],
                Reply::None,
            )?;
            at += n;
        }
        Ok(())
    }

    /// Copies on the server when the source is a buffer of the same
    /// server; anything else is staged through host memory.
    fn copy_from(
        &self,
        dst_offset: u64,
        src: &dyn Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<bool> {
        let Some(src) = src.as_any().downcast_ref::<RpcBuffer>() else {
            return Ok(false);
        };
        if !src.on(&self.conn) || src.generation() != self.generation() || len > MAX_CHUNK as u64 {
            return Ok(false);
        }
        if len == 0 {
            return Ok(true);
        }
        let mut req = Vec::with_capacity(592);
        src.range(src_offset, len as usize).encode_into(&mut req);
        self.range(dst_offset, len as usize).encode_into(&mut req);
        let [copied]: [u8; 1] =
            self.conn
                .query(Some(self.generation()), Command::CopyTensor, &req)?;
        Ok(copied == 1)
    }

    fn lost(&self) -> bool {
        !self.conn.holds(self.generation())
    }

    /// Allocates the buffer again on the server (connecting again first
    /// if need be); the server freed the old one when the connection
    /// dropped.
    fn restore(&self) -> Result<()> {
        let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        if self.conn.holds(at.generation) {
            return Ok(());
        }
        *at = allocate(
            &self.conn,
            self.device,
            &self.type_name,
            self.size,
            self.alignment,
        )?;
        tracing::debug!(
            "{} bytes of {} allocated again on the server",
            self.size,
            self.type_name
        );
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
