//! The kernel source: one CUDA C file (`kernels/ggraph.cu`) serves CUDA,
//! HIP and the host emulator; a small prelude per family maps the names
//! that differ.

/// The kernels, shared by every family: `kernels/ggraph.cu`, with no
/// includes, so that NVRTC and hiprtc compile it without include paths.
pub const KERNELS: &str = include_str!("../kernels/ggraph.cu");
/// The CUDA prelude for [`full_source`]: defines `GGRAPH_CUDA` and the
/// macros whose CUDA spelling differs from HIP's (`SHFL_XOR`, `ATOMIC_OR`,
/// `DYN_SHARED`).
pub const COMPAT_CUDA: &str = include_str!("../kernels/compat_cuda.h");
/// The HIP prelude for [`full_source`]: defines `GGRAPH_HIP` and the same
/// macros in HIP's spelling, with 32-lane shuffles on wave64 hardware too.
pub const COMPAT_HIP: &str = include_str!("../kernels/compat_hip.h");

/// The full source for a family: its prelude, then the kernels.
pub fn full_source(prelude: &str) -> String {
    format!("{prelude}\n#line 1 \"ggraph.cu\"\n{KERNELS}")
}

include!("../kernels/kernel_names.rs");

/// Names of the kernels of the source (the `extern "C" __global__` ones).
pub fn kernel_names() -> Vec<&'static str> {
    parse_kernel_names(KERNELS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_source_is_plain_enough_for_every_compiler() {
        // NVRTC and hiprtc run without include paths or a C++ library
        assert!(!KERNELS.contains("#include"), "no includes in ggraph.cu");
        assert!(
            !KERNELS.contains("std::"),
            "no standard library in ggraph.cu"
        );
        assert!(!KERNELS.contains("INFINITY"), "NVRTC has no INFINITY macro");
        for prelude in [COMPAT_CUDA, COMPAT_HIP] {
            for name in ["SHFL_XOR", "ATOMIC_OR", "DYN_SHARED"] {
                assert!(prelude.contains(name), "{name} missing from a prelude");
            }
        }
    }

    #[test]
    fn the_kernels_iq4_table_is_the_cores() {
        let decl = "IQ4_TABLE[16] = {";
        let start = KERNELS.find(decl).expect("IQ4_TABLE in ggraph.cu") + decl.len();
        let end = start + KERNELS[start..].find('}').expect("closing brace");
        let table: Vec<i8> = KERNELS[start..end]
            .split(',')
            .map(|v| v.trim().parse().expect("an i8"))
            .collect();
        assert_eq!(table, ggraph_core::quant::IQ4_VALUES);
    }

    #[test]
    fn kernel_names_skip_launch_bounds() {
        let source = "extern \"C\" __global__ void k_a(Tensor t) {\n\
                      extern \"C\" __global__ void __launch_bounds__(32 * 4, 8) k_b(Tensor t) {\n\
                      __device__ void helper() {\n";
        assert_eq!(parse_kernel_names(source), ["k_a", "k_b"]);
    }

    #[test]
    fn every_kernel_has_a_unique_name() {
        let mut names = kernel_names();
        assert!(names.len() >= 20, "{names:?}");
        assert!(names.contains(&"k_mul_mat_vec") && names.contains(&"k_flash_attn"));
        assert!(names.iter().all(|n| n.starts_with("k_")), "{names:?}");
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
