//! Virtual memory for dry runs: buffers with a size and no bytes, so that
//! a graph can be placed and planned (memory estimates, `measure`) without
//! allocating anything.

use std::any::Any;
use std::sync::Arc;

use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::error::{Error, Result};

/// A buffer type whose buffers hold no memory. It takes the name of the
/// buffer type it stands in for, so placement treats it the same.
pub struct VirtualBufferType {
    name: String,
    alignment: u64,
    max_size: u64,
    is_host: bool,
}

impl VirtualBufferType {
    /// A stand-in for `like`.
    pub fn like(like: &dyn BufferType) -> Arc<VirtualBufferType> {
        Arc::new(VirtualBufferType {
            name: like.name().to_string(),
            alignment: like.alignment(),
            max_size: like.max_size(),
            is_host: like.is_host(),
        })
    }

    /// A buffer type named `name` with this alignment and largest buffer (in
    /// bytes), claiming host memory when `is_host`.
    pub fn new(name: &str, alignment: u64, max_size: u64, is_host: bool) -> Arc<VirtualBufferType> {
        Arc::new(VirtualBufferType {
            name: name.to_string(),
            alignment,
            max_size,
            is_host,
        })
    }
}

impl BufferType for VirtualBufferType {
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
        self.is_host
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(VirtualBuffer {
            name: self.name.clone(),
            size,
            usage,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A buffer with a size and no bytes: reads and writes are errors, fills
/// are accepted.
pub struct VirtualBuffer {
    name: String,
    size: u64,
    usage: BufferUsage,
}

impl VirtualBuffer {
    fn refuse(&self) -> Error {
        Error::Unsupported {
            device: self.name.clone(),
            what: "data access on a virtual (dry-run) buffer".into(),
        }
    }
}

impl Buffer for VirtualBuffer {
    fn buffer_type_name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, _offset: u64, _data: &[u8]) -> Result<()> {
        Err(self.refuse())
    }

    fn read(&self, _offset: u64, _out: &mut [u8]) -> Result<()> {
        Err(self.refuse())
    }

    /// Nothing to fill: setting up memory (zeroing a cache, say) works in
    /// a dry run as in a real one.
    fn fill(&self, offset: u64, len: u64, _value: u8) -> Result<()> {
        crate::backend::check_range("fill", offset, len, self.size)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
