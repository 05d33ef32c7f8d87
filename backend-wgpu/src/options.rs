//! How a wgpu device is opened: a declared memory budget, a cap on
//! binding sizes, and a forced mul_mat kernel.

/// The mul_mat kernels (see `kernels/matmul.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulKernel {
    /// Subgroup broadcasts (adapters with 8-lane subgroups, e.g. lavapipe).
    Subgroup,
    /// Shared-memory tiles with 4x4 register blocks.
    Tiled,
    /// One thread per result element.
    Generic,
}

/// How to open a device. The defaults are what the registry uses.
#[derive(Clone, Debug, Default)]
pub struct WgpuOptions {
    /// A declared memory budget: allocations beyond it fail, and memory
    /// queries report it (as `GGRAPH_WGPU_MEMORY` does).
    pub memory_budget_bytes: Option<u64>,
    /// Bind at most this many bytes of a tensor at once (below the
    /// adapter's limit), e.g. to exercise the windowed weight reads.
    pub max_binding_bytes: Option<u64>,
    /// Use this mul_mat kernel wherever it applies instead of choosing
    /// (`GGRAPH_WGPU_MATMUL=subgroup|tiled|generic` sets it for the
    /// registry's devices).
    pub matmul_kernel: Option<MatmulKernel>,
}

impl WgpuOptions {
    /// The registry's options: the defaults, with the mul_mat kernel
    /// from `GGRAPH_WGPU_MATMUL`.
    pub(crate) fn from_env() -> WgpuOptions {
        let matmul_kernel = match std::env::var("GGRAPH_WGPU_MATMUL").as_deref() {
            Ok("subgroup") => Some(MatmulKernel::Subgroup),
            Ok("tiled") => Some(MatmulKernel::Tiled),
            Ok("generic") => Some(MatmulKernel::Generic),
            _ => None,
        };
        WgpuOptions {
            matmul_kernel,
            ..WgpuOptions::default()
        }
    }
}
