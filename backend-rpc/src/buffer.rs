//! Remote memory: a buffer type per server device and its buffers. A
//! buffer is the server's allocation, known by its handle and base
//! address; ggraph's allocators hand out offsets in it exactly as in
//! local memory, and a tensor's server address is the base plus its
//! offset.

use std::any::Any;
use std::sync::Arc;

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
    generation: u64,
    /// The server's handle of the buffer.
    remote: u64,
    /// The server address of its first byte.
    base: u64,
    size: u64,
    usage: BufferUsage,
}

impl RpcBuffer {
    fn alloc(buft: &RpcBufferType, size: u64, usage: BufferUsage) -> Result<RpcBuffer> {
        let conn = buft.conn.clone();
        let generation = conn.generation()?;
        // the server gives a zero-size buffer no base address
        let asked = size.max(buft.alignment);
        let mut req = buft.device.to_le_bytes().to_vec();
        req.extend_from_slice(&asked.to_le_bytes());
        let reply: [u8; 16] = conn.query(Some(generation), Command::AllocBuffer, &req)?;
        let remote = u64_at(&reply, 0);
        let remote_size = u64_at(&reply, 8);
        if remote == 0 {
            return Err(Error::OutOfMemory {
                buffer_type: buft.name.clone(),
                requested_bytes: size,
                available_bytes: 0,
            });
        }
        let base: [u8; 8] = conn.query(
            Some(generation),
            Command::BufferGetBase,
            &remote.to_le_bytes(),
        )?;
        let base = u64::from_le_bytes(base);
        let buffer = RpcBuffer {
            conn,
            type_name: buft.name.clone(),
            generation,
            remote,
            base,
            size,
            usage,
        };
        if remote_size < asked || base == 0 || base.checked_add(asked).is_none() {
            // dropping it frees it
            return Err(buffer.conn_error(format!(
                "ALLOC_BUFFER of {asked} bytes answered {remote_size} bytes at base {base:#x}"
            )));
        }
        Ok(buffer)
    }

    /// The server address of byte `offset`.
    pub(crate) fn address(&self, offset: u64) -> u64 {
        self.base + offset
    }

    pub(crate) fn remote(&self) -> u64 {
        self.remote
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn on(&self, conn: &Arc<Connection>) -> bool {
        Arc::ptr_eq(&self.conn, conn)
    }

    fn range(&self, offset: u64, len: usize) -> WireTensor {
        WireTensor::byte_range(self.remote, self.address(offset), len as u32)
    }

    fn conn_error(&self, msg: String) -> Error {
        crate::connection::server_error(self.conn.endpoint(), msg)
    }

    fn set(&self, offset: u64, data: &[u8], cache: bool) -> Result<()> {
        let mut head = Vec::with_capacity(305);
        self.range(offset, data.len()).encode_into(&mut head);
        head.push(cache as u8);
        head.extend_from_slice(&0u64.to_le_bytes());
        self.conn.request(
            Some(self.generation),
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
                .query(Some(self.generation), Command::SetTensorHash, &req)?;
        Ok(hit == 1)
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Drop for RpcBuffer {
    fn drop(&mut self) {
        if let Err(e) = self.conn.free_buffer(self.generation, self.remote) {
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
                Some(self.generation),
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
            let mut req = self.remote.to_le_bytes().to_vec();
            req.push(value);
            return self.conn.request(
                Some(self.generation),
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
                Some(self.generation),
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
        if !src.on(&self.conn) || src.generation != self.generation || len > MAX_CHUNK as u64 {
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
                .query(Some(self.generation), Command::CopyTensor, &req)?;
        Ok(copied == 1)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
