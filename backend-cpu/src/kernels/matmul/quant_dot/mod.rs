//! Quantised weights of any format `quant_format` reads times f32
//! activations, with integer dot products on codes and the
//! activations quantised to 8 bits (`activation_quant`, `quant_format`).
//!
//! `sum(u * q)` is `vpdpbusd` (unsigned times signed bytes) where the
//! processor has AVX-512 VNNI (`vpmaddubsw` on AVX2), and `o * sum(q)` is
//! folded into the integer accumulator's starting value, so the float
//! work is one convert and two multiply-adds per block.
//!
//! Three paths, which `dispatch` chooses from:
//!
//! - **direct** (`direct`, few columns): weight rows are decoded a chunk at
//!   a time into codes in L1 and dotted with each column; kernels for
//!   AVX-512 VNNI (`avx512_vnni`), AVX2 (`avx2`) and plain Rust.
//! - **fused** (`fused`, VNNI, Q8_0/Q4_0, few columns): the kernel reads
//!   codes and f16 scales straight from the blocks, two blocks per zmm, so
//!   the weights stream through once (token generation).
//! - **panel** (`panel`, VNNI, more columns): the codes of 32 rows are
//!   interleaved four bytes at a time (16 x 16 dword transposes) so that
//!   one `vpdpbusd` advances 16 rows by four values against a broadcast
//!   column; a 32 x 4 register tile keeps whole blocks in integer
//!   accumulators. Where AMX is on (`panel_amx`), the same panels are the
//!   B operand of `tdpbsud`, 16 columns at a time.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512_vnni;
pub(super) mod direct;
#[cfg(target_arch = "x86_64")]
mod operands;
#[cfg(target_arch = "x86_64")]
pub(super) mod panel;
#[cfg(target_arch = "x86_64")]
mod panel_amx;
