//! Aligned host memory: the storage of CPU buffers and of the simulated
//! devices, and staging memory for the GPU backends.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

use super::check_range;
use crate::error::{Error, Result};

/// Alignment of host allocations: a cache line, enough for any SIMD load.
pub const HOST_ALIGNMENT: usize = 64;

/// A zeroed, 64-byte aligned heap allocation.
///
/// Allocated through the system's zeroing allocator with its natural
/// alignment and aligned by hand, so that large buffers come from calloc's
/// lazily zeroed pages instead of being written with zeros up front.
pub struct HostMemory {
    raw: NonNull<u8>,
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: HostMemory owns its allocation; concurrent access through the raw
// pointer is ordered by the scheduler, as for device memory.
unsafe impl Send for HostMemory {}
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Allocates `size` zeroed bytes; an allocation failure is an error
    /// naming `owner`.
    pub fn new(size: u64, owner: &str) -> Result<HostMemory> {
        let oom = || Error::OutOfMemory {
            buffer_type: owner.to_string(),
            requested_bytes: size,
            available_bytes: 0,
        };
        let size = usize::try_from(size).map_err(|_| oom())?;
        let layout = Self::layout(size).ok_or_else(oom)?;
        // SAFETY: the layout has a non-zero size.
        let raw = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or_else(oom)?;
        let pad = raw.as_ptr().align_offset(HOST_ALIGNMENT);
        // SAFETY: the allocation has HOST_ALIGNMENT spare bytes for `pad`.
        let ptr = unsafe { NonNull::new_unchecked(raw.as_ptr().add(pad)) };
        Ok(HostMemory { raw, ptr, size })
    }

    fn layout(size: usize) -> Option<Layout> {
        Layout::from_size_align(size.checked_add(HOST_ALIGNMENT)?, 16).ok()
    }

    pub fn len(&self) -> usize {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range("write", offset, data.len() as u64, self.size as u64)?;
        // SAFETY: the range is inside the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(offset as usize),
                data.len(),
            );
        }
        Ok(())
    }

    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_range("read", offset, out.len() as u64, self.size as u64)?;
        // SAFETY: the range is inside the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset as usize),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }

    pub fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        check_range("fill", offset, len, self.size as u64)?;
        // SAFETY: the range is inside the allocation.
        unsafe {
            std::ptr::write_bytes(self.ptr.as_ptr().add(offset as usize), value, len as usize);
        }
        Ok(())
    }

    /// Copies within or between host allocations (ranges may overlap).
    pub fn copy_from(
        &self,
        dst_offset: u64,
        src: &HostMemory,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        check_range("copy source", src_offset, len, src.size as u64)?;
        check_range("copy destination", dst_offset, len, self.size as u64)?;
        // SAFETY: both ranges are inside their allocations; `copy` allows overlap.
        unsafe {
            std::ptr::copy(
                src.ptr.as_ptr().add(src_offset as usize),
                self.ptr.as_ptr().add(dst_offset as usize),
                len as usize,
            );
        }
        Ok(())
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        let layout = Self::layout(self.size).expect("layout was valid at allocation");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.raw.as_ptr(), layout) };
    }
}
