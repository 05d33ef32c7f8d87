//! Opening GGUF files: fully (header checked, data memory-mapped) or
//! header-only (only the prefix that holds metadata and tensor infos is
//! read; the file may be just that prefix).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::header::{GgufHeader, TensorInfo};
use super::reader::{ParseError, parse};
use ggraph_core::error::{Error, Result};

/// A progress callback: `(bytes done, bytes expected)`. Called a bounded
/// number of times per operation; the expected total may grow while a
/// header prefix is being read.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// First read when looking for the end of a header: most headers (a
/// vocabulary of 150k tokens included) fit in a few MiB.
const FIRST_READ: u64 = 1 << 20;

fn format_error(path: &Path, msg: impl Into<String>) -> Error {
    Error::Format {
        file: path.display().to_string(),
        msg: msg.into(),
    }
}

/// Reads only as much of `path` as the header needs, growing the read
/// until the tensor infos end. Works on a full GGUF and on a prefix of one
/// (then [`GgufHeader::data_present`] is false).
pub fn read_header(path: &Path, progress: Option<Progress<'_>>) -> Result<GgufHeader> {
    read_header_from(path, FIRST_READ, progress)
}

/// [`read_header`] with the size of the first read given.
fn read_header_from(
    path: &Path,
    first_read: u64,
    mut progress: Option<Progress<'_>>,
) -> Result<GgufHeader> {
    if path.is_dir() {
        return Err(format_error(path, "is a directory, not a .gguf file"));
    }
    let mut file = File::open(path).map_err(|e| format_error(path, e.to_string()))?;
    let file_len = file
        .metadata()
        .map_err(|e| format_error(path, e.to_string()))?
        .len();
    let mut buf: Vec<u8> = Vec::new();
    let mut want = file_len.min(first_read.max(1));
    loop {
        // Read in steps so that a large header reports progress.
        while (buf.len() as u64) < want {
            let step = (want - buf.len() as u64).min(8 << 20) as usize;
            let start = buf.len();
            buf.resize(start + step, 0);
            let mut filled = start;
            while filled < buf.len() {
                match file.read(&mut buf[filled..]) {
                    Ok(0) => {
                        return Err(format_error(
                            path,
                            format!(
                                "file shrank while reading: ended at {filled} of {file_len} bytes"
                            ),
                        ));
                    }
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format_error(path, e.to_string())),
                }
            }
            if let Some(p) = progress.as_mut() {
                p(buf.len() as u64, want);
            }
        }
        match parse(&buf, file_len) {
            Ok(h) => return Ok(h),
            Err(ParseError::Bad(m)) => return Err(format_error(path, m)),
            Err(ParseError::More { needed }) => {
                // `needed <= file_len` (the parser checks against the file
                // length first), so this terminates.
                let next = needed.max((buf.len() as u64).saturating_mul(2));
                want = next.min(file_len);
                if want <= buf.len() as u64 {
                    return Err(format_error(path, "header parser asked for no new bytes"));
                }
            }
        }
    }
}

/// A GGUF model: its checked header and, unless opened header-only, its
/// memory-mapped data.
pub struct ModelFile {
    path: PathBuf,
    header: GgufHeader,
    map: Option<Mmap>,
}

impl std::fmt::Debug for ModelFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFile")
            .field("path", &self.path)
            .field("tensors", &self.header.tensors().len())
            .field("data", &self.map.is_some())
            .finish()
    }
}

impl ModelFile {
    /// Opens a complete GGUF: maps the file, checks the header and that
    /// every tensor's bytes lie inside the file. Nothing is read but the
    /// header pages; tensor bytes are read when asked for.
    pub fn open(path: impl AsRef<Path>) -> Result<ModelFile> {
        let path = path.as_ref();
        if path.is_dir() {
            return Err(format_error(path, "is a directory, not a .gguf file"));
        }
        let file = File::open(path).map_err(|e| format_error(path, e.to_string()))?;
        let len = file
            .metadata()
            .map_err(|e| format_error(path, e.to_string()))?
            .len();
        if len == 0 {
            return Err(format_error(path, "file is empty"));
        }
        // SAFETY: the map is read-only. The contract, as for ggml and
        // llama.cpp, is that a model file is not truncated or rewritten
        // while it is mapped; if it is, reads of the changed pages may see
        // new bytes or fault, as with any mapped file.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| format_error(path, e.to_string()))?;
        let header = match parse(&map, map.len() as u64) {
            Ok(h) => h,
            Err(ParseError::Bad(m)) => return Err(format_error(path, m)),
            Err(ParseError::More { needed }) => {
                return Err(format_error(
                    path,
                    format!("file is truncated: the header needs {needed} bytes"),
                ));
            }
        };
        if !header.data_present() {
            let l = header.layout().map(|l| l.data_offset).unwrap_or(0);
            let last = header
                .tensors()
                .iter()
                .max_by_key(|t| t.end())
                .map(|t| t.name.as_str())
                .unwrap_or("");
            return Err(format_error(
                path,
                format!(
                    "file is truncated: tensor data needs bytes {l}..{} (up to the end of '{last}'), but the file has {len}; \
                     a header prefix can be opened header-only for estimates",
                    l.saturating_add(header.data_len())
                ),
            ));
        }
        Ok(ModelFile {
            path: path.to_path_buf(),
            header,
            map: Some(map),
        })
    }

    /// Opens only the header: reads the prefix of `path` that holds the
    /// metadata and tensor infos. `path` may be a full GGUF or a prefix of
    /// one (tensor data absent); [`ModelFile::has_data`] says which, but
    /// the data is never mapped.
    pub fn open_header(
        path: impl AsRef<Path>,
        progress: Option<Progress<'_>>,
    ) -> Result<ModelFile> {
        let path = path.as_ref();
        let header = read_header(path, progress)?;
        Ok(ModelFile {
            path: path.to_path_buf(),
            header,
            map: None,
        })
    }

    /// A model known only by its header (from JSON, for instance).
    pub fn from_header(path: impl Into<PathBuf>, header: GgufHeader) -> ModelFile {
        ModelFile {
            path: path.into(),
            header,
            map: None,
        }
    }

    /// The path the model was opened from (or given with its header), for
    /// messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checked metadata and tensor infos.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// True when tensor bytes can be read.
    pub fn has_data(&self) -> bool {
        self.map.is_some()
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.header.tensor(name)
    }

    /// Offset of `t`'s bytes in the file.
    pub fn file_offset(&self, t: &TensorInfo) -> Option<u64> {
        self.header
            .layout()
            .and_then(|l| l.data_offset.checked_add(t.offset))
    }

    /// The bytes of tensor `name`, straight from the mapped file.
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let t = self
            .header
            .tensor(name)
            .ok_or_else(|| format_error(&self.path, format!("no tensor named '{name}'")))?;
        self.data_of(t)
    }

    /// The bytes of `t` (a tensor of this file's header).
    pub fn data_of(&self, t: &TensorInfo) -> Result<&[u8]> {
        let map = self.map.as_ref().ok_or_else(|| {
            format_error(
                &self.path,
                format!(
                    "tensor '{}': the file was opened header-only, its data is not available",
                    t.name
                ),
            )
        })?;
        let start = self.file_offset(t).unwrap_or(u64::MAX);
        let end = start.saturating_add(t.size_bytes);
        if end > map.len() as u64 {
            return Err(Error::OutOfBounds {
                what: "tensor data",
                offset: start,
                end,
                size: map.len() as u64,
            });
        }
        Ok(&map[start as usize..end as usize])
    }

    /// Gives back this process's pages of tensor `name`'s bytes, once
    /// they have been copied to where they will be read: they stay in
    /// the page cache, and a later read maps them again. Without it a
    /// loaded model counts its weights twice in its resident memory, the
    /// copies and the file's pages. A hint: what the kernel refuses is
    /// ignored.
    pub fn release(&self, name: &str) {
        #[cfg(unix)]
        {
            // whole pages inside the tensor's bytes, for pages up to 64 KiB
            const PAGE: u64 = 64 << 10;
            let (Some(map), Some(t)) = (self.map.as_ref(), self.header.tensor(name)) else {
                return;
            };
            let Some(start) = self.file_offset(t) else {
                return;
            };
            let end = start.saturating_add(t.size_bytes).min(map.len() as u64);
            let (first, last) = (start.div_ceil(PAGE) * PAGE, end / PAGE * PAGE);
            if first < last {
                // SAFETY: the map is read-only and backed by the file, so
                // a page given back reads the same bytes when it is
                // touched again; nothing is discarded.
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        first as usize,
                        (last - first) as usize,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = name;
    }

    /// Reads every tensor's bytes and returns a 64-bit checksum of them (in
    /// file order; not cryptographic: for comparing copies and for
    /// finding unreadable files, which fail here with an I/O error or a
    /// fault). Reports progress in bytes.
    pub fn checksum_data(&self, mut progress: Option<Progress<'_>>) -> Result<u64> {
        let total = self.header.tensor_bytes_total();
        let mut order: Vec<&TensorInfo> = self.header.tensors().iter().collect();
        order.sort_by_key(|t| t.offset);
        let mut h = Checksum::new();
        let mut done = 0u64;
        let mut reported = 0u64;
        for t in order {
            for chunk in self.data_of(t)?.chunks(4 << 20) {
                h.update(chunk);
                done += chunk.len() as u64;
                if let Some(p) = progress.as_mut()
                    && (done - reported >= 64 << 20 || done == total)
                {
                    p(done, total);
                    reported = done;
                }
            }
        }
        Ok(h.finish())
    }
}

/// A fast 64-bit checksum over 8-byte words (multiply-rotate mixing).
struct Checksum {
    h: u64,
    len: u64,
}

impl Checksum {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    fn new() -> Checksum {
        Checksum { h: 0, len: 0 }
    }

    fn mix(&mut self, w: u64) {
        self.h = (self.h ^ w).wrapping_mul(Checksum::K).rotate_left(29);
    }

    /// Chunks are fed at 8-byte multiples except the last of a tensor;
    /// the tail is padded with zeros, which is fine for a checksum.
    fn update(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.mix(u64::from_le_bytes(a));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut a = [0u8; 8];
            a[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(a));
        }
        self.len += bytes.len() as u64;
    }

    fn finish(&self) -> u64 {
        let mut h = self.h ^ self.len;
        h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{ArrayValues, GgufWriter};
    use ggraph_core::dtype::DType;

    fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ggraph-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn sample() -> Vec<u8> {
        let mut w = GgufWriter::new();
        let tokens: Vec<String> = (0..500).map(|i| format!("token{i}")).collect();
        w.kv("general.architecture", "llama")
            .kv("tokenizer.ggml.tokens", ArrayValues::String(tokens));
        w.tensor("a", DType::F32.into(), &[64, 4], vec![3; 1024])
            .unwrap();
        w.to_bytes().unwrap()
    }

    #[test]
    fn a_header_is_read_in_growing_steps_with_progress() {
        let bytes = sample();
        let path = temp_file("grow.gguf", &bytes);
        let mut calls = Vec::new();
        let mut progress = |done: u64, total: u64| calls.push((done, total));
        let h = read_header_from(&path, 16, Some(&mut progress)).unwrap();
        assert_eq!(h, crate::gguf::parse_header(&bytes, "mem").unwrap());
        assert!(h.data_present());
        // It grew from 16 bytes and stopped before the data.
        assert!(calls.len() > 3, "{calls:?}");
        assert_eq!(calls[0], (16, 16));
        let last = calls.last().unwrap().0;
        assert!(last < bytes.len() as u64, "read {last} of {}", bytes.len());
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn full_and_header_only_opening_of_a_file_and_of_its_prefix() {
        let bytes = sample();
        let full = temp_file("full.gguf", &bytes);
        let m = ModelFile::open(&full).unwrap();
        assert!(m.has_data());
        assert_eq!(m.tensor_data("a").unwrap(), &[3u8; 1024][..]);
        assert_ne!(m.checksum_data(None).unwrap(), 0);
        let header_len = m.header().layout().unwrap().header_len as usize;

        let prefix = temp_file("prefix.gguf", &bytes[..header_len]);
        let e = ModelFile::open(&prefix).unwrap_err().to_string();
        assert!(e.contains("truncated") && e.contains("header-only"), "{e}");
        let h = ModelFile::open_header(&prefix, None).unwrap();
        assert!(!h.has_data());
        assert!(!h.header().data_present());
        assert_eq!(h.header(), m.header());
        let e = h.tensor_data("a").unwrap_err().to_string();
        assert!(e.contains("header-only"), "{e}");

        let cut = temp_file("cut.gguf", &bytes[..header_len - 3]);
        let e = ModelFile::open_header(&cut, None).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        for p in [full, prefix, cut] {
            std::fs::remove_file(p).ok();
        }
    }
}
