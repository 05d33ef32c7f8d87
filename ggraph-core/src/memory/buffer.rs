//! The `Buffer` trait: one allocation of some buffer type, and byte
//! copies between any two buffers.

use std::any::Any;
use std::fmt;

use crate::error::{Error, Result};

/// What a buffer holds; used for accounting and reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferUsage {
    Weights,
    Compute,
    Any,
}
/// One allocation of some buffer type. Methods take `&self`: buffers are
/// shared between graphs and streams, and ordering their use is the
/// scheduler's job, as in ggml.
pub trait Buffer: Send + Sync {
    fn buffer_type_name(&self) -> &str;

    fn size(&self) -> u64;

    fn usage(&self) -> BufferUsage;

    fn write(&self, offset: u64, data: &[u8]) -> Result<()>;

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()>;

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()>;

    /// Copies `len` bytes from `src` into this buffer, if this buffer knows
    /// how to reach `src` directly; `Ok(false)` means the caller should
    /// stage through host memory.
    fn copy_from(
        &self,
        _dst_offset: u64,
        _src: &dyn Buffer,
        _src_offset: u64,
        _len: u64,
    ) -> Result<bool> {
        Ok(false)
    }

    /// Start of the memory, for host buffers.
    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn as_any(&self) -> &dyn Any;
}

impl fmt::Debug for dyn Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({}, {} bytes)",
            self.buffer_type_name(),
            self.size()
        )
    }
}

/// Checks that `offset..offset + len` lies in a buffer of `size` bytes.
pub fn check_range(what: &'static str, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds {
            what,
            offset,
            end: offset.saturating_add(len),
            size,
        }),
    }
}

/// Copies bytes between any two buffers: directly when the destination can
/// reach the source, otherwise through host memory.
pub fn copy_between(
    src: &dyn Buffer,
    src_offset: u64,
    dst: &dyn Buffer,
    dst_offset: u64,
    len: u64,
) -> Result<()> {
    check_range("copy source", src_offset, len, src.size())?;
    check_range("copy destination", dst_offset, len, dst.size())?;
    if len == 0 || dst.copy_from(dst_offset, src, src_offset, len)? {
        return Ok(());
    }
    let mut staging = vec![0u8; len as usize];
    src.read(src_offset, &mut staging)?;
    dst.write(dst_offset, &staging)
}
