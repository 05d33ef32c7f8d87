// The kernel names of kernels/ggraph.cu, read by build.rs (for the
// emulator's launch table) and by `source::kernel_names`: both include
// this file, as a build script cannot use the crate.

/// Names of the `extern "C" __global__` kernels of `source`, in order; a
/// `__launch_bounds__(...)` before the name is skipped.
fn parse_kernel_names(source: &str) -> Vec<&str> {
    const MARK: &str = "extern \"C\" __global__ void ";
    source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(MARK))
        .map(|rest| match rest.strip_prefix("__launch_bounds__(") {
            Some(bounded) => bounded.split_once(") ").map_or("", |(_, name)| name),
            None => rest,
        })
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect()
}
