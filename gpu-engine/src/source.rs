//! The kernel source and the on-disk cache of compiled kernels.
//!
//! One CUDA C file (`kernels/ggraph.cu`) serves CUDA and HIP; a small
//! prelude per family maps the names that differ. Compiled code is cached
//! in memory by each runtime and on disk under a key made of the source
//! hash, the architecture and the compiler's version, so a second run of a
//! program skips NVRTC / hiprtc.

use std::path::PathBuf;

/// The kernels, shared by every family.
pub const KERNELS: &str = include_str!("../kernels/ggraph.cu");
/// The CUDA prelude.
pub const COMPAT_CUDA: &str = include_str!("../kernels/compat_cuda.h");
/// The HIP prelude.
pub const COMPAT_HIP: &str = include_str!("../kernels/compat_hip.h");

/// The full source for a family: its prelude, then the kernels.
pub fn full_source(prelude: &str) -> String {
    format!("{prelude}\n#line 1 \"ggraph.cu\"\n{KERNELS}")
}

/// Names of the kernels of the source (the `extern "C" __global__` ones).
pub fn kernel_names() -> Vec<&'static str> {
    const MARK: &str = "extern \"C\" __global__ void ";
    KERNELS
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(MARK))
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .collect()
}

/// FNV-1a, 64 bits: a stable hash for cache keys.
pub fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for b in *p {
            h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
        // separate the parts, so that ("ab", "c") and ("a", "bc") differ
        h = (h ^ 0xff).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Where compiled kernels are kept: `GGRAPH_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/ggraph/kernels`, else `~/.cache/ggraph/kernels`.
/// `GGRAPH_KERNEL_CACHE=off` disables the disk cache.
pub fn cache_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("GGRAPH_KERNEL_CACHE") {
        if d == "off" || d.is_empty() {
            return None;
        }
        return Some(PathBuf::from(d));
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME")
        && !d.is_empty()
    {
        return Some(PathBuf::from(d).join("ggraph").join("kernels"));
    }
    std::env::var("HOME").ok().map(|h| {
        PathBuf::from(h)
            .join(".cache")
            .join("ggraph")
            .join("kernels")
    })
}

/// The cache file for compiled code: family, architecture and a hash of
/// everything that determines the result.
pub fn cache_file(
    dir: &std::path::Path,
    family: &str,
    arch: &str,
    source: &str,
    options: &[String],
    compiler_version: &str,
) -> PathBuf {
    let opts = options.join("\u{1}");
    let key = fnv64(&[
        source.as_bytes(),
        arch.as_bytes(),
        opts.as_bytes(),
        compiler_version.as_bytes(),
    ]);
    let safe_arch: String = arch
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    dir.join(format!(
        "{}-{safe_arch}-{key:016x}.bin",
        family.to_lowercase()
    ))
}

/// Reads a cached binary; `None` when absent or unreadable.
pub fn cache_read(path: &std::path::Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    (!bytes.is_empty()).then_some(bytes)
}

/// Writes a binary to the cache (through a temporary file and a rename,
/// so a concurrent reader never sees half a file). Failures are logged
/// and otherwise ignored: the cache is an optimisation.
pub fn cache_write(path: &std::path::Path, bytes: &[u8]) {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        tracing::warn!("cannot write kernel cache {}: {e}", path.display());
    }
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
    fn every_kernel_has_a_unique_name() {
        let mut names = kernel_names();
        assert!(names.len() >= 20, "{names:?}");
        assert!(names.contains(&"k_mul_mat_vec") && names.contains(&"k_flash_attn"));
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn cache_keys_change_with_source_arch_and_compiler() {
        let dir = std::path::Path::new("/tmp/x");
        let o = vec!["-O3".to_string()];
        let a = cache_file(dir, "CUDA", "sm_90", "src", &o, "12.8");
        assert_eq!(a, cache_file(dir, "CUDA", "sm_90", "src", &o, "12.8"));
        assert_ne!(a, cache_file(dir, "CUDA", "sm_89", "src", &o, "12.8"));
        assert_ne!(a, cache_file(dir, "CUDA", "sm_90", "src2", &o, "12.8"));
        assert_ne!(a, cache_file(dir, "CUDA", "sm_90", "src", &o, "12.9"));
        assert_ne!(a, cache_file(dir, "CUDA", "sm_90", "src", &[], "12.8"));
        assert!(a.to_string_lossy().contains("cuda-sm_90-"));
    }

    #[test]
    fn the_disk_cache_round_trips() {
        let dir = std::env::temp_dir().join(format!("ggraph-cache-test-{}", std::process::id()));
        let f = cache_file(&dir, "HIP", "gfx90a:xnack-", "s", &[], "v");
        assert!(cache_read(&f).is_none());
        cache_write(&f, b"code");
        assert_eq!(cache_read(&f).as_deref(), Some(&b"code"[..]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
