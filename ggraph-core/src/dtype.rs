//! Element types and their storage layouts.
//!
//! Every type has a block size (how many values one block holds) and a type
//! size (how many bytes one block takes). Plain types have blocks of one
//! value. The quantised layouts are byte-compatible with ggml's and with the
//! `gguf` Python package; see [`crate::quant`] for the block formats.

use std::fmt;

/// Values per super-block of the K-quants.
pub const QK_K: usize = 256;
/// Values per block of the `_0` quants.
pub const QK8_0: usize = 32;
/// Values per block of Q4_0.
pub const QK4_0: usize = 32;
/// Values per block of the other 32-value formats (Q4_1, Q5_0, Q5_1,
/// IQ4_NL).
pub const QK32: usize = 32;

/// An element type of a tensor.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 single precision, 4 bytes.
    F32,
    /// IEEE 754 half precision, 2 bytes.
    F16,
    /// bfloat16 (the top half of an f32), 2 bytes.
    BF16,
    /// Signed 32-bit integer, 4 bytes: indices, positions, expert ids.
    I32,
    /// Blocks of 32 signed bytes and an f16 scale: 34 bytes, 8.5 bits per value.
    Q8_0,
    /// Blocks of 32 4-bit values and an f16 scale (`d * (q - 8)`): 18 bytes,
    /// 4.5 bits per value.
    Q4_0,
    /// Super-blocks of 256 4-bit values in 8 sub-blocks with 6-bit scales and
    /// mins: 144 bytes, 4.5 bits per value.
    Q4_K,
    /// Super-blocks of 256 6-bit values in 16 sub-blocks with 8-bit scales:
    /// 210 bytes, 6.5625 bits per value.
    Q6_K,
    /// Blocks of 32 4-bit values with an f16 scale and minimum (`d * q + m`):
    /// 20 bytes, 5 bits per value.
    Q4_1,
    /// Blocks of 32 5-bit values and an f16 scale (`d * (q - 16)`): 22 bytes,
    /// 5.5 bits per value.
    Q5_0,
    /// Blocks of 32 5-bit values with an f16 scale and minimum: 24 bytes, 6
    /// bits per value.
    Q5_1,
    /// Super-blocks of 256 2-bit values in 16 sub-blocks with 4-bit scales and
    /// mins: 84 bytes, 2.625 bits per value.
    Q2_K,
    /// Super-blocks of 256 3-bit values in 16 sub-blocks with 6-bit scales:
    /// 110 bytes, 3.4375 bits per value.
    Q3_K,
    /// Super-blocks of 256 5-bit values in 8 sub-blocks with 6-bit scales and
    /// mins: 176 bytes, 5.5 bits per value.
    Q5_K,
    /// Blocks of 32 4-bit indices into the fixed non-linear table
    /// [`IQ4_VALUES`](crate::quant::IQ4_VALUES) and an f16 scale: 18 bytes,
    /// 4.5 bits per value.
    IQ4_NL,
    /// IQ4_NL's table in super-blocks of 256 with a 6-bit scale per 32
    /// values: 136 bytes, 4.25 bits per value.
    IQ4_XS,
    /// OCP microscaling FP4: blocks of 32 E2M1 codes (indices into
    /// [`MXFP4_VALUES`](crate::quant::MXFP4_VALUES)) and a shared E8M0
    /// exponent byte: 17 bytes, 4.25 bits per value (gpt-oss's experts).
    MXFP4,
}

impl DType {
    /// Every type ggraph knows, in ggml id order.
    pub const ALL: [DType; 17] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::I32,
        DType::BF16,
        DType::MXFP4,
    ];

    /// The floating-point types that elementwise ops read and write.
    pub const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// The block-quantised types.
    pub const QUANTIZED: [DType; 13] = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::MXFP4,
    ];

    /// Values per block.
    pub const fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I32 => 1,
            DType::Q8_0 => QK8_0,
            DType::Q4_0 => QK4_0,
            DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::IQ4_NL | DType::MXFP4 => QK32,
            DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS => {
                QK_K
            }
        }
    }

    /// Bytes per block.
    pub const fn type_size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            // f16 scale + 32 signed bytes
            DType::Q8_0 => 2 + QK8_0,
            // f16 scale + 16 bytes of nibbles
            DType::Q4_0 => 2 + QK4_0 / 2,
            // f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
            DType::Q4_K => 2 + 2 + 12 + QK_K / 2,
            // 128 bytes low nibbles, 64 bytes high bits, 16 i8 scales, f16 d
            DType::Q6_K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
            // f16 d, f16 m, 16 bytes of nibbles
            DType::Q4_1 => 2 + 2 + QK32 / 2,
            // f16 d, 4 bytes of fifth bits, 16 bytes of nibbles
            DType::Q5_0 => 2 + 4 + QK32 / 2,
            // f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of nibbles
            DType::Q5_1 => 2 + 2 + 4 + QK32 / 2,
            // 16 bytes of 4-bit scales and mins, 64 bytes of 2-bit codes, f16 d, f16 dmin
            DType::Q2_K => QK_K / 16 + QK_K / 4 + 2 + 2,
            // 32 bytes of high bits, 64 bytes of 2-bit codes, 12 bytes of 6-bit scales, f16 d
            DType::Q3_K => QK_K / 8 + QK_K / 4 + 12 + 2,
            // f16 d, f16 dmin, 12 bytes of scales and mins, 32 bytes of fifth bits, 128 of nibbles
            DType::Q5_K => 2 + 2 + 12 + QK_K / 8 + QK_K / 2,
            // f16 d, 16 bytes of nibbles indexing a fixed table
            DType::IQ4_NL => 2 + QK32 / 2,
            // f16 d, u16 high scale bits, 4 bytes of low scale bits, 128 bytes of nibbles
            DType::IQ4_XS => 2 + 2 + QK_K / 64 + QK_K / 2,
            // E8M0 exponent, 16 bytes of E2M1 nibbles
            DType::MXFP4 => 1 + QK32 / 2,
        }
    }

    /// Bytes taken by a row of `n` values; `None` if `n` is not a whole
    /// number of blocks.
    pub const fn row_size(self, n: usize) -> Option<usize> {
        if n % self.block_size() != 0 {
            return None;
        }
        Some(n / self.block_size() * self.type_size())
    }

    /// The type llama-quantize writes for rows of `n` values when asked
    /// for this one: this type when `n` is whole blocks; otherwise its
    /// 32-value fallback (IQ4_XS → IQ4_NL, Q2_K and Q3_K → Q4_0, Q4_K →
    /// Q5_0, Q5_K → Q5_1, Q6_K → Q8_0), or F16 when that does not fit
    /// either.
    pub const fn for_row_len(self, n: usize) -> DType {
        if n % self.block_size() == 0 {
            return self;
        }
        let fallback = match self {
            DType::IQ4_XS => DType::IQ4_NL,
            DType::Q2_K | DType::Q3_K => DType::Q4_0,
            DType::Q4_K => DType::Q5_0,
            DType::Q5_K => DType::Q5_1,
            DType::Q6_K => DType::Q8_0,
            other => other,
        };
        if n % fallback.block_size() == 0 {
            fallback
        } else {
            DType::F16
        }
    }

    /// Whether the type stores values in blocks of more than one (the
    /// [`DType::QUANTIZED`] types).
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Whether the type is one of [`DType::FLOATS`] (F32, F16, BF16), the
    /// types elementwise ops take.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// ggml's name for the type, as GGUF tools print it.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::Q8_0 => "Q8_0",
            DType::Q4_0 => "Q4_0",
            DType::Q4_K => "Q4_K",
            DType::Q6_K => "Q6_K",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q2_K => "Q2_K",
            DType::Q3_K => "Q3_K",
            DType::Q5_K => "Q5_K",
            DType::IQ4_NL => "IQ4_NL",
            DType::IQ4_XS => "IQ4_XS",
            DType::MXFP4 => "MXFP4",
        }
    }

    /// ggml's numeric type id (`enum ggml_type`), as stored in GGUF.
    pub const fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q2_K => 10,
            DType::Q3_K => 11,
            DType::Q4_K => 12,
            DType::Q5_K => 13,
            DType::Q6_K => 14,
            DType::IQ4_NL => 20,
            DType::IQ4_XS => 23,
            DType::I32 => 26,
            DType::BF16 => 30,
            DType::MXFP4 => 39,
        }
    }

    /// The type with ggml id `id`, if ggraph supports it.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// The type named `name` (ggml's spelling, case-insensitive).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// ggml's name for any ggml type id, including the ones ggraph does not
    /// support, so that errors can name what they found.
    pub fn ggml_name_of_id(id: u32) -> Option<&'static str> {
        const NAMES: [&str; 42] = [
            "F32",
            "F16",
            "Q4_0",
            "Q4_1",
            "Q4_2",
            "Q4_3",
            "Q5_0",
            "Q5_1",
            "Q8_0",
            "Q8_1",
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ3_XXS",
            "IQ1_S",
            "IQ4_NL",
            "IQ3_S",
            "IQ2_S",
            "IQ4_XS",
            "I8",
            "I16",
            "I32",
            "I64",
            "F64",
            "IQ1_M",
            "BF16",
            "Q4_0_4_4",
            "Q4_0_4_8",
            "Q4_0_8_8",
            "TQ1_0",
            "TQ2_0",
            "IQ4_NL_4_4",
            "IQ4_NL_4_8",
            "IQ4_NL_8_8",
            "MXFP4",
            "NVFP4",
            "Q1_0",
        ];
        NAMES.get(id as usize).copied()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_layouts_match_ggml() {
        assert_eq!(DType::Q8_0.type_size(), 34);
        assert_eq!(DType::Q4_0.type_size(), 18);
        assert_eq!(DType::Q4_K.type_size(), 144);
        assert_eq!(DType::Q6_K.type_size(), 210);
        assert_eq!(DType::Q4_1.type_size(), 20);
        assert_eq!(DType::Q5_0.type_size(), 22);
        assert_eq!(DType::Q5_1.type_size(), 24);
        assert_eq!(DType::Q2_K.type_size(), 84);
        assert_eq!(DType::Q3_K.type_size(), 110);
        assert_eq!(DType::Q5_K.type_size(), 176);
        assert_eq!(DType::IQ4_NL.type_size(), 18);
        assert_eq!(DType::IQ4_XS.type_size(), 136);
        assert_eq!(DType::MXFP4.type_size(), 17);
        assert_eq!(DType::from_ggml_id(39), Some(DType::MXFP4));
        assert_eq!(DType::Q4_K.row_size(4096), Some(16 * 144));
        assert_eq!(DType::Q4_0.row_size(33), None);
        assert_eq!(DType::F16.row_size(3), Some(6));
    }

    #[test]
    fn rows_that_are_not_whole_blocks_fall_back_as_llama_quantize_does() {
        assert_eq!(DType::Q4_K.for_row_len(4096), DType::Q4_K);
        assert_eq!(DType::Q4_K.for_row_len(576), DType::Q5_0);
        assert_eq!(DType::Q5_K.for_row_len(576), DType::Q5_1);
        assert_eq!(DType::Q6_K.for_row_len(576), DType::Q8_0);
        assert_eq!(DType::Q2_K.for_row_len(576), DType::Q4_0);
        assert_eq!(DType::Q3_K.for_row_len(576), DType::Q4_0);
        assert_eq!(DType::IQ4_XS.for_row_len(576), DType::IQ4_NL);
        assert_eq!(DType::Q4_K.for_row_len(100), DType::F16);
        assert_eq!(DType::Q4_0.for_row_len(100), DType::F16);
        assert_eq!(DType::F32.for_row_len(100), DType::F32);
    }

    #[test]
    fn ids_and_names_round_trip() {
        for t in DType::ALL {
            assert_eq!(DType::from_ggml_id(t.ggml_id()), Some(t));
            assert_eq!(DType::from_name(t.name()), Some(t));
            assert_eq!(DType::ggml_name_of_id(t.ggml_id()), Some(t.name()));
        }
        assert_eq!(DType::from_ggml_id(16), None);
        assert_eq!(DType::ggml_name_of_id(16), Some("IQ2_XXS"));
    }
}
