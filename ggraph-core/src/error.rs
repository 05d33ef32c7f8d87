//! The one error type of ggraph-core.
//!
//! Every variant says what was asked and what was there, so that a user can
//! act on it without reading the source.

use crate::dtype::DType;

/// Everything that can go wrong in ggraph-core and the backends built on it.
///
/// [`Error::is_out_of_memory`] tells the errors that placing less on a device
/// may cure from the others.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op was given operands whose shapes do not fit together.
    #[error("{op}: shape mismatch: {msg}")]
    Shape {
        /// The op, in ggml's spelling (`mul_mat`, `view`).
        op: &'static str,
        /// The shapes found and the rule they break.
        msg: String,
    },

    /// An op was given an operand of a type it does not take.
    #[error("{op}: {operand} has type {found}, expected {expected}")]
    Type {
        /// The op, in ggml's spelling.
        op: &'static str,
        /// Which operand (`a`, `b`, `ids`, ...).
        operand: &'static str,
        /// The operand's type.
        found: DType,
        /// The types the op takes there, in words (`F32, F16 or BF16`).
        expected: String,
    },

    /// A buffer could not be allocated.
    #[error(
        "out of memory on {buffer_type}: {requested_bytes} bytes requested, {available_bytes} available"
    )]
    OutOfMemory {
        /// Name of the buffer type asked (`CPU`, `cuda:0`), with what the
        /// memory was for in parentheses where the caller knows it.
        buffer_type: String,
        /// Bytes the failed request needed.
        requested_bytes: u64,
        /// Bytes that were free there, or 0 when that is not known.
        available_bytes: u64,
    },

    /// One tensor is larger than the largest buffer its buffer type
    /// allocates: no amount of free memory makes it fit there.
    #[error(
        "{what} '{name}' takes {bytes} bytes, more than the largest buffer of this type ({max_bytes} bytes)"
    )]
    TooLarge {
        /// What kind of thing was placed (`tensor`, `weight`).
        what: &'static str,
        /// Its name.
        name: String,
        /// Its size.
        bytes: u64,
        /// The buffer type's [`max_size`](crate::backend::BufferType::max_size).
        max_bytes: u64,
    },

    /// A read, write or copy went past the end of a buffer.
    #[error("{what}: bytes {offset}..{end} are outside a buffer of {size} bytes")]
    OutOfBounds {
        /// The operation (`read`, `write`, `set_data`, ...).
        what: &'static str,
        /// First byte asked for.
        offset: u64,
        /// One past the last byte asked for.
        end: u64,
        /// The buffer's size in bytes.
        size: u64,
    },

    /// A device was asked to run something it does not support.
    #[error("{device} does not support {what}")]
    Unsupported {
        /// The device's name; in scheduling errors also the buffer type or
        /// `every backend` that lacked the support.
        device: String,
        /// The op, type or feature asked for.
        what: String,
    },

    /// A backend failed (driver error, kernel compile error, lost device).
    #[error("{device}: {msg}")]
    Backend {
        /// The device's name.
        device: String,
        /// The backend's own message.
        msg: String,
    },

    /// A tensor that needs memory has none yet; holds the tensor's name.
    #[error("tensor '{0}' has no memory: allocate the graph first")]
    Unallocated(String),

    /// An argument that is wrong in a way the other variants do not cover.
    #[error("{0}")]
    InvalidArgument(String),

    /// A model file (GGUF, GGUF header prefix or header JSON) is malformed
    /// or uses something ggraph does not read. `file` names the file (or
    /// `<memory>`), `msg` says what was found where.
    #[error("{file}: {msg}")]
    Format {
        /// The file's path, or `<memory>`.
        file: String,
        /// What was found where.
        msg: String,
    },

    /// A compute was stopped by its abort callback.
    #[error("compute aborted by the abort callback")]
    Aborted,

    /// An I/O operation failed (reading or mapping a model file, say).
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

    /// An [`Error::Backend`] for the device named `device`.
    pub fn backend(device: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::Backend {
            device: device.into(),
            msg: msg.into(),
        }
    }
}

/// `std::result::Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
