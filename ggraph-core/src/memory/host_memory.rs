//! Aligned host memory: the storage of CPU buffers and of the simulated
//! devices, and staging memory for the GPU backends.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

use memmap2::MmapMut;

use super::buffer::{BufferUsage, check_range};
use crate::error::{Error, Result};

/// Alignment of host allocations: a cache line, enough for any SIMD load.
pub const HOST_ALIGNMENT: usize = 64;

/// Allocations of at least this many bytes are anonymous mappings that
/// ask the kernel for transparent huge pages (the size of one on x86-64).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// A zeroed, 64-byte aligned heap allocation.
///
/// Small ones come from the system's zeroing allocator with its natural
/// alignment, aligned by hand. Large ones (from [`HUGE_PAGE_BYTES`]) are
/// anonymous mappings, page aligned, which on Linux are advised to use
/// transparent huge pages: weights streamed once per token then cost a TLB
/// miss per 2 MiB instead of per 4 KiB (measured faster for generation;
/// docs/performance.md).
///
/// A compute buffer is allocated committed ([`HostMemory::committed`]):
/// every page faulted in at once (on Linux `MADV_POPULATE_WRITE` for a
/// mapping), so that no kernel runs into a first touch later: lazily, a
/// first write during generation stalled whole tokens. Weights are not
/// committed: they are written as soon as they are allocated (by a loader
/// that may fault them in on several threads); nor is a cache, most of
/// which a short conversation never touches.
pub struct HostMemory {
    storage: Storage,
    size: usize,
}

enum Storage {
    /// From `alloc_zeroed` with `layout`; the memory starts at `ptr`,
    /// aligned inside it.
    Heap {
        raw: NonNull<u8>,
        ptr: NonNull<u8>,
        layout: Layout,
    },
    /// An anonymous mapping, from its start.
    Mapped(MmapMut),
}

// SAFETY: HostMemory owns its allocation; concurrent access through the raw
// pointer is ordered by the scheduler, as for device memory.
unsafe impl Send for HostMemory {}
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Allocates `size` zeroed bytes; an allocation failure is an error
    /// naming `owner`.
    pub fn new(size: u64, owner: &str) -> Result<HostMemory> {
        Self::alloc(size, owner, false)
    }

    /// [`HostMemory::new`], with every page faulted in before it returns
    /// (see the type's notes); a lack of memory that the kernel reports
    /// then is an out-of-memory error.
    pub fn committed(size: u64, owner: &str) -> Result<HostMemory> {
        Self::alloc(size, owner, true)
    }

    /// The memory of a host buffer of `usage`: committed for compute
    /// buffers, lazy for the rest (see the type's notes).
    pub fn for_usage(size: u64, owner: &str, usage: BufferUsage) -> Result<HostMemory> {
        match usage {
            BufferUsage::Compute => Self::committed(size, owner),
            BufferUsage::Weights | BufferUsage::Any => Self::new(size, owner),
        }
    }

    fn alloc(size: u64, owner: &str, commit: bool) -> Result<HostMemory> {
        let oom = || Error::OutOfMemory {
            buffer_type: owner.to_string(),
            requested_bytes: size,
            available_bytes: 0,
        };
        let size = usize::try_from(size).map_err(|_| oom())?;
        if size >= HUGE_PAGE_BYTES {
            let map = MmapMut::map_anon(size).map_err(|_| oom())?;
            #[cfg(target_os = "linux")]
            {
                // a hint: where the kernel has no transparent huge pages
                // the mapping works the same with small ones
                let _ = map.advise(memmap2::Advice::HugePage);
                // kernels before 5.14 lack the advice: their pages fault
                // in lazily, as on every other system
                if commit
                    && let Err(e) = map.advise(memmap2::Advice::PopulateWrite)
                    && e.kind() == std::io::ErrorKind::OutOfMemory
                {
                    return Err(oom());
                }
            }
            #[cfg(not(target_os = "linux"))]
            let _ = commit;
            return Ok(HostMemory {
                storage: Storage::Mapped(map),
                size,
            });
        }
        let layout = Self::layout(size).ok_or_else(oom)?;
        // SAFETY: the layout has a non-zero size.
        let raw = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or_else(oom)?;
        let pad = raw.as_ptr().align_offset(HOST_ALIGNMENT);
        // SAFETY: the allocation has HOST_ALIGNMENT spare bytes for `pad`.
        let ptr = unsafe { NonNull::new_unchecked(raw.as_ptr().add(pad)) };
        if commit {
            // a large zeroed allocation may be a fresh mapping: write
            // its pages now (they hold zeros already)
            // SAFETY: `size` bytes from `ptr` are inside the allocation.
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, size) };
        }
        Ok(HostMemory {
            storage: Storage::Heap { raw, ptr, layout },
            size,
        })
    }

    fn layout(size: usize) -> Option<Layout> {
        Layout::from_size_align(size.checked_add(HOST_ALIGNMENT)?, 16).ok()
    }

    /// Size in bytes, as asked.
    pub fn len(&self) -> usize {
        self.size
    }

    /// Whether the allocation has no bytes.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The first byte, aligned to [`HOST_ALIGNMENT`]; valid for `len()` bytes
    /// while `self` lives. Writes through it must not race with other
    /// access to the same bytes.
    pub fn as_ptr(&self) -> *mut u8 {
        match &self.storage {
            Storage::Heap { ptr, .. } => ptr.as_ptr(),
            // written through this pointer as heap memory is: the mapping
            // is private to this allocation
            Storage::Mapped(map) => map.as_ptr() as *mut u8,
        }
    }

    /// Copies `data` to bytes `offset..offset + data.len()`;
    /// [`Error::OutOfBounds`] if the range passes the end.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_with(offset, data.len() as u64, |dst| dst.copy_from_slice(data))
    }

    /// Lets `fill` write bytes `offset..offset + len` in place, for a
    /// writer that converts as it copies (no staging copy);
    /// [`Error::OutOfBounds`] if the range passes the end. Like
    /// [`HostMemory::write`], it must not race with other access to those
    /// bytes (the scheduler orders them).
    pub fn write_with(&self, offset: u64, len: u64, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        check_range("write", offset, len, self.size as u64)?;
        // SAFETY: the range is inside the allocation, and no other access
        // to it runs meanwhile (the contract above).
        fill(unsafe {
            std::slice::from_raw_parts_mut(self.as_ptr().add(offset as usize), len as usize)
        });
        Ok(())
    }

    /// Copies bytes `offset..offset + out.len()` into `out`;
    /// [`Error::OutOfBounds`] if the range passes the end.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_range("read", offset, out.len() as u64, self.size as u64)?;
        // SAFETY: the range is inside the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(offset as usize),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }

    /// Sets `len` bytes from `offset` to `value`; [`Error::OutOfBounds`] if
    /// the range passes the end.
    pub fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        check_range("fill", offset, len, self.size as u64)?;
        // SAFETY: the range is inside the allocation.
        unsafe {
            std::ptr::write_bytes(self.as_ptr().add(offset as usize), value, len as usize);
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
                src.as_ptr().add(src_offset as usize),
                self.as_ptr().add(dst_offset as usize),
                len as usize,
            );
        }
        Ok(())
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Storage::Heap { raw, layout, .. } = self {
            // SAFETY: allocated in `HostMemory::new` with this layout.
            unsafe { dealloc(raw.as_ptr(), *layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_allocations_are_zeroed_aligned_and_writable() -> Result<()> {
        let sizes = [
            0,
            1,
            4096 + 3,
            HUGE_PAGE_BYTES - 1,
            HUGE_PAGE_BYTES,
            3 * HUGE_PAGE_BYTES + 5,
        ];
        let lazy = sizes.map(|s| (s, false));
        for (size, commit) in lazy.into_iter().chain(sizes.map(|s| (s, true))) {
            let mem = if commit {
                HostMemory::committed(size as u64, "test")?
            } else {
                HostMemory::new(size as u64, "test")?
            };
            assert_eq!(mem.len(), size);
            assert_eq!(mem.as_ptr() as usize % HOST_ALIGNMENT, 0, "size {size}");
            if size == 0 {
                continue;
            }
            let mut back = vec![1u8; size];
            mem.read(0, &mut back)?;
            assert!(back.iter().all(|&b| b == 0), "size {size} not zeroed");
            let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            mem.write(0, &data)?;
            mem.read(0, &mut back)?;
            assert_eq!(back, data, "size {size}");
            assert!(mem.write(size as u64, &[1]).is_err());
            mem.write_with(size as u64 - 1, 1, |b| b[0] = 7)?;
            mem.read(size as u64 - 1, &mut back[..1])?;
            assert_eq!(back[0], 7, "size {size}");
            assert!(
                mem.write_with(size as u64, 1, |_| panic!("called out of bounds"))
                    .is_err()
            );
        }
        Ok(())
    }

    /// The resident bytes of the mapping that holds `addr`, from
    /// /proc/self/smaps.
    #[cfg(target_os = "linux")]
    fn resident_bytes_at(addr: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
                continue;
            }
            if inside && let Some(kb) = line.strip_prefix("Rss:") {
                return kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .map(|k| k << 10);
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_committed_allocation_is_resident_before_it_is_touched() {
        // (kernels before 5.14 have no MADV_POPULATE_WRITE and fault lazily)
        let size = 3 * HUGE_PAGE_BYTES + 4096;
        let mem = HostMemory::committed(size as u64, "test").unwrap();
        let resident = resident_bytes_at(mem.as_ptr() as usize).expect("the mapping in smaps");
        assert!(
            resident >= size as u64,
            "{resident} of {size} bytes resident"
        );
    }

    #[test]
    fn an_allocation_larger_than_the_address_space_is_an_error() {
        let got = HostMemory::new(1 << 62, "huge");
        assert!(
            matches!(&got, Err(Error::OutOfMemory { buffer_type, .. }) if buffer_type == "huge"),
            "{:?}",
            got.err()
        );
    }
}
