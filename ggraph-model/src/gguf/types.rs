//! Every ggml tensor type a GGUF file can name: id, name, block size and
//! bytes per block.
//!
//! [`DType`] covers the types ggraph computes with; a model file may hold
//! others (Q5_K, IQ4_XS, MXFP4, ...), and estimates must still size them.
//! The table follows ggml's `type_traits` (ggml.c), which agrees with the
//! `gguf` Python package's `GGML_QUANT_SIZES` except for Q8_1: gguf-py says
//! 40 bytes per block, ggml's `block_q8_1` is 36 (two f16 and 32 int8). We
//! use ggml's figure; Q8_1 is an activation type that files do not hold.

use std::fmt;

use ggraph_core::dtype::DType;

/// A ggml tensor type that GGUF files can hold and ggml can read.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType {
    id: u32,
}

/// (name, values per block, bytes per block) by ggml id; `None` for ids
/// ggml removed (Q4_2, Q4_3, the repacked Q4_0_x_y and IQ4_NL_x_y types).
const TABLE: [Option<(&str, u32, u32)>; 42] = [
    Some(("F32", 1, 4)),
    Some(("F16", 1, 2)),
    Some(("Q4_0", 32, 18)),
    Some(("Q4_1", 32, 20)),
    None, // Q4_2, removed
    None, // Q4_3, removed
    Some(("Q5_0", 32, 22)),
    Some(("Q5_1", 32, 24)),
    Some(("Q8_0", 32, 34)),
    Some(("Q8_1", 32, 36)),
    Some(("Q2_K", 256, 84)),
    Some(("Q3_K", 256, 110)),
    Some(("Q4_K", 256, 144)),
    Some(("Q5_K", 256, 176)),
    Some(("Q6_K", 256, 210)),
    Some(("Q8_K", 256, 292)),
    Some(("IQ2_XXS", 256, 66)),
    Some(("IQ2_XS", 256, 74)),
    Some(("IQ3_XXS", 256, 98)),
    Some(("IQ1_S", 256, 50)),
    Some(("IQ4_NL", 32, 18)),
    Some(("IQ3_S", 256, 110)),
    Some(("IQ2_S", 256, 82)),
    Some(("IQ4_XS", 256, 136)),
    Some(("I8", 1, 1)),
    Some(("I16", 1, 2)),
    Some(("I32", 1, 4)),
    Some(("I64", 1, 8)),
    Some(("F64", 1, 8)),
    Some(("IQ1_M", 256, 56)),
    Some(("BF16", 1, 2)),
    None, // Q4_0_4_4, removed (repacking is done at load time now)
    None, // Q4_0_4_8, removed
    None, // Q4_0_8_8, removed
    Some(("TQ1_0", 256, 54)),
    Some(("TQ2_0", 256, 66)),
    None, // IQ4_NL_4_4, removed
    None, // IQ4_NL_4_8, removed
    None, // IQ4_NL_8_8, removed
    Some(("MXFP4", 32, 17)),
    Some(("NVFP4", 64, 36)),
    Some(("Q1_0", 128, 18)),
];

/// Why a ggml type id cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnknownType {
    /// ggml had this type once and removed it (the name is ggml's).
    Removed {
        /// The id the file gives.
        id: u32,
        /// ggml's name for it (`Q4_2`, ...), or `?`.
        name: &'static str,
    },
    /// No ggml type has this id.
    Unknown {
        /// The id the file gives.
        id: u32,
    },
}

impl fmt::Display for UnknownType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownType::Removed { id, name } => write!(
                f,
                "ggml type {name} (id {id}), which ggml no longer supports"
            ),
            UnknownType::Unknown { id } => write!(
                f,
                "unknown ggml type id {id} (known ids are 0..={})",
                TABLE.len() - 1
            ),
        }
    }
}

impl GgmlType {
    /// Every type in the table, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        (0..TABLE.len() as u32).filter_map(|id| GgmlType::from_id(id).ok())
    }

    /// The type with ggml id `id`.
    pub fn from_id(id: u32) -> Result<GgmlType, UnknownType> {
        match TABLE.get(id as usize) {
            Some(Some(_)) => Ok(GgmlType { id }),
            Some(None) => Err(UnknownType::Removed {
                id,
                name: DType::ggml_name_of_id(id).unwrap_or("?"),
            }),
            None => Err(UnknownType::Unknown { id }),
        }
    }

    /// The type ggml calls `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        GgmlType::all().find(|t| t.name().eq_ignore_ascii_case(name))
    }

    fn entry(self) -> (&'static str, u32, u32) {
        // `id` is only ever set by `from_id`, which checked the entry.
        TABLE[self.id as usize].unwrap_or(("?", 1, 0))
    }

    /// ggml's id (`enum ggml_type`), as a GGUF tensor info stores it.
    pub fn id(self) -> u32 {
        self.id
    }

    /// ggml's name: `F32`, `Q4_K`, `IQ4_XS`, ...
    pub fn name(self) -> &'static str {
        self.entry().0
    }

    /// Values per block.
    pub fn block_size(self) -> u32 {
        self.entry().1
    }

    /// Bytes per block.
    pub fn type_size(self) -> u32 {
        self.entry().2
    }

    /// The ggraph type, if ggraph computes with this one.
    pub fn dtype(self) -> Option<DType> {
        DType::from_ggml_id(self.id)
    }

    /// Bytes of a contiguous tensor of this type with ggml shape `shape`
    /// (`shape[0]` is the row length). `Err` says why there is no such
    /// size: a row that is not whole blocks, or a size past `u64`.
    pub fn tensor_bytes(self, shape: &[u64]) -> Result<u64, String> {
        let ne0 = shape.first().copied().unwrap_or(1);
        let block = u64::from(self.block_size());
        if ne0 % block != 0 {
            return Err(format!(
                "its first dimension {ne0} is not a multiple of the {} block size {block}",
                self.name()
            ));
        }
        let overflow = || format!("its size in bytes overflows 64 bits (shape {shape:?})");
        let mut bytes = (ne0 / block)
            .checked_mul(u64::from(self.type_size()))
            .ok_or_else(overflow)?;
        for &n in shape.iter().skip(1) {
            bytes = bytes.checked_mul(n).ok_or_else(overflow)?;
        }
        Ok(bytes)
    }
}

impl From<DType> for GgmlType {
    fn from(t: DType) -> GgmlType {
        GgmlType { id: t.ggml_id() }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_agrees_with_ggraphs_own_dtypes() {
        for t in DType::ALL {
            let g = GgmlType::from(t);
            assert_eq!(g.name(), t.name());
            assert_eq!(g.block_size() as usize, t.block_size());
            assert_eq!(g.type_size() as usize, t.type_size());
            assert_eq!(g.dtype(), Some(t));
        }
    }

    #[test]
    fn the_table_names_match_dtypes_list_of_ggml_names() {
        for t in GgmlType::all() {
            assert_eq!(DType::ggml_name_of_id(t.id()), Some(t.name()));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
    }

    #[test]
    fn types_ggraph_cannot_compute_still_have_sizes() {
        let iq2 = GgmlType::from_id(16).unwrap();
        assert_eq!(
            (iq2.name(), iq2.block_size(), iq2.type_size()),
            ("IQ2_XXS", 256, 66)
        );
        assert_eq!(iq2.dtype(), None);
        assert_eq!(iq2.tensor_bytes(&[512, 3]), Ok(2 * 66 * 3));
        let mxfp4 = GgmlType::from_name("mxfp4").unwrap();
        assert_eq!(mxfp4.tensor_bytes(&[64]), Ok(34));
    }

    #[test]
    fn removed_and_unknown_ids_are_named_in_errors() {
        let e = GgmlType::from_id(4).unwrap_err();
        assert_eq!(
            e,
            UnknownType::Removed {
                id: 4,
                name: "Q4_2"
            }
        );
        assert!(e.to_string().contains("Q4_2"));
        assert_eq!(
            GgmlType::from_id(99).unwrap_err(),
            UnknownType::Unknown { id: 99 }
        );
    }

    #[test]
    fn sizes_check_whole_blocks_and_overflow() {
        let q4k = GgmlType::from(DType::Q4_K);
        assert!(
            q4k.tensor_bytes(&[100, 2])
                .unwrap_err()
                .contains("block size 256")
        );
        let f32t = GgmlType::from(DType::F32);
        assert!(f32t.tensor_bytes(&[u64::MAX, 2]).is_err());
        assert_eq!(f32t.tensor_bytes(&[]), Ok(4));
        assert_eq!(f32t.tensor_bytes(&[3, 0]), Ok(0));
    }
}
