//! Which instruction set the matrix kernels use, chosen once at run time.
//!
//! The binary is built for plain x86-64 (or any other target); the fast
//! kernels are `#[target_feature]` functions that are only called after
//! the processor has been seen to support them.

use std::sync::OnceLock;

/// An instruction-set level, from the portable fallback up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    /// Plain Rust, whatever the compiler makes of it.
    Portable,
    /// AVX2 with FMA and F16C (x86-64-v3).
    Avx2,
    /// AVX-512 F/BW/VL (with AVX2, FMA and F16C).
    Avx512,
    /// AVX-512 as above plus VNNI (`vpdpbusd`) for the quantised dots.
    Avx512Vnni,
}

impl Isa {
    /// The level's name, as `GGRAPH_CPU_ISA` takes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }

    fn from_name(s: &str) -> Option<Isa> {
        match s.to_ascii_lowercase().as_str() {
            "portable" | "none" => Some(Isa::Portable),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            "avx512vnni" | "vnni" => Some(Isa::Avx512Vnni),
            _ => None,
        }
    }
}

/// The best level this processor supports.
pub(crate) fn detected() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
            if avx512 && has!("avx512vnni") {
                return Isa::Avx512Vnni;
            }
            if avx512 {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    })
}

/// The level the kernels use: the detected one, lowered by the
/// `GGRAPH_CPU_ISA` environment variable (`portable`, `avx2`, `avx512`,
/// `avx512vnni`) when it names a lower one, to compare or to test the
/// fallbacks. It can never raise the level above what was detected.
pub(crate) fn active() -> Isa {
    static ACTIVE: OnceLock<Isa> = OnceLock::new();
    *ACTIVE.get_or_init(|| {
        let best = detected();
        match std::env::var("GGRAPH_CPU_ISA")
            .ok()
            .and_then(|v| Isa::from_name(&v))
        {
            Some(asked) => asked.min(best),
            None => best,
        }
    })
}

/// Every level this processor can run, lowest first.
pub(crate) fn all_supported() -> Vec<Isa> {
    [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
        .into_iter()
        .filter(|i| *i <= detected())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::Isa;

    #[test]
    fn every_level_s_name_is_what_ggraph_cpu_isa_takes() {
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
    }
}
