//! `rpc_tensor`: one tensor as the server reads it (296 packed bytes).
//! Addresses are the server's: `buffer` is its handle of the buffer,
//! `data` the absolute address of the first byte (views included: the
//! server never derives it from the view's source).

use crate::protocol::{GGML_TYPE_I8, WIRE_TENSOR_BYTES};

/// The fields of `rpc_tensor`. Ids are the client's: any non-zero value,
/// unique within one message; 0 means "none".
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct WireTensor {
    pub id: u64,
    pub ggml_type: u32,
    pub buffer: u64,
    pub ne: [u32; 4],
    pub nb: [u32; 4],
    pub op: u32,
    pub op_params: [i32; 16],
    pub flags: i32,
    pub src: [u64; 10],
    pub view_src: u64,
    pub view_offs: u64,
    pub data: u64,
    pub name: String,
}

impl WireTensor {
    /// `len` bytes at server address `data` of buffer `buffer`, as a 1-D
    /// I8 tensor: the shape the server checks a byte range against.
    pub fn byte_range(buffer: u64, data: u64, len: u32) -> WireTensor {
        WireTensor {
            id: 1,
            ggml_type: GGML_TYPE_I8,
            buffer,
            ne: [len, 1, 1, 1],
            nb: [1, len, len, len],
            data,
            ..WireTensor::default()
        }
    }

    /// Appends the 296 bytes of the tensor.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.ggml_type.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        for v in self.ne.iter().chain(&self.nb) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.op.to_le_bytes());
        for p in &self.op_params {
            out.extend_from_slice(&p.to_le_bytes());
        }
        out.extend_from_slice(&self.flags.to_le_bytes());
        for s in &self.src {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        // 63 bytes of name at most, NUL-padded to 64, cut at a char boundary
        let mut name = [0u8; 64];
        let mut n = self.name.len().min(63);
        while !self.name.is_char_boundary(n) {
            n -= 1;
        }
        name[..n].copy_from_slice(&self.name.as_bytes()[..n]);
        out.extend_from_slice(&name);
        // use_count: 0 turns the server's op fusion off
        out.extend_from_slice(&0i32.to_le_bytes());
        debug_assert_eq!(out.len() - start, WIRE_TENSOR_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Field offsets of the packed C struct, as gcc lays it out.
    #[test]
    fn the_layout_is_the_packed_c_struct() {
        let t = WireTensor {
            id: 0x0102_0304_0506_0708,
            ggml_type: 30,
            buffer: 0xAA,
            ne: [1, 2, 3, 4],
            nb: [5, 6, 7, 8],
            op: 91,
            op_params: [9; 16],
            flags: 16,
            src: [11; 10],
            view_src: 12,
            view_offs: 13,
            data: 14,
            name: "blk.0.attn_q.weight".into(),
        };
        let mut b = Vec::new();
        t.encode_into(&mut b);
        assert_eq!(b.len(), 296);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        assert_eq!(u64_at(0), 0x0102_0304_0506_0708);
        assert_eq!(u32_at(8), 30);
        assert_eq!(u64_at(12), 0xAA);
        assert_eq!((u32_at(20), u32_at(32)), (1, 4));
        assert_eq!((u32_at(36), u32_at(48)), (5, 8));
        assert_eq!(u32_at(52), 91);
        assert_eq!((u32_at(56), u32_at(116)), (9, 9));
        assert_eq!(u32_at(120), 16);
        assert_eq!((u64_at(124), u64_at(196)), (11, 11));
        assert_eq!((u64_at(204), u64_at(212), u64_at(220)), (12, 13, 14));
        assert_eq!(&b[228..247], b"blk.0.attn_q.weight");
        assert_eq!(b[247], 0);
        assert_eq!(u32_at(292), 0);
    }

    #[test]
    fn long_names_are_cut_to_63_bytes_at_a_char_boundary() {
        let t = WireTensor {
            name: "é".repeat(40),
            ..WireTensor::default()
        };
        let mut b = Vec::new();
        t.encode_into(&mut b);
        let name = &b[228..292];
        assert_eq!(name[62], 0, "62 bytes of two-byte chars, then NUL");
        assert!(std::str::from_utf8(&name[..62]).is_ok());
    }
}
