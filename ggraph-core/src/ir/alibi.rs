//! ALiBi, the per-head bias slope of `soft_max` and `flash_attn_ext` with a
//! positive `max_bias`, as ggml computes it. Kernels and the reference
//! share these definitions.

/// ggml's ALiBi bases for `n_head` heads: heads below `n_head_log2` (the
/// largest power of two not above `n_head`) take powers of `m0`, the rest
/// odd powers of `m1`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlibiBases {
    /// `2^(-max_bias / n_head_log2)`: head `h < n_head_log2` has slope
    /// `m0^(h + 1)`.
    pub m0: f32,
    /// `2^(-max_bias / 2 / n_head_log2)`: head `h >= n_head_log2` has slope
    /// `m1^(2 (h - n_head_log2) + 1)`.
    pub m1: f32,
    /// The largest power of two not above the head count (1 for no heads).
    pub n_head_log2: u32,
}

impl AlibiBases {
    /// The bases, computed in f32 as ggml's kernels do.
    pub fn new(max_bias: f32, n_head: usize) -> AlibiBases {
        let n_head_log2 = largest_power_of_two_in(n_head);
        AlibiBases {
            m0: 2f32.powf(-max_bias / n_head_log2 as f32),
            m1: 2f32.powf(-max_bias / 2.0 / n_head_log2 as f32),
            n_head_log2,
        }
    }
}

fn largest_power_of_two_in(n: usize) -> u32 {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

/// ALiBi slope of head `h` of `n_head`, in f64 (1 when max_bias is 0).
pub fn alibi_slope(max_bias: f32, n_head: usize, h: usize) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head_log2 = largest_power_of_two_in(n_head) as usize;
    let m0 = 2f64.powf(-(max_bias as f64) / n_head_log2 as f64);
    let m1 = 2f64.powf(-(max_bias as f64) / 2.0 / n_head_log2 as f64);
    if h < n_head_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_head_log2) as i32 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::{AlibiBases, alibi_slope};

    /// ALiBi's slopes as the paper gives them: for a power-of-two head count
    /// n, head h gets 2^(-max_bias (h + 1) / n); other counts interleave the
    /// slopes of the next lower power of two with those of twice it.
    #[test]
    fn alibi_slopes_follow_the_geometric_sequence() {
        for h in 0..8 {
            let want = 2f64.powi(-(h as i32 + 1));
            assert_eq!(alibi_slope(8.0, 8, h), want, "head {h} of 8");
        }
        let six = [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125];
        for (h, want) in six.iter().enumerate() {
            assert_eq!(alibi_slope(8.0, 6, h), *want, "head {h} of 6");
        }
        assert_eq!(alibi_slope(0.0, 6, 3), 1.0);
    }

    #[test]
    fn the_bases_give_the_slopes() {
        let b = AlibiBases::new(8.0, 6);
        assert_eq!(b.n_head_log2, 4);
        assert_eq!(b.m0 as f64, alibi_slope(8.0, 6, 0));
        assert_eq!(b.m1 as f64, alibi_slope(8.0, 6, 4));
        assert_eq!(AlibiBases::new(8.0, 0).n_head_log2, 1);
    }
}
