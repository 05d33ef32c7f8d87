//! Float weights (F32, F16, BF16) times f32 activation columns.
//!
//! Three paths, which `dispatch` chooses from:
//!
//! - **row stream** (`row_stream`, one column): a task's rows streamed
//!   one after another, each dot summed in registers.
//! - **dot** (`dot`, few columns): each weight row is read once, straight from
//!   the buffer (F16/BF16 widened in registers), and dotted with every
//!   column of a small tile of activations. This is the mat-vec of token
//!   generation: it streams the weights at memory bandwidth.
//! - **packed** (`packed`, many columns): a tiled GEMM in the BLIS manner. The
//!   activations are packed `KC` values at a time into `NR`-wide panels
//!   shared by all threads; each thread packs (and widens to f32) an
//!   `MC x KC` block of weights into `MR`-wide panels that stay in its L2
//!   cache, and a register-blocked micro-kernel computes `MR x NR` output
//!   tiles from them. Threads split the rows of the weights (and the
//!   columns too when there are few rows).
//!
//! The kernels are compiled for AVX-512 (`avx512`), AVX2 (`avx2`,
//! `dot_asm_avx2`) and plain Rust, and `Isa` picks one at run time; the
//! packed micro-kernels are 32 x 12, 16 x 6 and 8 x 4.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub(super) mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_asm_avx2;
mod dot_portable;
pub(super) mod packed;
pub(super) mod row_stream;
mod weight_values;
