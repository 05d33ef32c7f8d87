//! The wire protocol of ggml's RPC server, version 7: commands, message
//! sizes, tensor flags and the hash of the server's cache.
//!
//! Every message is little-endian and packed. A request is
//! `u8 command | u64 size | payload`; a reply, for the commands that
//! have one, is `u64 size | payload`. The server answers nothing on an
//! error: it closes the connection and frees everything allocated on it.

/// A protocol version as the server's HELLO reply gives it. The client
/// connects only to a version it has an op table for, matched exactly
/// (now 7.0.0): ggml renumbers its ops between versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProtocolVersion {
    /// ggml's `RPC_PROTO_MAJOR_VERSION`.
    pub major: u8,
    /// ggml's `RPC_PROTO_MINOR_VERSION`.
    pub minor: u8,
    /// ggml's `RPC_PROTO_PATCH_VERSION`.
    pub patch: u8,
}

impl std::fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The commands, by their numbers on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Command {
    AllocBuffer = 0,
    GetAlignment = 1,
    GetMaxSize = 2,
    BufferGetBase = 3,
    FreeBuffer = 4,
    BufferClear = 5,
    SetTensor = 6,
    SetTensorHash = 7,
    GetTensor = 8,
    CopyTensor = 9,
    GraphCompute = 10,
    GetDeviceMemory = 11,
    Hello = 14,
    DeviceCount = 15,
    GraphRecompute = 16,
    MemsetTensor = 17,
}

/// Bytes of the capability block of HELLO (RDMA negotiation; zeros
/// keep the connection on plain TCP).
pub(crate) const HELLO_CAPS_BYTES: usize = 24;
/// Bytes of the HELLO reply: major, minor, patch, padding, capabilities.
pub(crate) const HELLO_REPLY_BYTES: u64 = 4 + HELLO_CAPS_BYTES as u64;

/// Bytes of one serialised tensor (`rpc_tensor`).
pub(crate) const WIRE_TENSOR_BYTES: usize = 296;

/// `ggml_tensor_flag` bits.
pub(crate) const FLAG_INPUT: i32 = 1;
pub(crate) const FLAG_OUTPUT: i32 = 2;
/// Nodes without this bit are skipped by ggml's compute loops.
pub(crate) const FLAG_COMPUTE: i32 = 16;

/// ggml's `GGML_TYPE_I8`: byte ranges travel as 1-D I8 tensors.
pub(crate) const GGML_TYPE_I8: u32 = 24;

/// Weight writes larger than this try the server's cache by hash first,
/// as the stock client does.
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;

/// The FNV-1a 64-bit hash the server's cache names its files by.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published FNV-1a test vectors.
    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
