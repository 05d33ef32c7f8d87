//! Parsing GGUF bytes (v2 and v3, little-endian) into a [`GgufHeader`].
//!
//! The parser reads from a byte slice that is either the whole file or a
//! prefix of it, and is told the length of the whole file. Every count and
//! length is checked against the bytes the file can still hold before
//! anything is allocated, so a corrupt count is an error, not a huge
//! allocation. When the slice is only a prefix and the parse runs past
//! it, the parser says how many bytes it needs, so that the caller can read
//! more and try again (see [`super::file::read_header`]). It never panics:
//! all arithmetic on file values is checked.
//!
//! Layout (all little-endian):
//! ```text
//! "GGUF" | version u32 | tensor_count u64 | kv_count u64
//! kv_count   x (key: string, type: u32, value)
//! tensor_count x (name: string, n_dims: u32, dims: n_dims x u64, ggml_type: u32, offset: u64)
//! padding to general.alignment | tensor data
//! string = len u64 + bytes; array = elem type u32 + count u64 + elements
//! ```

use super::header::{FileLayout, GgufHeader, TensorInfo, align_up};
use super::types::GgmlType;
use super::value::{Array, ArrayValues, Value, ValueType};

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Why a parse stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// The slice ended; the file has more. At least `needed` bytes from the
    /// start of the file are needed to go on.
    More { needed: u64 },
    /// The file is malformed or unsupported.
    Bad(String),
}

type Parsed<T> = Result<T, ParseError>;

fn bad<T>(msg: impl Into<String>) -> Parsed<T> {
    Err(ParseError::Bad(msg.into()))
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Length of the whole file; `buf` may be a prefix of it.
    file_len: u64,
}

impl<'a> Cursor<'a> {
    /// Makes sure `n` more bytes can be read; `what` names them for the
    /// error message.
    fn need(&self, n: u64, what: &dyn Fn() -> String) -> Parsed<()> {
        let pos = self.pos as u64;
        let end = pos.checked_add(n).ok_or_else(|| {
            ParseError::Bad(format!("{} at offset {pos}: length {n} overflows", what()))
        })?;
        if end > self.file_len {
            return bad(format!(
                "file is truncated: {} at offset {pos} needs {n} bytes, but the file ends at {}",
                what(),
                self.file_len
            ));
        }
        if end > self.buf.len() as u64 {
            return Err(ParseError::More { needed: end });
        }
        Ok(())
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Parsed<&'a [u8]> {
        self.need(n, what)?;
        // `need` checked that pos + n fits in buf, so n fits in usize.
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Parsed<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Parsed<u32> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Parsed<u64> {
        self.array::<8>(what).map(u64::from_le_bytes)
    }

    /// Bytes the file still holds after the cursor.
    fn remaining_in_file(&self) -> u64 {
        self.file_len.saturating_sub(self.pos as u64)
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit
    /// in what is left of the file, before anything is allocated for them.
    fn check_count(&self, count: u64, min_size: u64, what: &dyn Fn() -> String) -> Parsed<()> {
        let fits = count
            .checked_mul(min_size)
            .is_some_and(|n| n <= self.remaining_in_file());
        if fits {
            Ok(())
        } else {
            bad(format!(
                "{} at offset {}: {count} items of at least {min_size} bytes each cannot fit in the {} bytes left in the file (truncated or corrupt)",
                what(),
                self.pos,
                self.remaining_in_file()
            ))
        }
    }

    fn raw_string(&mut self, what: &dyn Fn() -> String) -> Parsed<&'a [u8]> {
        let len = self.u64(what)?;
        self.take(len, what)
    }

    /// A string that names something (key, tensor): must be UTF-8.
    fn name(&mut self, what: &dyn Fn() -> String) -> Parsed<String> {
        let at = self.pos;
        let bytes = self.raw_string(what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => bad(format!("{} at offset {at} is not valid UTF-8", what())),
        }
    }

    /// A string value: invalid UTF-8 is replaced (U+FFFD) rather than
    /// refused, as ggml does not check it either.
    fn string_value(&mut self, what: &dyn Fn() -> String) -> Parsed<String> {
        let bytes = self.raw_string(what)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

fn value_type(id: u32, key: &str) -> Parsed<ValueType> {
    ValueType::from_id(id).map_or_else(
        || {
            bad(format!(
                "key '{key}' has unknown value type {id} (known: 0..=12)"
            ))
        },
        Ok,
    )
}

/// Reads `count` fixed-size elements with `conv` after checking they fit.
fn fixed<const N: usize, T>(
    c: &mut Cursor<'_>,
    count: u64,
    what: &dyn Fn() -> String,
    conv: fn([u8; N]) -> T,
) -> Parsed<Vec<T>> {
    let bytes = c.take(count.saturating_mul(N as u64), what)?;
    Ok(bytes
        .chunks_exact(N)
        .map(|ch| {
            let mut a = [0u8; N];
            a.copy_from_slice(ch);
            conv(a)
        })
        .collect())
}

fn scalar(c: &mut Cursor<'_>, t: ValueType, key: &str) -> Parsed<Value> {
    let what = || format!("value of '{key}'");
    let what: &dyn Fn() -> String = &what;
    Ok(match t {
        ValueType::U8 => Value::U8(c.array::<1>(what)?[0]),
        ValueType::I8 => Value::I8(i8::from_le_bytes(c.array(what)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(c.array(what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        // ggml stores bools as one byte and does not check it; any
        // non-zero byte reads as true.
        ValueType::Bool => Value::Bool(c.array::<1>(what)?[0] != 0),
        ValueType::String => Value::String(c.string_value(what)?),
        ValueType::U64 => Value::U64(u64::from_le_bytes(c.array(what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        ValueType::Array => array(c, key)?,
    })
}

fn array(c: &mut Cursor<'_>, key: &str) -> Parsed<Value> {
    let what = || format!("array '{key}'");
    let what: &dyn Fn() -> String = &what;
    let elem = value_type(c.u32(what)?, key)?;
    if elem == ValueType::Array {
        return bad(format!(
            "key '{key}' is an array of arrays; GGUF readers (ggml's included) do not support nested arrays"
        ));
    }
    let count = c.u64(what)?;
    c.check_count(count, elem.min_size() as u64, what)?;
    let values = match elem {
        ValueType::U8 => ArrayValues::U8(fixed(c, count, what, |[b]| b)?),
        ValueType::I8 => ArrayValues::I8(fixed(c, count, what, i8::from_le_bytes)?),
        ValueType::U16 => ArrayValues::U16(fixed(c, count, what, u16::from_le_bytes)?),
        ValueType::I16 => ArrayValues::I16(fixed(c, count, what, i16::from_le_bytes)?),
        ValueType::U32 => ArrayValues::U32(fixed(c, count, what, u32::from_le_bytes)?),
        ValueType::I32 => ArrayValues::I32(fixed(c, count, what, i32::from_le_bytes)?),
        ValueType::F32 => ArrayValues::F32(fixed(c, count, what, f32::from_le_bytes)?),
        ValueType::Bool => ArrayValues::Bool(fixed(c, count, what, |[b]| b != 0)?),
        ValueType::U64 => ArrayValues::U64(fixed(c, count, what, u64::from_le_bytes)?),
        ValueType::I64 => ArrayValues::I64(fixed(c, count, what, i64::from_le_bytes)?),
        ValueType::F64 => ArrayValues::F64(fixed(c, count, what, f64::from_le_bytes)?),
        ValueType::String => {
            let mut v = Vec::with_capacity(initial_capacity(count));
            for i in 0..count {
                v.push(c.string_value(&|| format!("element {i} of array '{key}'"))?);
            }
            ArrayValues::String(v)
        }
        ValueType::Array => return bad("nested array"),
    };
    Ok(Value::Array(Array::new(values)))
}

/// Room reserved up front for `count` items: counts were checked against
/// the file size, but an item in memory is larger than its minimum size on
/// disk, so a corrupt count could still ask for several times the file
/// size. Reserve a bounded amount and let the vector grow as items parse.
fn initial_capacity(count: u64) -> usize {
    count.min(4096) as usize
}

/// Parses the header from `buf`, the first `buf.len()` bytes of a file of
/// `file_len` bytes (`buf.len() <= file_len`).
pub(crate) fn parse(buf: &[u8], file_len: u64) -> Parsed<GgufHeader> {
    let mut c = Cursor {
        buf,
        pos: 0,
        file_len: file_len.max(buf.len() as u64),
    };
    let magic = c.array::<4>(&|| "magic".to_string())?;
    if magic != MAGIC {
        return bad(format!(
            "not a GGUF file: it starts with {magic:02x?}, GGUF files start with \"GGUF\" (47 47 55 46)"
        ));
    }
    let version = c.u32(&|| "version".to_string())?;
    if version & 0xffff == 0 && version != 0 {
        return bad(format!(
            "big-endian GGUF (version field reads {version:#x}); ggraph reads little-endian files only"
        ));
    }
    if !(2..=3).contains(&version) {
        return bad(format!(
            "GGUF version {version} is not supported (ggraph reads versions 2 and 3)"
        ));
    }
    let n_tensors = c.u64(&|| "tensor count".to_string())?;
    let n_kv = c.u64(&|| "metadata count".to_string())?;
    // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes,
    // a tensor info at least 8 (name length) + 4 + 4 + 8.
    let min_header = n_kv
        .checked_mul(13)
        .zip(n_tensors.checked_mul(24))
        .and_then(|(a, b)| a.checked_add(b));
    if min_header.is_none_or(|n| n > c.remaining_in_file()) {
        return bad(format!(
            "header claims {n_kv} key-value pairs and {n_tensors} tensors, which cannot fit in a file of {} bytes (truncated or corrupt)",
            c.file_len
        ));
    }

    let mut kv = Vec::with_capacity(initial_capacity(n_kv));
    for i in 0..n_kv {
        let key = c.name(&|| format!("key of metadata pair {i}"))?;
        let t = value_type(c.u32(&|| format!("type of '{key}'"))?, &key)?;
        let v = scalar(&mut c, t, &key)?;
        kv.push((key, v));
    }

    let mut tensors = Vec::with_capacity(initial_capacity(n_tensors));
    for i in 0..n_tensors {
        let name = c.name(&|| format!("name of tensor {i}"))?;
        let what = || format!("info of tensor '{name}'");
        let what: &dyn Fn() -> String = &what;
        let n_dims = c.u32(what)?;
        if n_dims as usize > super::header::MAX_DIMS {
            return bad(format!(
                "tensor '{name}' has {n_dims} dimensions; ggml allows at most {}",
                super::header::MAX_DIMS
            ));
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            shape.push(c.u64(what)?);
        }
        let type_id = c.u32(what)?;
        let ggml_type = GgmlType::from_id(type_id)
            .map_err(|e| ParseError::Bad(format!("tensor '{name}' has {e}")))?;
        let offset = c.u64(what)?;
        tensors.push(TensorInfo::new(name, ggml_type, shape, offset).map_err(ParseError::Bad)?);
    }

    let header_len = c.pos as u64;
    let header = GgufHeader::new(version, kv, tensors).map_err(ParseError::Bad)?;
    let data_offset = align_up(header_len, header.alignment())
        .ok_or_else(|| ParseError::Bad("data offset overflows".into()))?;
    Ok(header.with_layout(FileLayout {
        file_len: c.file_len,
        header_len,
        data_offset,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    /// A v3 file with one u32 pair and one F32 tensor of 4 values.
    fn tiny() -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        string(&mut b, "llama.block_count");
        b.extend(4u32.to_le_bytes());
        b.extend(2u32.to_le_bytes());
        string(&mut b, "w");
        b.extend(1u32.to_le_bytes());
        b.extend(4u64.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        while b.len() % 32 != 0 {
            b.push(0);
        }
        b.extend([0u8; 16]);
        b
    }

    #[test]
    fn a_small_file_parses_with_its_layout() {
        let b = tiny();
        let h = parse(&b, b.len() as u64).unwrap();
        assert_eq!(h.version(), 3);
        assert_eq!(h.get("llama.block_count"), Some(&Value::U32(2)));
        let l = h.layout().unwrap();
        assert_eq!(l.data_offset, 96);
        assert!(l.header_len <= 96);
        assert!(h.data_present());
    }

    #[test]
    fn a_prefix_asks_for_more_and_a_short_file_is_truncated() {
        let b = tiny();
        let e = parse(&b[..20], b.len() as u64).unwrap_err();
        assert!(matches!(e, ParseError::More { needed } if needed > 20));
        let e = parse(&b[..20], 20).unwrap_err();
        assert!(
            matches!(&e, ParseError::Bad(m) if m.contains("truncated")),
            "{e:?}"
        );
        // The header alone is a valid prefix: the data is just absent.
        let l = parse(&b, b.len() as u64).unwrap().layout().unwrap();
        let h = parse(&b[..l.header_len as usize], l.header_len).unwrap();
        assert!(!h.data_present());
    }

    #[test]
    fn big_endian_and_old_versions_are_named() {
        let mut b = tiny();
        b[4..8].copy_from_slice(&3u32.to_be_bytes());
        let e = parse(&b, b.len() as u64).unwrap_err();
        assert!(
            matches!(&e, ParseError::Bad(m) if m.contains("big-endian")),
            "{e:?}"
        );
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        let e = parse(&b, b.len() as u64).unwrap_err();
        assert!(
            matches!(&e, ParseError::Bad(m) if m.contains("version 1")),
            "{e:?}"
        );
    }
}
