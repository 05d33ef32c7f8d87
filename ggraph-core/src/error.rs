//! The one error type of ggraph-core.
//!
//! Every variant says what was asked and what was there, so that a user can
//! act on it without reading the source.

use crate::dtype::DType;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op was given operands whose shapes do not fit together.
    #[error("{op}: shape mismatch: {msg}")]
    Shape { op: &'static str, msg: String },

    /// An op was given an operand of a type it does not take.
    #[error("{op}: {operand} has type {found}, expected {expected}")]
    Type {
        op: &'static str,
        operand: &'static str,
        found: DType,
        expected: String,
    },

    /// A buffer could not be allocated.
    #[error(
        "out of memory on {buffer_type}: {requested_bytes} bytes requested, {available_bytes} available"
    )]
    OutOfMemory {
        buffer_type: String,
        requested_bytes: u64,
        available_bytes: u64,
    },

    /// One tensor is larger than the largest buffer its buffer type
    /// allocates: no amount of free memory makes it fit there.
    #[error(
        "{what} '{name}' takes {bytes} bytes, more than the largest buffer of this type ({max_bytes} bytes)"
    )]
    TooLarge {
        what: &'static str,
        name: String,
        bytes: u64,
        max_bytes: u64,
    },

    /// A read, write or copy went past the end of a buffer.
    #[error("{what}: bytes {offset}..{end} are outside a buffer of {size} bytes")]
    OutOfBounds {
        what: &'static str,
        offset: u64,
        end: u64,
        size: u64,
    },

    /// A device was asked to run something it does not support.
    #[error("{device} does not support {what}")]
    Unsupported { device: String, what: String },

    /// A backend failed (driver error, kernel compile error, lost device).
    #[error("{device}: {msg}")]
    Backend { device: String, msg: String },

    /// A tensor that needs memory has none yet.
    #[error("tensor '{0}' has no memory: allocate the graph first")]
    Unallocated(String),

    /// An argument that is wrong in a way the other variants do not cover.
    #[error("{0}")]
    InvalidArgument(String),

    /// A model file (GGUF, GGUF header prefix or header JSON) is malformed
    /// or uses something ggraph does not read. `file` names the file (or
    /// `<memory>`), `msg` says what was found where.
    #[error("{file}: {msg}")]
    Format { file: String, msg: String },

    /// A compute was stopped by its abort callback.
    #[error("compute aborted by the abort callback")]
    Aborted,

    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    pub(crate) fn shape(op: &'static str, msg: impl Into<String>) -> Error {
        Error::Shape {
            op,
            msg: msg.into(),
        }
    }

    pub(crate) fn dtype(
        op: &'static str,
        operand: &'static str,
        found: DType,
        expected: impl Into<String>,
    ) -> Error {
        Error::Type {
            op,
            operand,
            found,
            expected: expected.into(),
        }
    }

    /// Memory ran out, or a tensor is larger than a buffer can be: the
    /// request may succeed with less placed on that memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::OutOfMemory { .. } | Error::TooLarge { .. })
    }

    pub fn backend(device: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::Backend {
            device: device.into(),
            msg: msg.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
