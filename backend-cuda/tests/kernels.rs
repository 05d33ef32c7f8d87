//! The kernel source through NVRTC, the compiler a CUDA device runs at its
//! first kernel: no GPU needed. The test command installs NVRTC (the
//! `nvidia-cuda-nvrtc` wheels) and sets `GGRAPH_REQUIRE_NVRTC=1`, so that
//! a kernel NVRTC rejects fails here rather than on a GPU.

use ggraph_gpu::source::kernel_names;

/// Targets a device asks for: its own architecture as a cubin (Hopper's
/// here), else PTX the driver compiles further. (Each compile takes NVRTC
/// 15 to 25 s on CI's cores; the source has no code per architecture.)
fn targets(nvrtc_major: u32) -> Vec<&'static str> {
    let mut t = vec!["sm_90", "compute_80"];
    // CUDA 13 dropped the architectures before Turing
    if nvrtc_major < 13 {
        t.push("compute_70");
    }
    t
}

#[test]
fn the_kernel_source_compiles_with_nvrtc_for_the_targets_devices_ask_for() {
    let Some(version) = ggraph_cuda::nvrtc_version() else {
        assert!(
            std::env::var("GGRAPH_REQUIRE_NVRTC").is_err(),
            "GGRAPH_REQUIRE_NVRTC is set but NVRTC (libnvrtc.so) was not found"
        );
        eprintln!("NVRTC not found: the kernels were not compiled");
        return;
    };
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .expect("NVRTC's version is MAJOR.MINOR");
    for target in targets(major) {
        let image = ggraph_cuda::compile_kernels(target)
            .unwrap_or_else(|e| panic!("NVRTC {version}, {target}: {e}"));
        if target.starts_with("sm_") {
            assert_eq!(&image[..4], b"\x7fELF", "{target}: a cubin is an ELF file");
        } else {
            let ptx = String::from_utf8_lossy(&image);
            for name in kernel_names() {
                assert!(
                    ptx.contains(&format!(".entry {name}(")),
                    "NVRTC {version}, {target}: no entry {name} in the PTX"
                );
            }
        }
    }
}
