//! Float weights (F32, F16, BF16) times f32 activation columns, on three
//! paths that `dispatch` chooses from: `row_stream` (one column), `dot`
//! (a few columns: each weight row read once, the mat-vec of token
//! generation) and `packed` (many columns: a tiled GEMM in the BLIS manner,
//! which also takes quantised weights, dequantised as they are packed).
//!
//! Where AMX is asked for and usable, BF16 weights times many columns run
//! on its tiles instead (`bf16_tiles`).
//!
//! The kernels are compiled for AVX-512 (`avx512`), AVX2 (`avx2`,
//! `dot_asm_avx2`) and plain Rust (`dot_portable`, and the portable
//! micro-kernel of `packed`), and `Isa` picks one at run time.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod bf16_tiles;
pub(super) mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_asm_avx2;
mod dot_portable;
pub(super) mod half_in_ggml_order;
pub(super) mod packed;
pub(super) mod row_stream;
mod weight_values;
