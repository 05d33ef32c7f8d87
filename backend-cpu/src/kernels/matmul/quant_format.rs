//! How each quantised weight format reads as unsigned codes `u` with a
//! per-block scale `dw`, an integer offset `o` and (Q4_1, Q5_1, Q2_K,
//! Q4_K, Q5_K) a per-block min `mw` (the formats of the interleaved
//! layout's GEMMs), and Q4_K's scale unpacking:
//!
//! ```text
//! w = dw * (u - o) - mw          x = dx * q
//! dot(w, x) over a block = dx * (dw * (sum(u * q) - o * sum(q)) - mw * sum(q))
//! ```
//!
//! `x = dx * q` is an activation quantised to 8 bits (`activation_quant`).
//!
//! The `_1` formats' min `m` is added, so their `mw` is `-m`. The IQ4
//! formats' and MXFP4's codes index a table of signed values; `u` is the
//! value plus 128, as Q8_0's codes are.

use ggraph_core::DType;
use ggraph_core::quant::{IQ4_VALUES, MXFP4_VALUES};

/// The 8-bit type ggml quantises the activations to for a weight type (its
/// `vec_dot_type`): ggraph rounds them the same way, so that its integer
/// sums are ggml's and only the order of float additions differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Partner {
    /// One scale `amax / 127` a 32 values, kept as f16 (Q4_0, Q5_0, Q8_0,
    /// IQ4_NL).
    Q8_0,
    /// Q8_0's codes and scale, and `d * sum(q)` kept as f16 for the min
    /// term (Q4_1, Q5_1).
    Q8_1,
    /// One f32 scale a 256-value super-block (the K-quants, IQ4_XS).
    Q8K,
}

impl Partner {
    /// Values that share one scale.
    pub(crate) const fn span(self) -> usize {
        match self {
            Partner::Q8_0 | Partner::Q8_1 => 32,
            Partner::Q8K => 256,
        }
    }
}

/// How one weight format reads as codes.
#[derive(Clone, Copy)]
pub(crate) struct Format {
    pub(crate) dtype: DType,
    /// Values per scale.
    pub(crate) qb: usize,
    /// Offset subtracted from the codes.
    pub(crate) offset: i32,
    /// Whether blocks carry a min (`mw`).
    pub(crate) has_min: bool,
    /// Whether the codes are signed bytes plus 128 (Q8_0, the IQ4s): up to
    /// 255, too large for `vpmaddubsw`'s 16-bit pair sums, so the AVX2
    /// kernels take them signed.
    pub(crate) signed: bool,
    /// How the activations are rounded for it.
    pub(crate) partner: Partner,
}

pub(crate) fn format(dtype: DType) -> Option<Format> {
    let (qb, offset, has_min) = match dtype {
        DType::Q8_0 | DType::IQ4_NL | DType::IQ4_XS | DType::MXFP4 => (32, 128, false),
        DType::Q4_0 => (32, 8, false),
        DType::Q5_0 => (32, 16, false),
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => (32, 0, true),
        DType::Q2_K => (16, 0, true),
        DType::Q3_K => (16, 4, false),
        DType::Q6_K => (16, 32, false),
        _ => return None,
    };
    let partner = match dtype {
        DType::Q4_1 | DType::Q5_1 => Partner::Q8_1,
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS => {
            Partner::Q8K
        }
        _ => Partner::Q8_0,
    };
    Some(Format {
        dtype,
        qb,
        offset,
        has_min,
        signed: offset == 128,
        partner,
    })
}

/// The IQ4 table as codes: each value plus 128.
pub(crate) const IQ4_CODES: [u8; 16] = as_codes(&IQ4_VALUES);

/// MXFP4's table (E2M1's values doubled) as codes: each value plus 128.
pub(crate) const MXFP4_CODES: [u8; 16] = as_codes(&MXFP4_VALUES);

const fn as_codes(values: &[i8; 16]) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (values[i] as i32 + 128) as u8;
        i += 1;
    }
    t
}

/// The 6-bit scales and mins of a Q4_K super-block's 8 sub-blocks, as four
/// words of four bytes: scales 0..4, scales 4..8, mins 0..4, mins 4..8.
/// Sub-blocks 0..4 sit in the low bits of bytes 0..4 (scales) and 4..8
/// (mins) of the 12; 4..8 in the nibbles of bytes 8..12, their top bits in
/// the top two bits of bytes 0..8.
#[inline(always)]
pub(crate) fn q4k_scales_mins(s: &[u8; 12]) -> [u32; 4] {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (word(0), word(1), word(2));
    [
        u0 & 0x3f3f_3f3f,
        (u2 & 0x0f0f_0f0f) | (((u0 >> 6) & 0x0303_0303) << 4),
        u1 & 0x3f3f_3f3f,
        ((u2 >> 4) & 0x0f0f_0f0f) | (((u1 >> 6) & 0x0303_0303) << 4),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 6-bit scale and min of Q4_K sub-block `j`, as ggml's
    /// `get_scale_min_k4` unpacks them.
    fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
        if j < 4 {
            (s[j] & 63, s[j + 4] & 63)
        } else {
            (
                (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
                (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
            )
        }
    }

    #[test]
    fn q4k_scale_words_match_the_scalar_unpacking() {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..200 {
            let s: [u8; 12] = std::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            });
            let words = q4k_scales_mins(&s);
            for j in 0..8 {
                let (sc, mn) = q4k_scale_min(j, &s);
                assert_eq!(words[j / 4].to_le_bytes()[j % 4], sc, "scale {j} of {s:?}");
                assert_eq!(
                    words[2 + j / 4].to_le_bytes()[j % 4],
                    mn,
                    "min {j} of {s:?}"
                );
            }
        }
    }
}
