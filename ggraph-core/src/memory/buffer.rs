//! The `Buffer` trait: one allocation of some buffer type, and byte
//! copies between any two buffers.

use std::any::Any;
use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// What a buffer holds; used for accounting and reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferUsage {
    /// Model parameters: written once at load, then only read.
    Weights,
    /// Activations whose offsets the graph allocator plans; host memory for
    /// them is faulted in up front.
    Compute,
    /// Anything else (a KV cache, inputs, scratch memory).
    Any,
}
/// One allocation of some buffer type. Methods take `&self`: buffers are
/// shared between graphs and streams, and ordering their use is the
/// scheduler's job, as in ggml.
pub trait Buffer: Send + Sync {
    /// [`BufferType::name`](crate::backend::BufferType::name) of the type
    /// that allocated it.
    fn buffer_type_name(&self) -> &str;

    /// Size in bytes, as asked of the buffer type.
    fn size(&self) -> u64;

    /// The usage it was allocated for.
    fn usage(&self) -> BufferUsage;

    /// Copies `data` to bytes `offset..offset + data.len()`; later reads and
    /// computes see them. [`Error::OutOfBounds`] if the range passes the end
    /// (see [`check_range`]).
    fn write(&self, offset: u64, data: &[u8]) -> Result<()>;

    /// Copies bytes `offset..offset + out.len()` into `out`; returns when
    /// they are there. [`Error::OutOfBounds`] if the range passes the end.
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()>;

    /// Sets `len` bytes from `offset` to `value`. [`Error::OutOfBounds`] if
    /// the range passes the end.
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

    /// Tells the buffer that a tensor of `dtype` and shape `ne` lives at
    /// `offset` (ggml's `init_tensor`). Buffers that lay some tensors out
    /// their own way (a layout buffer type's) record it, so that `write`
    /// converts those bytes from ggml's layout and `read` gives ggml's
    /// layout back; plain memory ignores it. Telling it again about the
    /// same tensor changes nothing.
    fn init_tensor(&self, _offset: u64, _dtype: DType, _ne: [usize; 4]) -> Result<()> {
        Ok(())
    }

    /// Whether the device dropped this memory since it was allocated (a
    /// remote server that restarted, or whose connection dropped): its
    /// contents are gone, and using it fails until [`Buffer::restore`].
    fn lost(&self) -> bool {
        false
    }

    /// Allocates lost memory again on its device, of the same size;
    /// offsets keep their meaning, and the contents are undefined until
    /// written again. Nothing to do for memory that is not lost. Fails,
    /// leaving the memory lost, while the device cannot be reached.
    fn restore(&self) -> Result<()> {
        Ok(())
    }

    /// Start of the memory, for host buffers.
    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    /// `self`, for a backend to downcast to its own buffer.
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
