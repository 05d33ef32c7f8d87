//! The CPU's layout buffer type, `CPU_REPACK` as in ggml: host memory in
//! which Q4_0, Q4_K, IQ4_NL and MXFP4 weight matrices are kept in the
//! interleaved layout of `kernels::interleave`. Writes convert from ggml's layout and reads
//! convert back, so a loader writes GGUF's bytes and any device can copy
//! the weight out. The memory is not plain host memory (`is_host` is
//! false, there is no `host_ptr`): only the CPU's stream reads it, giving
//! the interleaved bytes to the kernels that read them and ggml's bytes
//! to every other.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use ggraph_core::backend::{Buffer, BufferType, BufferUsage, HostMemory, check_range};
use ggraph_core::{DType, Error, Result};

use crate::kernels::interleave::{GROUP_ROWS, Interleaved};
use crate::kernels::isa::{self, Isa};
use crate::team::{self, Team, WRITE_TASK_BYTES};

/// Name of the CPU's layout buffer type.
pub const CPU_REPACK_BUFFER_TYPE: &str = "CPU_REPACK";

/// Whether this processor gets the layout: wherever the interleaved
/// kernels run (AVX2 and up), where they were measured faster than the
/// kernels that read ggml's rows (docs/performance.md).
/// `GGRAPH_CPU_REPACK=0` turns it off.
pub(crate) fn offered() -> bool {
    isa::active() >= Isa::Avx2 && std::env::var("GGRAPH_CPU_REPACK").as_deref() != Ok("0")
}

/// Host memory with Q4_0, Q4_K, IQ4_NL and MXFP4 matrices of whole groups
/// of eight rows interleaved; other weights are kept as they are.
#[derive(Debug, Default)]
pub struct RepackBufferType {
    /// The device's team, which packs large writes together.
    team: Option<Arc<Team>>,
}

impl RepackBufferType {
    /// The buffer type of a CPU device whose `team` packs the weights
    /// written to it (the kernel's zeroing of fresh pages, most of a
    /// load, then runs on every thread too); `None` packs on the writer's
    /// thread.
    pub(crate) fn with_team(team: Option<Arc<Team>>) -> RepackBufferType {
        RepackBufferType { team }
    }
}

impl BufferType for RepackBufferType {
    fn name(&self) -> &str {
        CPU_REPACK_BUFFER_TYPE
    }

    fn alignment(&self) -> u64 {
        64
    }

    fn lays_out(&self, dtype: DType, shape: &[usize]) -> bool {
        Interleaved::of(dtype, shape).is_some()
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(RepackBuffer {
            memory: HostMemory::for_usage(size, CPU_REPACK_BUFFER_TYPE, usage)?,
            usage,
            weights: Mutex::new(Vec::new()),
            team: self.team.clone(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An interleaved matrix in a [`RepackBuffer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Laid {
    /// Where it starts in the buffer.
    pub offset: u64,
    /// Its bytes (as many as in ggml's layout).
    pub len: u64,
    /// The layout.
    pub layout: Interleaved,
    /// Its shape.
    pub ne: [usize; 4],
}

impl Laid {
    fn end(&self) -> u64 {
        self.offset + self.len
    }

    fn row_bytes(&self) -> usize {
        self.len as usize / (self.ne[1] * self.ne[2])
    }

    /// Bytes of one group of rows.
    fn group_bytes(&self) -> u64 {
        (GROUP_ROWS * self.row_bytes()) as u64
    }
}

/// One allocation of [`RepackBufferType`].
pub struct RepackBuffer {
    memory: HostMemory,
    usage: BufferUsage,
    /// The interleaved matrices, by offset.
    weights: Mutex<Vec<Laid>>,
    team: Option<Arc<Team>>,
}

impl RepackBuffer {
    fn weights(&self) -> MutexGuard<'_, Vec<Laid>> {
        // a panic elsewhere cannot leave the list half-written: every
        // change is one insert
        self.weights.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The interleaved matrix that overlaps `offset..offset + len`, if any
    /// (the first one).
    pub(crate) fn laid_over(&self, offset: u64, len: u64) -> Option<Laid> {
        let end = offset + len.max(1);
        let weights = self.weights();
        weights[first_ending_after(&weights, offset)..]
            .first()
            .filter(|w| w.offset < end)
            .copied()
    }

    /// The start of the memory, for the CPU's stream.
    pub(crate) fn base(&self) -> *mut u8 {
        self.memory.as_ptr()
    }

    /// The pieces of `offset..offset + len` in order: bytes outside
    /// interleaved matrices (`None`) and bytes inside one, each with where
    /// it starts in the buffer and its range counting from `offset`.
    fn pieces(&self, offset: u64, len: u64) -> Vec<(Option<Laid>, u64, Range<usize>)> {
        let end = offset + len;
        let range = |a: u64, b: u64| (a - offset) as usize..(b - offset) as usize;
        let mut out = Vec::new();
        let mut pos = offset;
        let weights = self.weights();
        let from = first_ending_after(&weights, offset);
        for w in weights[from..].iter().take_while(|w| w.offset < end) {
            if pos < w.offset {
                out.push((None, pos, range(pos, w.offset)));
                pos = w.offset;
            }
            let stop = end.min(w.end());
            out.push((Some(*w), pos, range(pos, stop)));
            pos = stop;
        }
        if pos < end {
            out.push((None, pos, range(pos, end)));
        }
        out
    }

    /// The whole groups of `w` that cover `at..at + len`: their start in
    /// the buffer and their length.
    fn groups_over(w: &Laid, at: u64, len: u64) -> (u64, u64) {
        let gb = w.group_bytes();
        let first = (at - w.offset) / gb;
        let last = (at + len - w.offset).div_ceil(gb);
        (w.offset + first * gb, (last - first) * gb)
    }

    /// Packs whole groups of `w` from ggml's bytes `plain` into `packed`,
    /// in tasks of whole groups over the device's team.
    fn pack(&self, w: &Laid, plain: &[u8], packed: &mut [u8]) {
        let gb = w.group_bytes() as usize;
        let per = (WRITE_TASK_BYTES / gb).max(1) * gb;
        team::split_on(self.team.as_deref(), packed, per, |c, out| {
            w.layout
                .pack(&plain[c * per..][..out.len()], out, w.row_bytes())
        });
    }

    /// ggml's bytes of the groups of `w` from `start`, `len` bytes.
    fn unpacked(&self, w: &Laid, start: u64, len: u64) -> Result<Vec<u8>> {
        let mut laid = vec![0u8; len as usize];
        self.memory.read(start, &mut laid)?;
        let mut plain = vec![0u8; len as usize];
        w.layout.unpack(&laid, &mut plain, w.row_bytes());
        Ok(plain)
    }
}

/// The index of the first of `weights` (sorted by offset, not
/// overlapping, so sorted by end too) that ends after `offset`: a binary
/// search, since the stream asks for every weight of every node.
fn first_ending_after(weights: &[Laid], offset: u64) -> usize {
    weights.partition_point(|w| w.end() <= offset)
}

impl Buffer for RepackBuffer {
    fn buffer_type_name(&self) -> &str {
        CPU_REPACK_BUFFER_TYPE
    }

    fn size(&self) -> u64 {
        self.memory.len() as u64
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range("write", offset, data.len() as u64, self.size())?;
        for (laid, at, r) in self.pieces(offset, data.len() as u64) {
            let Some(w) = laid else {
                self.memory.write(at, &data[r])?;
                continue;
            };
            let (start, len) = Self::groups_over(&w, at, r.len() as u64);
            if start == at && len == r.len() as u64 {
                // whole groups: packed from the caller's bytes straight
                // into place
                let plain = &data[r];
                self.memory
                    .write_with(start, len, |packed| self.pack(&w, plain, packed))?;
            } else {
                let mut plain = self.unpacked(&w, start, len)?;
                let from = (at - start) as usize;
                plain[from..from + r.len()].copy_from_slice(&data[r]);
                let mut packed = vec![0u8; len as usize];
                w.layout.pack(&plain, &mut packed, w.row_bytes());
                self.memory.write(start, &packed)?;
            }
        }
        Ok(())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_range("read", offset, out.len() as u64, self.size())?;
        for (laid, at, r) in self.pieces(offset, out.len() as u64) {
            let Some(w) = laid else {
                self.memory.read(at, &mut out[r])?;
                continue;
            };
            let (start, len) = Self::groups_over(&w, at, r.len() as u64);
            let plain = self.unpacked(&w, start, len)?;
            let from = (at - start) as usize;
            let n = r.len();
            out[r].copy_from_slice(&plain[from..from + n]);
        }
        Ok(())
    }

    /// The layout only moves bytes, so a fill is the same in both.
    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.memory.fill(offset, len, value)
    }

    fn init_tensor(&self, offset: u64, dtype: DType, ne: [usize; 4]) -> Result<()> {
        let Some(layout) = Interleaved::of(dtype, &ne) else {
            return Ok(());
        };
        let len = dtype.row_size(ne[0]).unwrap_or(0) as u64 * (ne[1] * ne[2]) as u64;
        check_range("init_tensor", offset, len, self.size())?;
        let new = Laid {
            offset,
            len,
            layout,
            ne,
        };
        let mut weights = self.weights();
        if let Some(w) = weights
            .iter()
            .find(|w| w.offset < new.end() && offset < w.end())
        {
            if *w == new {
                return Ok(());
            }
            return Err(Error::InvalidArgument(format!(
                "{CPU_REPACK_BUFFER_TYPE}: a {dtype:?} tensor {ne:?} at offset {offset} overlaps the {:?} matrix {:?} at {}",
                w.layout.dtype(),
                w.ne,
                w.offset
            )));
        }
        let at = weights.partition_point(|w| w.offset < offset);
        weights.insert(at, new);
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q4_0_bytes(rows: usize, k: usize) -> Vec<u8> {
        (0..rows * k / 32 * 18)
            .map(|i| (i * 13 + i / 97) as u8)
            .collect()
    }

    /// A write larger than one task packs on the team: the same bytes in
    /// memory as one thread packs, and the same bytes read back.
    #[test]
    fn a_large_write_packs_on_the_team_as_on_one_thread() {
        let (rows, k) = (3000, 4096);
        let bytes = q4_0_bytes(rows, k);
        assert!(bytes.len() > WRITE_TASK_BYTES + WRITE_TASK_BYTES / 2);
        let team = Team::new(3).map(Arc::new).ok();
        let mut memories = Vec::new();
        for bt in [
            RepackBufferType::with_team(team),
            RepackBufferType::default(),
        ] {
            let buf = bt.alloc(bytes.len() as u64, BufferUsage::Weights).unwrap();
            buf.init_tensor(0, DType::Q4_0, [k, rows, 1, 1]).unwrap();
            buf.write(0, &bytes).unwrap();
            let mut back = vec![0u8; bytes.len()];
            buf.read(0, &mut back).unwrap();
            assert!(back == bytes, "{bt:?}: read back differs");
            let repack = buf.as_any().downcast_ref::<RepackBuffer>().unwrap();
            // SAFETY: the buffer holds bytes.len() bytes, all written.
            let raw = unsafe { std::slice::from_raw_parts(repack.base(), bytes.len()) };
            memories.push(raw.to_vec());
        }
        assert!(memories[0] == memories[1], "the team packed other bytes");
        assert!(memories[0] != bytes);
    }

    /// A matrix written whole reads back byte-identical, whole or in any
    /// part, and a write of a part changes only that part; bytes outside
    /// matrices stay as written.
    #[test]
    fn a_repacked_weight_reads_back_as_ggml_laid_it_out() {
        let (rows, k) = (24, 64);
        let bytes = q4_0_bytes(rows, k);
        let buf = RepackBufferType::default()
            .alloc(100 + bytes.len() as u64 + 50, BufferUsage::Weights)
            .unwrap();
        buf.init_tensor(100, DType::Q4_0, [k, rows, 1, 1]).unwrap();
        buf.init_tensor(100, DType::Q4_0, [k, rows, 1, 1]).unwrap();
        buf.write(100, &bytes).unwrap();
        buf.write(0, &[7u8; 100]).unwrap();
        let mut back = vec![0u8; bytes.len()];
        buf.read(100, &mut back).unwrap();
        assert_eq!(back, bytes);
        // the memory itself is interleaved
        let rb = buf.as_any().downcast_ref::<RepackBuffer>().unwrap();
        let mut raw = vec![0u8; bytes.len()];
        rb.memory.read(100, &mut raw).unwrap();
        assert_ne!(raw, bytes);
        // parts across groups and across the matrix's edges
        let mut all = vec![0u8; buf.size() as usize];
        buf.read(0, &mut all).unwrap();
        assert_eq!(&all[..100], &[7u8; 100]);
        assert_eq!(&all[100..100 + bytes.len()], &bytes[..]);
        for (at, len) in [(95u64, 40usize), (100 + 200, 500), (100 + 863, 30)] {
            let mut part = vec![0u8; len];
            buf.read(at, &mut part).unwrap();
            assert_eq!(part, all[at as usize..at as usize + len], "read at {at}");
        }
        let patch: Vec<u8> = (0..300).map(|i| i as u8 ^ 0x5a).collect();
        buf.write(100 + 250, &patch).unwrap();
        all[350..650].copy_from_slice(&patch);
        let mut after = vec![0u8; buf.size() as usize];
        buf.read(0, &mut after).unwrap();
        assert_eq!(after, all);
    }

    #[test]
    fn other_tensors_stay_plain_and_overlaps_are_refused() {
        let buf = RepackBufferType::default()
            .alloc(4096, BufferUsage::Weights)
            .unwrap();
        // F32, a Q4_0 matrix of 12 rows and Q8_0 are not laid out
        buf.init_tensor(0, DType::F32, [16, 4, 1, 1]).unwrap();
        buf.init_tensor(256, DType::Q4_0, [64, 12, 1, 1]).unwrap();
        let rb = buf.as_any().downcast_ref::<RepackBuffer>().unwrap();
        buf.init_tensor(2048, DType::Q8_0, [32, 8, 1, 1]).unwrap();
        assert_eq!(rb.laid_over(0, 4096), None);
        buf.init_tensor(1024, DType::Q4_0, [32, 8, 1, 1]).unwrap();
        let laid = rb.laid_over(0, 4096).unwrap();
        assert_eq!((laid.offset, laid.len), (1024, 8 * 18));
        let err = buf
            .init_tensor(1030, DType::Q4_0, [32, 8, 1, 1])
            .unwrap_err();
        assert!(err.to_string().contains("overlaps"), "{err}");
        assert!(buf.init_tensor(4000, DType::Q4_0, [32, 8, 1, 1]).is_err());
        assert!(buf.write(4090, &[0u8; 10]).is_err());
    }
}
