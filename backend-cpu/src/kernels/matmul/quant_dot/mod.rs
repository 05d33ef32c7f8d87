//! Quantised weights of any format `quant_format` reads times f32
//! activations, with integer dot products on codes and the
//! activations quantised to 8 bits (`activation_quant`, `quant_format`).
//!
//! `sum(u * q)` is `vpdpbusd` (unsigned times signed bytes) where the
//! processor has AVX-512 VNNI (`vpmaddubsw` on AVX2), and `o * sum(q)` is
//! folded into the integer accumulator's starting value, so the float
//! work is one convert and two multiply-adds per block.
//!
//! One path, for weights in the CPU's interleaved layout with AVX-512 VNNI
//! (`interleaved_gemm` hands it more than a few columns):
//!
//! - **panel** (`panel`): the codes of 32 rows are interleaved four bytes
//!   at a time (16 x 16 dword transposes) so that one `vpdpbusd` advances
//!   16 rows by four values against a broadcast column; a 32 x 4 register
//!   tile keeps whole blocks in integer accumulators. Where AMX is asked
//!   for (`panel_amx`), the same panels are the B operand of `tdpbsud`, 16
//!   columns at a time.

#[cfg(target_arch = "x86_64")]
mod avx512_vnni;
#[cfg(target_arch = "x86_64")]
mod operands;
#[cfg(target_arch = "x86_64")]
pub(super) mod panel;
#[cfg(target_arch = "x86_64")]
mod panel_amx;
