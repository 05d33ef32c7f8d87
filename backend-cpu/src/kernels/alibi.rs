//! ALiBi slopes, for soft_max and flash_attn_ext.

use ggraph_core::ir::alibi_slope as slope_f64;

/// ALiBi slope of head `h` (1 when max_bias is 0), as ggml computes it.
pub(crate) fn alibi_slope(max_bias: f32, n_head: usize, h: usize) -> f32 {
    slope_f64(max_bias, n_head, h) as f32
}
