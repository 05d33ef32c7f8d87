//! The peers' figures the bench programs print next to ours: ggml-cpu's
//! mul_mat and mul_mat_id GFLOP/s, llama.cpp's tokens/s, ggml's graph
//! allocator and scheduler on our bench graphs.
//!
//! They live in `docs/performance.md` ("Peer figures the bench programs
//! print"), one table per kind, read from that file when the benches are
//! built. The CPU figures come in sets, one per kind of machine they were
//! measured on; a bench prints the set of the machine it runs on
//! ([`measured_here`]) beside the CPU speed issue's ([`issue`]).

use std::sync::OnceLock;

use ggraph_core::DType;

/// The document the peers' tables live in.
const PERFORMANCE_MD: &str = include_str!("../../docs/performance.md");

/// Column counts of the mul_mat tables.
pub const MUL_MAT_COLUMNS: [usize; 3] = [1, 8, 512];

/// Token counts of the mul_mat_id table.
pub const MUL_MAT_ID_TOKENS: [usize; 8] = [1, 4, 8, 32, 64, 128, 256, 512];

/// The CPU peers of one kind of machine.
#[derive(Debug, Default)]
pub struct PeerSet {
    /// The set's key in the tables (`zen5-avx512`, ...).
    pub key: String,
    /// When and on what they were measured.
    pub label: String,
    /// ggml-cpu's GFLOP/s for weights 4096 x 14336 and f32 activations of
    /// [`MUL_MAT_COLUMNS`] columns.
    pub mul_mat: Vec<(DType, [f64; 3])>,
    /// ggml-cpu's GFLOP/s for 128 experts of 768 x 2048, 8 used per
    /// token, for [`MUL_MAT_ID_TOKENS`] tokens; empty where not measured.
    pub mul_mat_id: Vec<(DType, [f64; 8])>,
    pub runner: Vec<RunnerPeer>,
}

/// llama.cpp's tokens/s on one model: prompt 512 and generation 128.
#[derive(Clone, Debug, PartialEq)]
pub struct RunnerPeer {
    pub shape: String,
    pub weights: DType,
    pub prompt: f64,
    pub generation: f64,
}

/// ggml's graph allocator on the graph of `alloc_bench`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AllocPeer {
    pub nodes: usize,
    pub compute_bytes: u64,
    pub reserve_warm_us: f64,
    pub alloc_graph_us: f64,
    pub reserve_fresh_us: f64,
}

/// ggml's scheduler on the graph of `sched_bench`, one case; `None`
/// where the issue gave no figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedPeer {
    pub splits: usize,
    pub split_inputs: Option<usize>,
    pub gpu_compute_mib: Option<f64>,
    pub cpu_compute_mib: Option<f64>,
    pub reserve_us: Option<f64>,
    pub alloc_graph_us: Option<f64>,
}

/// The cells of the table under the heading `### {heading}` of
/// `docs/performance.md`, without its header row.
fn table(heading: &str) -> Vec<Vec<&'static str>> {
    let mut lines = PERFORMANCE_MD.lines();
    let title = format!("### {heading}");
    if !lines.any(|l| l.trim() == title) {
        panic!("docs/performance.md has no section '{title}'");
    }
    lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect()
        })
        .collect()
}

fn number(cell: &str, heading: &str) -> f64 {
    cell.parse()
        .unwrap_or_else(|_| panic!("'{cell}' in '{heading}' of docs/performance.md"))
}

fn optional(cell: &str, heading: &str) -> Option<f64> {
    (cell != "-").then(|| number(cell, heading))
}

fn dtype(cell: &str, heading: &str) -> DType {
    DType::from_name(cell)
        .unwrap_or_else(|| panic!("'{cell}' in '{heading}' of docs/performance.md"))
}

fn figures<const N: usize>(cells: &[&str], heading: &str) -> [f64; N] {
    std::array::from_fn(|i| number(cells[i], heading))
}

fn sets() -> &'static [PeerSet] {
    static SETS: OnceLock<Vec<PeerSet>> = OnceLock::new();
    SETS.get_or_init(|| {
        let mut sets: Vec<PeerSet> = table("Peer sets")
            .iter()
            .map(|r| PeerSet {
                key: r[0].to_string(),
                label: r[1].to_string(),
                ..PeerSet::default()
            })
            .collect();
        let set_of = |key: &str, heading: &str| -> usize {
            sets.iter()
                .position(|s| s.key == key)
                .unwrap_or_else(|| panic!("set '{key}' of '{heading}' is not in 'Peer sets'"))
        };
        let h = "ggml-cpu mul_mat, GFLOP/s";
        let mul_mat: Vec<_> = table(h)
            .iter()
            .map(|r| (set_of(r[0], h), dtype(r[1], h), figures(&r[2..], h)))
            .collect();
        let h = "ggml-cpu mul_mat_id, GFLOP/s";
        let mul_mat_id: Vec<_> = table(h)
            .iter()
            .map(|r| (set_of(r[0], h), dtype(r[1], h), figures(&r[2..], h)))
            .collect();
        let h = "llama.cpp runner, tokens/s";
        let runner: Vec<_> = table(h)
            .iter()
            .map(|r| {
                let peer = RunnerPeer {
                    shape: r[1].to_string(),
                    weights: dtype(r[2], h),
                    prompt: number(r[3], h),
                    generation: number(r[4], h),
                };
                (set_of(r[0], h), peer)
            })
            .collect();
        for (s, t, f) in mul_mat {
            sets[s].mul_mat.push((t, f));
        }
        for (s, t, f) in mul_mat_id {
            sets[s].mul_mat_id.push((t, f));
        }
        for (s, p) in runner {
            sets[s].runner.push(p);
        }
        sets
    })
}

fn set(key: &str) -> &'static PeerSet {
    sets()
        .iter()
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("docs/performance.md has no peer set '{key}'"))
}

/// The CPU speed issue's figures.
pub fn issue() -> &'static PeerSet {
    set("issue")
}

/// The peers measured on the kind of machine this one is: with AVX-512,
/// the Cascade Lake set on an Intel processor, the Zen 5 set on an AMD
/// family-26 one and the Zen 4 set on others; without it, the AVX2 set.
pub fn measured_here() -> &'static PeerSet {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        return set(if intel() {
            "xeon-cascadelake-avx512"
        } else if cpu_family() == 26 {
            "zen5-avx512"
        } else {
            "zen4-avx512"
        });
    }
    set("zen3-avx2")
}

/// Whether the processor is Intel's (CPUID leaf 0's vendor string).
#[cfg(target_arch = "x86_64")]
fn intel() -> bool {
    let id = std::arch::x86_64::__cpuid(0);
    let mut vendor = [0u8; 12];
    for (i, word) in [id.ebx, id.edx, id.ecx].into_iter().enumerate() {
        vendor[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
    }
    &vendor == b"GenuineIntel"
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

/// ggml's graph allocator on the graph of `alloc_bench`.
pub fn alloc() -> AllocPeer {
    let h = "ggml graph allocator";
    let rows = table(h);
    let value = |name: &str| -> f64 {
        let row = rows
            .iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("'{h}' has no row '{name}'"));
        number(row[1], h)
    };
    AllocPeer {
        nodes: value("nodes") as usize,
        compute_bytes: value("compute bytes") as u64,
        reserve_warm_us: value("reserve, warm (µs)"),
        alloc_graph_us: value("alloc_graph (µs)"),
        reserve_fresh_us: value("reserve, fresh (µs)"),
    }
}

/// ggml's scheduler on the graph of `sched_bench`, for the case named
/// `case` (`op offload off`, `op offload on`, `no layers, op offload on`,
/// `CPU only`).
pub fn sched(case: &str) -> SchedPeer {
    let h = "ggml scheduler";
    let rows = table(h);
    let r = rows
        .iter()
        .find(|r| r[0] == case)
        .unwrap_or_else(|| panic!("'{h}' has no case '{case}'"));
    SchedPeer {
        splits: number(r[1], h) as usize,
        split_inputs: optional(r[2], h).map(|v| v as usize),
        gpu_compute_mib: optional(r[3], h),
        cpu_compute_mib: optional(r[4], h),
        reserve_us: optional(r[5], h),
        alloc_graph_us: optional(r[6], h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_set_has_the_issue_cells_and_models() {
        for key in [
            "issue",
            "zen4-avx512",
            "zen3-avx2",
            "zen5-avx512",
            "xeon-cascadelake-avx512",
        ] {
            let set = set(key);
            for t in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0] {
                for n in MUL_MAT_COLUMNS {
                    assert!(
                        set.mul_mat(t, n).is_some_and(|v| v > 0.0),
                        "{} {t} n={n}",
                        set.label
                    );
                }
            }
            for p in &issue().runner {
                let here = set.runner(&p.shape, p.weights);
                assert!(
                    here.is_some_and(|h| h.prompt > 0.0 && h.generation > 0.0),
                    "{} {}",
                    set.label,
                    p.shape
                );
            }
        }
        assert_eq!(issue().mul_mat(DType::BF16, 1), None);
        assert_eq!(set("zen3-avx2").mul_mat(DType::Q4_K, 3), None);
        assert_eq!(set("zen5-avx512").mul_mat(DType::Q4_K, 512), Some(869.8));
        assert_eq!(set("zen5-avx512").mul_mat_id(DType::Q6_K, 512), Some(305.3));
        assert!(measured_here().runner.len() >= 6);
    }

    #[test]
    fn the_allocator_and_scheduler_peers_are_read() {
        let a = alloc();
        assert_eq!((a.nodes, a.compute_bytes), (1028, 280 << 20));
        let on = sched("op offload on");
        assert_eq!(on.splits, 244);
        assert_eq!(on.gpu_compute_mib, Some(121.75));
        let cpu = sched("CPU only");
        assert_eq!((cpu.splits, cpu.split_inputs), (1, None));
        assert_eq!(cpu.alloc_graph_us, Some(67.0));
        assert_eq!(sched("no layers, op offload on").splits, 420);
    }
}
