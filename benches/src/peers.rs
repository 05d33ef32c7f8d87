//! The peers' figures the bench programs print next to ours: ggml-cpu's
//! mul_mat GFLOP/s and llama.cpp's tokens/s, as the CPU speed issue gives
//! them and as measured on this VM.
//!
//! The VM has not always been the same machine: on 2026-11-21 it was an
//! AMD EPYC Zen 4 with AVX-512 (VNNI, BF16), on 2026-11-24 a Zen 3 EPYC
//! (family 25, model 1) with AVX2 only, on 2026-11-25 a Zen 5 EPYC
//! (family 26, model 2) with AVX-512 on full-width 512-bit pipes. Each
//! kind has its own peer figures, and a bench prints those of the kind it
//! runs on ([`measured_here`]).
//!
//! Both were measured with llama.cpp 0.3.36's vendored tree (the
//! llama-cpp-python sdist from PyPI), built with `cmake -DGGML_NATIVE=ON`,
//! 2 threads: `test-backend-ops perf -o MUL_MAT -b CPU` with its thread
//! count set to the two cores (it uses half of them), and `llama-bench -t 2
//! -p 512 -n 128 -fa 1` on the random-weight GGUFs that `ggraph make-model
//! --shape small|8b-4l --weights T` writes; the better of the runs that
//! day.

use ggraph_core::DType;

/// Column counts of the mul_mat tables.
pub const MUL_MAT_COLUMNS: [usize; 3] = [1, 8, 512];

/// Token counts of the mul_mat_id table.
pub const MUL_MAT_ID_TOKENS: [usize; 8] = [1, 4, 8, 32, 64, 128, 256, 512];

/// ggml-cpu's mul_mat_id GFLOP/s for 128 experts of 768 x 2048, 8 used
/// per token, for the token counts of [`MUL_MAT_ID_TOKENS`].
pub type MulMatIdTable = [(DType, [f64; 8])];

/// ggml-cpu's mul_mat GFLOP/s for weights 4096 x 14336 and f32
/// activations of n = 1, 8, 512 columns.
pub type MulMatTable = [(DType, [f64; 3])];

/// The peers of one kind of machine.
pub struct PeerSet {
    /// When and on what they were measured.
    pub label: &'static str,
    pub mul_mat: &'static MulMatTable,
    /// Empty where it was not measured.
    pub mul_mat_id: &'static MulMatIdTable,
    pub runner: &'static [RunnerPeer],
}

/// llama.cpp's tokens/s on one model: prompt 512 and generation 128.
pub struct RunnerPeer {
    pub shape: &'static str,
    pub weights: DType,
    pub prompt: f64,
    pub generation: f64,
}

/// The CPU speed issue's figures (its machine had an f32 FMA loop of 285
/// GFLOP/s per core).
pub const ISSUE: PeerSet = PeerSet {
    label: "the CPU speed issue",
    mul_mat: &[
        (DType::F32, [26.0, 150.0, 242.0]),
        (DType::F16, [46.0, 239.0, 388.0]),
        (DType::Q8_0, [99.0, 246.0, 320.0]),
        (DType::Q4_0, [104.0, 248.0, 262.0]),
    ],
    mul_mat_id: &[],
    runner: &[
        runner("small", DType::F32, 4518.0, 279.0),
        runner("small", DType::F16, 5476.0, 514.0),
        runner("small", DType::Q8_0, 4559.0, 741.0),
        runner("small", DType::Q4_0, 7151.0, 1188.0),
        runner("8b-4l", DType::F16, 274.0, 15.8),
        runner("8b-4l", DType::Q4_0, 397.0, 45.3),
    ],
};

/// 2026-11-21, AMD EPYC Zen 4 with AVX-512 (f32 FMA loop: 117 GFLOP/s per
/// core that day).
pub const ZEN4_AVX512: PeerSet = PeerSet {
    label: "2026-11-21, Zen 4 with AVX-512",
    mul_mat: &[
        (DType::F32, [16.7, 93.8, 153.8]),
        (DType::F16, [29.2, 153.8, 204.2]),
        (DType::BF16, [31.6, 206.3, 378.1]),
        (DType::Q8_0, [49.9, 191.9, 230.8]),
        (DType::Q4_0, [62.2, 192.6, 191.4]),
        (DType::Q4_K, [106.7, 177.4, 546.3]),
        (DType::Q6_K, [67.6, 87.9, 410.1]),
    ],
    mul_mat_id: &[],
    runner: &[
        runner("small", DType::F32, 2638.9, 248.3),
        runner("small", DType::F16, 2483.7, 418.9),
        runner("small", DType::Q8_0, 3245.2, 675.2),
        runner("small", DType::Q4_0, 4023.1, 1170.3),
        runner("8b-4l", DType::F16, 126.7, 12.6),
        runner("8b-4l", DType::Q4_0, 185.5, 38.9),
    ],
};

/// 2026-11-24, AMD EPYC Zen 3 with AVX2 only (f32 FMA loop: about 90
/// GFLOP/s per core, read bandwidth about 16 GB/s from one core and 31 GB/s
/// from both); the better of two mul_mat runs; llama-bench's mean of two
/// repetitions, for the small models the best of five such runs over the
/// day (the machine's speed moved by a third between them).
pub const ZEN3_AVX2: PeerSet = PeerSet {
    label: "2026-11-24, Zen 3 with AVX2",
    mul_mat: &[
        (DType::F32, [16.5, 78.9, 124.9]),
        (DType::F16, [25.9, 134.2, 164.1]),
        (DType::BF16, [24.1, 97.8, 106.9]),
        (DType::Q8_0, [48.9, 112.9, 131.4]),
        (DType::Q4_0, [66.7, 103.5, 93.2]),
        (DType::Q4_K, [92.7, 66.3, 149.4]),
        (DType::Q6_K, [63.4, 44.7, 160.6]),
    ],
    mul_mat_id: &[],
    runner: &[
        runner("small", DType::F32, 2020.7, 170.1),
        runner("small", DType::F16, 2677.0, 288.8),
        runner("small", DType::Q8_0, 2133.4, 425.9),
        runner("small", DType::Q4_0, 2434.7, 795.5),
        runner("8b-4l", DType::F16, 110.3, 9.7),
        runner("8b-4l", DType::Q4_0, 92.2, 22.2),
    ],
};

/// 2026-11-25, AMD EPYC Zen 5 (family 26, model 2) with AVX-512 (f32 FMA
/// loop: 239 GFLOP/s on one core, 220 + 220 on both; a read loop about 40
/// GB/s from both cores); mul_mat: the better of two runs where there
/// were two; llama-bench: the mean of two repetitions, the best of three
/// rounds over the day (the 8b-4l models: two rounds of one run, prompt
/// 512 and generation 32); mul_mat_id: `test-backend-ops perf -o
/// MUL_MAT_ID` (its Qwen3-30B-A3B cases, `b=0`), the best of three runs
/// (its F32 cells moved by up to 60% between runs).
pub const ZEN5_AVX512: PeerSet = PeerSet {
    label: "2026-11-25, Zen 5 with AVX-512",
    mul_mat: &[
        (DType::F32, [30.5, 139.8, 206.9]),
        (DType::F16, [43.9, 216.3, 328.7]),
        (DType::BF16, [49.1, 292.4, 413.8]),
        (DType::Q8_0, [85.2, 196.3, 269.1]),
        (DType::Q4_0, [83.2, 211.8, 216.5]),
        (DType::Q4_K, [145.5, 201.0, 869.8]),
        (DType::Q6_K, [101.9, 150.5, 700.2]),
    ],
    mul_mat_id: &[
        (
            DType::F32,
            [49.5, 41.1, 45.2, 49.8, 80.8, 116.1, 129.5, 139.3],
        ),
        (
            DType::F16,
            [91.2, 59.7, 56.0, 75.1, 98.7, 120.6, 125.4, 131.8],
        ),
        (
            DType::Q8_0,
            [135.2, 94.0, 89.6, 95.8, 113.4, 120.8, 129.8, 137.8],
        ),
        (
            DType::Q4_0,
            [115.7, 100.4, 98.1, 97.2, 100.2, 107.9, 113.4, 118.1],
        ),
        (
            DType::Q4_K,
            [160.9, 139.3, 115.5, 115.2, 138.7, 193.4, 307.4, 409.3],
        ),
        (
            DType::Q6_K,
            [154.5, 116.3, 106.9, 107.0, 128.7, 158.0, 217.9, 305.3],
        ),
    ],
    runner: &[
        runner("small", DType::F32, 4485.5, 271.8),
        runner("small", DType::F16, 4786.9, 520.6),
        runner("small", DType::Q8_0, 3924.2, 713.7),
        runner("small", DType::Q4_0, 6671.9, 1294.2),
        runner("8b-4l", DType::F16, 241.6, 15.8),
        runner("8b-4l", DType::Q4_0, 348.4, 53.7),
    ],
};

const fn runner(shape: &'static str, weights: DType, prompt: f64, generation: f64) -> RunnerPeer {
    RunnerPeer {
        shape,
        weights,
        prompt,
        generation,
    }
}

/// The peers measured on the kind of machine this one is: with AVX-512,
/// the Zen 5 set on a family-26 processor and the Zen 4 set on others;
/// without it, the AVX2 set.
pub fn measured_here() -> &'static PeerSet {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        return if cpu_family() == 26 {
            &ZEN5_AVX512
        } else {
            &ZEN4_AVX512
        };
    }
    &ZEN3_AVX2
}

/// The processor's family, as CPUID leaf 1 gives it (the base family,
/// plus the extended family where the base is 15).
#[cfg(target_arch = "x86_64")]
fn cpu_family() -> u32 {
    let eax = std::arch::x86_64::__cpuid(1).eax;
    let base = (eax >> 8) & 0xf;
    if base == 0xf {
        base + ((eax >> 20) & 0xff)
    } else {
        base
    }
}

impl PeerSet {
    /// The mul_mat figure for `dtype` with `n` columns, if there is one.
    pub fn mul_mat(&self, dtype: DType, n: usize) -> Option<f64> {
        let col = MUL_MAT_COLUMNS.iter().position(|&c| c == n)?;
        self.mul_mat
            .iter()
            .find(|(t, _)| *t == dtype)
            .map(|(_, f)| f[col])
    }

    /// The mul_mat_id figure for `dtype` with `tokens` tokens, if there is
    /// one.
    pub fn mul_mat_id(&self, dtype: DType, tokens: usize) -> Option<f64> {
        let col = MUL_MAT_ID_TOKENS.iter().position(|&c| c == tokens)?;
        self.mul_mat_id
            .iter()
            .find(|(t, _)| *t == dtype)
            .map(|(_, f)| f[col])
    }

    /// The runner figures for a model, if there are some.
    pub fn runner(&self, shape: &str, weights: DType) -> Option<&RunnerPeer> {
        self.runner
            .iter()
            .find(|p| p.shape == shape && p.weights == weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_set_has_the_issue_cells_and_models() {
        for set in [&ISSUE, &ZEN4_AVX512, &ZEN3_AVX2, &ZEN5_AVX512] {
            for t in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0] {
                for n in MUL_MAT_COLUMNS {
                    assert!(
                        set.mul_mat(t, n).is_some_and(|v| v > 0.0),
                        "{} {t} n={n}",
                        set.label
                    );
                }
            }
            for p in ISSUE.runner {
                let here = set.runner(p.shape, p.weights);
                assert!(
                    here.is_some_and(|h| h.prompt > 0.0 && h.generation > 0.0),
                    "{} {}",
                    set.label,
                    p.shape
                );
            }
        }
        assert_eq!(ISSUE.mul_mat(DType::BF16, 1), None);
        assert_eq!(ZEN3_AVX2.mul_mat(DType::Q4_K, 3), None);
    }
}
