//! GGUF: ggml's model file format, read and written by our own code.
//!
//! - [`ModelFile::open`] maps a complete file and checks its header and
//!   that every tensor lies inside the file; tensor bytes are read from
//!   the map on demand ([`ModelFile::tensor_data`]).
//! - [`ModelFile::open_header`] reads only the prefix that holds the
//!   metadata and tensor infos. It works on a prefix file without any
//!   tensor data, for estimating models one has not downloaded;
//!   [`GgufHeader::data_present`] says whether the data is there.
//! - [`GgufHeader`] holds the checked metadata and tensor infos, with typed
//!   getters ([`GgufHeader::hparam_u32`], [`GgufHeader::layer_u32s`], ...);
//!   architectures read their hyperparameters through them
//!   ([`crate::arch::read_config`]).
//! - [`json`] converts a header to and from JSON; [`GgufWriter`] writes
//!   files and header prefixes.
//!
//! Versions 2 and 3 are read (they share a layout; version 1, with 32-bit
//! counts, is refused, as are big-endian files). Checks, each with an
//! error that says what was found where: magic and version; every count and
//! string length against the bytes left in the file; value types; nested
//! arrays (refused, as by ggml); duplicate keys and tensor names;
//! `general.alignment` a `uint32` power of two; at most 4 dimensions;
//! known ggml types (removed and unknown ids are named); whole blocks per
//! row; sizes that fit 64 bits; tensor offsets aligned, not overlapping,
//! and inside the file when data is required. Unlike ggml, tensors need not
//! be packed in order. Tensor types ggraph cannot compute (Q5_K, IQ4_XS,
//! ...) are read and sized all the same ([`GgmlType`]).

pub mod file;
pub mod header;
pub mod json;
pub mod metadata;
pub mod reader;
pub mod types;
pub mod value;
pub mod writer;

pub use file::{ModelFile, Progress, read_header};
pub use header::{DEFAULT_ALIGNMENT, FileLayout, GgufHeader, TensorInfo};
pub use json::{JsonOptions, header_from_json, header_from_json_str};
pub(crate) use metadata::meta_error;
pub use types::{GgmlType, UnknownType};
pub use value::{Array, ArrayValues, Value, ValueType};
pub use writer::{GgufWriter, encode_header};

use ggraph_core::error::{Error, Result};

/// Parses a header from bytes that are a whole GGUF file or a prefix of
/// one (for a prefix, [`GgufHeader::data_present`] is false). `file` names
/// the source in errors.
pub fn parse_header(bytes: &[u8], file: &str) -> Result<GgufHeader> {
    match reader::parse(bytes, bytes.len() as u64) {
        Ok(h) => Ok(h),
        Err(reader::ParseError::Bad(msg)) => Err(Error::Format {
            file: file.to_string(),
            msg,
        }),
        // Cannot happen when the slice is the whole input, but say so
        // rather than panic.
        Err(reader::ParseError::More { needed }) => Err(Error::Format {
            file: file.to_string(),
            msg: format!("file is truncated: the header needs {needed} bytes"),
        }),
    }
}
