//! The on-disk cache of compiled kernels, under a key made of the source
//! hash, the architecture, the options and the compiler's version, so a
//! second run of a program skips NVRTC / hiprtc.

use std::path::PathBuf;

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

/// The compiled kernels for `target` from the disk cache, else from
/// `compile` (then stored for the next run).
pub fn load_or_compile(
    family: &str,
    target: &str,
    source: &str,
    options: &[String],
    compiler_version: &str,
    compile: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    let file =
        cache_dir().map(|d| cache_file(&d, family, target, source, options, compiler_version));
    if let Some(bytes) = file.as_deref().and_then(cache_read) {
        return Ok(bytes);
    }
    let bytes = compile()?;
    if let Some(f) = &file {
        cache_write(f, &bytes);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
