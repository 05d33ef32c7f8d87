//! Float weights (F32, F16, BF16) times f32 activation columns, on the
//! paths that `dispatch` chooses from: `in_ggml_order` (rows of values
//! side by side: every dot summed as ggml sums it) and `packed` (rows
//! with any stride between values: a tiled GEMM in the BLIS manner).
//!
//! Where AMX is asked for and usable, BF16 weights times many columns run
//! on its tiles instead (`bf16_tiles`).
//!
//! The packed GEMM's kernels are compiled for AVX-512 (`avx512`), AVX2
//! (`avx2`) and plain Rust (in `packed`), and `Isa` picks one at run time.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod bf16_tiles;
pub(super) mod in_ggml_order;
pub(super) mod packed;
mod weight_values;
