//! The GGUF header: metadata key-value pairs and tensor infos, checked.
//!
//! A [`GgufHeader`] is built either by the reader (from a file or a file
//! prefix) or from header JSON; both go through [`GgufHeader::new`], which
//! checks what the two have in common: unique keys and tensor names, a
//! valid `general.alignment`, tensor sizes consistent with type and shape,
//! aligned tensor offsets and no two tensors overlapping.

use std::collections::HashMap;
use std::fmt;

use super::types::GgmlType;
use super::value::Value;

/// GGUF's default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// ggml's limit on tensor dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// The metadata key that sets the data alignment (a `uint32`).
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// One tensor as the header describes it.
#[derive(Clone, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name, unique in the header (`blk.0.attn_q.weight`).
    pub name: String,
    /// Its element type as the file records it (ggml's `ggml_type`).
    pub ggml_type: GgmlType,
    /// ggml order: `shape[0]` is the row length (ne0).
    pub shape: Vec<u64>,
    /// Offset of the tensor's bytes from the start of the data section.
    pub offset: u64,
    /// Bytes of the tensor, from its type and shape.
    pub size_bytes: u64,
}

impl TensorInfo {
    /// A tensor info with its size computed from type and shape.
    pub fn new(
        name: impl Into<String>,
        ggml_type: GgmlType,
        shape: Vec<u64>,
        offset: u64,
    ) -> Result<TensorInfo, String> {
        let name = name.into();
        if shape.len() > MAX_DIMS {
            return Err(format!(
                "tensor '{name}' has {} dimensions; ggml allows at most {MAX_DIMS}",
                shape.len()
            ));
        }
        if let Some(&d) = shape.iter().find(|&&d| d > i64::MAX as u64) {
            return Err(format!(
                "tensor '{name}' has dimension {d}, more than ggml's int64 limit"
            ));
        }
        let size_bytes = ggml_type
            .tensor_bytes(&shape)
            .map_err(|e| format!("tensor '{name}' ({ggml_type}, shape {shape:?}): {e}"))?;
        Ok(TensorInfo {
            name,
            ggml_type,
            shape,
            offset,
            size_bytes,
        })
    }

    /// The four ggml dimensions, missing ones as 1.
    pub fn ne(&self) -> [u64; 4] {
        let mut ne = [1u64; 4];
        for (d, &n) in ne.iter_mut().zip(&self.shape) {
            *d = n;
        }
        ne
    }

    /// Number of values (saturating; the shape was checked to have a size
    /// in bytes that fits 64 bits, so this only saturates for types with
    /// more values than bytes, on absurd shapes).
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().fold(1u64, |a, &n| a.saturating_mul(n))
    }

    /// End of the tensor's bytes, relative to the data section.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size_bytes)
    }
}

impl fmt::Debug for TensorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {:?} @{} ({} B)",
            self.name, self.ggml_type, self.shape, self.offset, self.size_bytes
        )
    }
}

/// Where the header sits in a file, when it came from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLayout {
    /// Bytes in the file that was read (a prefix file counts as a file).
    pub file_len: u64,
    /// End of the tensor infos.
    pub header_len: u64,
    /// Start of the data section: `header_len` rounded up to the alignment.
    pub data_offset: u64,
}

/// A checked GGUF header.
#[derive(Clone, Debug)]
pub struct GgufHeader {
    version: u32,
    kv: Vec<(String, Value)>,
    kv_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    layout: Option<FileLayout>,
}

impl PartialEq for GgufHeader {
    /// Same version, key-value pairs (in order) and tensor infos; where
    /// each came from does not matter.
    fn eq(&self, other: &GgufHeader) -> bool {
        self.version == other.version && self.kv == other.kv && self.tensors == other.tensors
    }
}

impl GgufHeader {
    /// Checks and assembles a header. `Err` is a message naming the
    /// offending key or tensor.
    pub fn new(
        version: u32,
        kv: Vec<(String, Value)>,
        tensors: Vec<TensorInfo>,
    ) -> Result<GgufHeader, String> {
        if !(2..=3).contains(&version) {
            return Err(format!(
                "GGUF version {version} is not supported (ggraph reads versions 2 and 3)"
            ));
        }
        let mut kv_index = HashMap::with_capacity(kv.len());
        for (i, (k, _)) in kv.iter().enumerate() {
            if kv_index.insert(k.clone(), i).is_some() {
                return Err(format!("duplicate metadata key '{k}'"));
            }
        }
        let alignment = match kv_index.get(ALIGNMENT_KEY).map(|&i| &kv[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(Value::U32(a)) => {
                return Err(format!("{ALIGNMENT_KEY} is {a}; it must be a power of two"));
            }
            Some(v) => {
                return Err(format!(
                    "{ALIGNMENT_KEY} has type {}; GGUF requires uint32",
                    v.type_name()
                ));
            }
        };
        let mut tensor_index = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if tensor_index.insert(t.name.clone(), i).is_some() {
                return Err(format!("duplicate tensor name '{}'", t.name));
            }
            if t.offset % alignment != 0 {
                return Err(format!(
                    "tensor '{}' has data offset {}, which is not a multiple of the alignment {alignment}",
                    t.name, t.offset
                ));
            }
            // The size was computed by TensorInfo::new; check it again for
            // infos built by hand.
            match t.ggml_type.tensor_bytes(&t.shape) {
                Ok(s) if s == t.size_bytes => {}
                Ok(s) => {
                    return Err(format!(
                        "tensor '{}' says {} bytes, but {} {:?} takes {s}",
                        t.name, t.size_bytes, t.ggml_type, t.shape
                    ));
                }
                Err(e) => return Err(format!("tensor '{}': {e}", t.name)),
            }
            if t.offset.checked_add(t.size_bytes).is_none() {
                return Err(format!(
                    "tensor '{}' ends past 2^64 (offset {}, {} bytes)",
                    t.name, t.offset, t.size_bytes
                ));
            }
        }
        let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
        by_offset.sort_by_key(|t| (t.offset, t.end()));
        for w in by_offset.windows(2) {
            if w[1].offset < w[0].end() {
                return Err(format!(
                    "tensors '{}' (data bytes {}..{}) and '{}' (data bytes {}..{}) overlap",
                    w[0].name,
                    w[0].offset,
                    w[0].end(),
                    w[1].name,
                    w[1].offset,
                    w[1].end()
                ));
            }
        }
        Ok(GgufHeader {
            version,
            kv,
            kv_index,
            tensors,
            tensor_index,
            alignment,
            layout: None,
        })
    }

    /// Records where the header sits in the file it was read from.
    pub(crate) fn with_layout(mut self, layout: FileLayout) -> GgufHeader {
        self.layout = Some(layout);
        self
    }

    /// The GGUF format version: 2 or 3 (the only ones a header can have).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment in bytes (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The key-value pairs in file order.
    pub fn kv(&self) -> &[(String, Value)] {
        &self.kv
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kv_index.get(key).map(|&i| &self.kv[i].1)
    }

    /// The tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Where the header sits in its file; `None` for a header from JSON.
    pub fn layout(&self) -> Option<FileLayout> {
        self.layout
    }

    /// Bytes the data section needs: the end of the last tensor.
    pub fn data_len(&self) -> u64 {
        self.tensors.iter().map(TensorInfo::end).max().unwrap_or(0)
    }

    /// Sum of every tensor's bytes.
    pub fn tensor_bytes_total(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.size_bytes))
    }

    /// True when the file this header was read from also holds every
    /// tensor's data; false for a header prefix and for JSON.
    pub fn data_present(&self) -> bool {
        match self.layout {
            Some(l) => l
                .data_offset
                .checked_add(self.data_len())
                .is_some_and(|end| end <= l.file_len),
            None => false,
        }
    }

    /// Offsets that pack `shapes` one after another, each rounded up to
    /// `alignment`, as ggml and the `gguf` package write them. `Err` names
    /// the tensor whose size is invalid.
    pub fn packed_offsets(
        tensors: &[(String, GgmlType, Vec<u64>)],
        alignment: u64,
    ) -> Result<Vec<u64>, String> {
        let mut offsets = Vec::with_capacity(tensors.len());
        let mut at = 0u64;
        for (name, t, shape) in tensors {
            offsets.push(at);
            let size = t
                .tensor_bytes(shape)
                .map_err(|e| format!("tensor '{name}' ({t}, shape {shape:?}): {e}"))?;
            at = at
                .checked_add(size)
                .and_then(|e| align_up(e, alignment))
                .ok_or_else(|| format!("tensor '{name}' ends past 2^64"))?;
        }
        Ok(offsets)
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), unless that
/// overflows.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    x.checked_add(mask).map(|v| v & !mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggraph_core::dtype::DType;

    fn f32t() -> GgmlType {
        GgmlType::from(DType::F32)
    }

    fn info(name: &str, shape: &[u64], offset: u64) -> TensorInfo {
        TensorInfo::new(name, f32t(), shape.to_vec(), offset).unwrap()
    }

    #[test]
    fn a_valid_header_is_indexed_by_key_and_tensor_name() {
        let h = GgufHeader::new(
            3,
            vec![("general.architecture".into(), Value::from("llama"))],
            vec![info("a", &[8], 0), info("b", &[4, 2], 32)],
        )
        .unwrap();
        assert_eq!(h.get("general.architecture"), Some(&Value::from("llama")));
        assert_eq!(h.tensor("b").unwrap().size_bytes, 32);
        assert_eq!(h.data_len(), 64);
        assert_eq!(h.alignment(), 32);
        assert!(!h.data_present());
    }

    #[test]
    fn duplicates_bad_alignment_and_overlaps_are_refused() {
        let dup = GgufHeader::new(
            3,
            vec![("k".into(), Value::U32(1)), ("k".into(), Value::U32(2))],
            vec![],
        );
        assert!(dup.unwrap_err().contains("duplicate metadata key 'k'"));
        let dup_t = GgufHeader::new(3, vec![], vec![info("a", &[8], 0), info("a", &[8], 32)]);
        assert!(dup_t.unwrap_err().contains("duplicate tensor name"));
        let align = GgufHeader::new(3, vec![(ALIGNMENT_KEY.into(), Value::U32(48))], vec![]);
        assert!(align.unwrap_err().contains("power of two"));
        let align_t = GgufHeader::new(3, vec![(ALIGNMENT_KEY.into(), Value::U64(64))], vec![]);
        assert!(align_t.unwrap_err().contains("uint32"));
        let misaligned = GgufHeader::new(3, vec![], vec![info("a", &[8], 16)]);
        assert!(
            misaligned
                .unwrap_err()
                .contains("not a multiple of the alignment 32")
        );
        let overlap = GgufHeader::new(3, vec![], vec![info("a", &[16], 0), info("b", &[8], 32)]);
        assert!(overlap.unwrap_err().contains("overlap"));
        let v1 = GgufHeader::new(1, vec![], vec![]);
        assert!(v1.unwrap_err().contains("version 1"));
    }

    #[test]
    fn tensor_infos_check_dimensions_and_block_sizes() {
        assert!(
            TensorInfo::new("x", f32t(), vec![1; 5], 0)
                .unwrap_err()
                .contains("at most 4")
        );
        let q4k = GgmlType::from(DType::Q4_K);
        let e = TensorInfo::new("x", q4k, vec![100], 0).unwrap_err();
        assert!(e.contains("'x'") && e.contains("block size 256"), "{e}");
        assert_eq!(info("s", &[], 0).ne(), [1, 1, 1, 1]);
    }

    #[test]
    fn packed_offsets_round_each_tensor_up_to_the_alignment() {
        let t = |n: &str, s: &[u64]| (n.to_string(), f32t(), s.to_vec());
        let offs = GgufHeader::packed_offsets(&[t("a", &[3]), t("b", &[8]), t("c", &[1])], 32);
        assert_eq!(offs.unwrap(), vec![0, 32, 64]);
        assert_eq!(align_up(33, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
    }
}
