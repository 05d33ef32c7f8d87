//! Writing GGUF files (v2 or v3), for tests, fixtures and header prefixes.
//!
//! The layout is the one ggml and the `gguf` Python package write: the
//! header, zero padding to the alignment, then each tensor's bytes at its
//! offset followed by zero padding to the alignment. Tensors added without
//! an offset are packed in order, so a file read and written again comes
//! out byte for byte the same.

use std::io::Write;

use super::header::{GgufHeader, TensorInfo, align_up};
use super::reader::MAGIC;
use super::types::GgmlType;
use super::value::{ArrayValues, Value};
use ggraph_core::error::{Error, Result};

fn invalid(msg: impl Into<String>) -> Error {
    Error::Format {
        file: "<gguf writer>".into(),
        msg: msg.into(),
    }
}

struct PendingTensor {
    name: String,
    ggml_type: GgmlType,
    shape: Vec<u64>,
    offset: Option<u64>,
    data: Option<Vec<u8>>,
}

/// Builds a GGUF file in memory.
pub struct GgufWriter {
    version: u32,
    kv: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty version 3 file.
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            kv: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// A writer holding `h`'s key-value pairs and tensor infos at their
    /// offsets, without tensor data: enough for [`GgufWriter::header_bytes`].
    pub fn from_header(h: &GgufHeader) -> GgufWriter {
        GgufWriter {
            version: h.version(),
            kv: h.kv().to_vec(),
            tensors: h
                .tensors()
                .iter()
                .map(|t| PendingTensor {
                    name: t.name.clone(),
                    ggml_type: t.ggml_type,
                    shape: t.shape.clone(),
                    offset: Some(t.offset),
                    data: None,
                })
                .collect(),
        }
    }

    /// Sets the GGUF version written (2 and 3 have the same layout).
    pub fn set_version(&mut self, version: u32) -> &mut GgufWriter {
        self.version = version;
        self
    }

    /// Appends a key-value pair (duplicates are refused when writing).
    pub fn kv(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut GgufWriter {
        self.kv.push((key.into(), value.into()));
        self
    }

    /// Appends a tensor with its bytes, packed after the previous ones.
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        ggml_type: GgmlType,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<&mut GgufWriter> {
        let name = name.into();
        let size = ggml_type
            .tensor_bytes(shape)
            .map_err(|e| invalid(format!("tensor '{name}': {e}")))?;
        if data.len() as u64 != size {
            return Err(invalid(format!(
                "tensor '{name}' ({ggml_type} {shape:?}) takes {size} bytes, {} given",
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name,
            ggml_type,
            shape: shape.to_vec(),
            offset: None,
            data: Some(data),
        });
        Ok(self)
    }

    /// Gives the tensor named `name` its bytes (for a writer made with
    /// [`GgufWriter::from_header`]).
    pub fn set_data(&mut self, name: &str, data: Vec<u8>) -> Result<()> {
        let t = self
            .tensors
            .iter_mut()
            .find(|t| t.name == name)
            .ok_or_else(|| invalid(format!("no tensor named '{name}'")))?;
        t.data = Some(data);
        Ok(())
    }

    /// The header this writer describes, checked.
    pub fn header(&self) -> Result<GgufHeader> {
        // The alignment comes from the pairs; GgufHeader::new checks it.
        let probe = GgufHeader::new(self.version, self.kv.clone(), Vec::new()).map_err(invalid)?;
        let align = probe.alignment();
        let mut infos = Vec::with_capacity(self.tensors.len());
        let mut end = 0u64;
        for t in &self.tensors {
            let offset = match t.offset {
                Some(o) => o,
                None => align_up(end, align)
                    .ok_or_else(|| invalid(format!("tensor '{}' ends past 2^64", t.name)))?,
            };
            let info = TensorInfo::new(t.name.clone(), t.ggml_type, t.shape.clone(), offset)
                .map_err(invalid)?;
            end = end.max(info.end());
            infos.push(info);
        }
        GgufHeader::new(self.version, self.kv.clone(), infos).map_err(invalid)
    }

    /// The header's bytes, from the magic to the end of the tensor infos
    /// (no padding): a header prefix, as estimates read.
    pub fn header_bytes(&self) -> Result<Vec<u8>> {
        encode_header(&self.header()?)
    }

    /// The whole file. Every tensor needs its bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let h = self.header()?;
        let mut out = encode_header(&h)?;
        let align = h.alignment();
        let data_offset = align_up(out.len() as u64, align).ok_or_else(|| invalid("overflow"))?;
        out.resize(data_offset as usize, 0);
        let mut order: Vec<(&TensorInfo, &PendingTensor)> =
            h.tensors().iter().zip(&self.tensors).collect();
        order.sort_by_key(|(i, _)| i.offset);
        for (info, t) in order {
            let data = t
                .data
                .as_ref()
                .ok_or_else(|| invalid(format!("tensor '{}' has no data to write", info.name)))?;
            if data.len() as u64 != info.size_bytes {
                return Err(invalid(format!(
                    "tensor '{}' takes {} bytes, {} given",
                    info.name,
                    info.size_bytes,
                    data.len()
                )));
            }
            let start = usize::try_from(data_offset + info.offset)
                .map_err(|_| invalid("file too large for memory"))?;
            out.resize(start, 0);
            out.extend_from_slice(data);
            let padded = align_up(out.len() as u64, align).ok_or_else(|| invalid("overflow"))?;
            out.resize(padded as usize, 0);
        }
        Ok(out)
    }

    /// Writes the whole file to `w`.
    pub fn write_to(&self, w: &mut dyn Write) -> Result<()> {
        w.write_all(&self.to_bytes()?)?;
        Ok(())
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, key: &str, v: &Value) -> Result<()> {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend(x.to_le_bytes()),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
        Value::Array(a) => {
            let values = a.values().ok_or_else(|| {
                invalid(format!(
                    "array '{key}' is known only by its length ({} x {}); its values are needed to write it",
                    a.len(),
                    a.elem_type()
                ))
            })?;
            out.extend(a.elem_type().id().to_le_bytes());
            out.extend(a.len().to_le_bytes());
            match values {
                ArrayValues::U8(v) => out.extend(v),
                ArrayValues::I8(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::U16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::I16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::U32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::I32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::F32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::Bool(v) => v.iter().for_each(|&x| out.push(u8::from(x))),
                ArrayValues::String(v) => v.iter().for_each(|s| put_str(out, s)),
                ArrayValues::U64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::I64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
                ArrayValues::F64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            }
        }
    }
    Ok(())
}

/// The bytes of `h` from the magic to the end of the tensor infos.
pub fn encode_header(h: &GgufHeader) -> Result<Vec<u8>> {
    let mut out = MAGIC.to_vec();
    out.extend(h.version().to_le_bytes());
    out.extend((h.tensors().len() as u64).to_le_bytes());
    out.extend((h.kv().len() as u64).to_le_bytes());
    for (k, v) in h.kv() {
        put_str(&mut out, k);
        out.extend(v.value_type().id().to_le_bytes());
        put_value(&mut out, k, v)?;
    }
    for t in h.tensors() {
        put_str(&mut out, &t.name);
        out.extend((t.shape.len() as u32).to_le_bytes());
        for d in &t.shape {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.ggml_type.id().to_le_bytes());
        out.extend(t.offset.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::reader::parse;
    use crate::gguf::value::Array;
    use ggraph_core::dtype::DType;

    #[test]
    fn written_files_read_back_the_same() {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", "llama")
            .kv("general.alignment", Value::U32(64))
            .kv("a.list", ArrayValues::String(vec!["x".into(), "yz".into()]))
            .kv("a.f", Value::F64(0.25));
        w.tensor("t0", DType::F32.into(), &[3], vec![1; 12])
            .unwrap();
        w.tensor("t1", DType::Q8_0.into(), &[32, 2], vec![2; 68])
            .unwrap();
        let bytes = w.to_bytes().unwrap();
        assert_eq!(bytes.len() % 64, 0);
        let h = parse(&bytes, bytes.len() as u64).unwrap();
        assert_eq!(h, w.header().unwrap());
        assert_eq!(h.tensor("t1").unwrap().offset, 64);
        let start = (h.layout().unwrap().data_offset + 64) as usize;
        assert_eq!(&bytes[start..start + 68], &[2u8; 68][..]);
    }

    #[test]
    fn wrong_data_sizes_and_length_only_arrays_are_refused() {
        let mut w = GgufWriter::new();
        assert!(w.tensor("t", DType::F32.into(), &[3], vec![0; 8]).is_err());
        w.kv(
            "tokenizer.ggml.tokens",
            Value::Array(Array::of_len(crate::gguf::ValueType::String, 5).unwrap()),
        );
        let e = w.header_bytes().unwrap_err().to_string();
        assert!(e.contains("known only by its length"), "{e}");
    }
}
