//! One conformance case: a graph built on a [`CaseBuilder`], how its
//! leafs are filled, and what came of running it.

use std::collections::HashMap;

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::{Graph, GraphBuilder, OpKind, TensorId};
use ggraph_core::quant;
use ggraph_core::util::Rng;

/// How a case fills one of its leafs.
#[derive(Clone, Debug)]
pub(crate) enum Fill {
    Uniform(f32, f32),
    /// Uniform magnitude in [lo, hi) with a random sign.
    AwayFromZero(f32, f32),
    /// I32 values in 0..max.
    Indices(usize),
    /// Distinct I32 values in 0..max (at most max of them).
    DistinctIndices(usize),
    /// A random permutation of evenly spaced values, so sorts have no ties.
    Distinct,
    /// A causal mask: 0 where key j <= query i + (n_kv - n_q), -inf elsewhere.
    Causal {
        n_kv: usize,
        n_q: usize,
    },
    /// Positions p0, p0+1, ...
    Positions(i32),
}

/// Builds one case's graph and records how to fill its leafs.
pub struct CaseBuilder {
    /// The case's graph under construction. A leaf added here directly,
    /// rather than through the suite's own helpers, is filled with uniform
    /// values in [-1, 1).
    pub b: GraphBuilder,
    pub(crate) fills: HashMap<TensorId, Fill>,
}

impl CaseBuilder {
    pub(crate) fn new() -> CaseBuilder {
        CaseBuilder {
            b: GraphBuilder::new(),
            fills: HashMap::new(),
        }
    }

    pub(crate) fn input(&mut self, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        let n = self.fills.len();
        self.b.input(&format!("in{n}"), dtype, shape)
    }

    pub(crate) fn filled(&mut self, dtype: DType, shape: &[usize], fill: Fill) -> Result<TensorId> {
        let id = self.input(dtype, shape)?;
        self.fills.insert(id, fill);
        Ok(id)
    }
}

pub(crate) type BuildFn = Box<dyn Fn(&mut CaseBuilder) -> Result<TensorId> + Send + Sync>;

/// One conformance case: a graph whose output is compared with the
/// reference.
pub struct Case {
    /// Unique within the suite: the op, then types and shape in brackets,
    /// e.g. `get_rows[F32,n=67,rows=10,idx=[5]]`. [`run_filtered`](crate::run_filtered)
    /// selects on it, and it seeds the case's data, so a case gets the same
    /// data on every device.
    pub name: String,
    /// The op under test; [`Report::summary`](crate::Report::summary) groups by it.
    pub op: OpKind,
    /// Largest normalised mean squared error that passes.
    pub max_nmse: f64,
    pub(crate) build: BuildFn,
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The result is within the case's bound.
    Pass {
        /// Normalised mean squared error against the reference, at most
        /// the case's `max_nmse`.
        nmse: f64,
    },
    /// The result exceeds the case's bound.
    Fail {
        /// Normalised mean squared error against the reference; infinite
        /// when the lengths differ or NaNs are not where the reference has
        /// them (see [`nmse`](crate::nmse)).
        nmse: f64,
    },
    /// The device's `supports_op` refused an op of the case.
    Unsupported,
    /// Building, running or reading back failed.
    Error(String),
}

/// What came of running one [`Case`] on a device.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The case's [`name`](Case::name).
    pub name: String,
    /// The op the case tests.
    pub op: OpKind,
    /// The case's bound on the normalised mean squared error.
    pub max_nmse: f64,
    /// Passed, failed, refused by the device, or an error.
    pub outcome: Outcome,
}

/// Fills the case's leafs with data, returning their bytes.
pub(crate) fn fill_leafs(
    graph: &Graph,
    fills: &HashMap<TensorId, Fill>,
    seed: u64,
) -> Result<HashMap<TensorId, Vec<u8>>> {
    let mut rng = Rng::new(seed);
    let mut out = HashMap::new();
    for &leaf in graph.leafs() {
        let t = graph.tensor(leaf);
        let n = t.nelements();
        let fill = fills
            .get(&leaf)
            .cloned()
            .unwrap_or(Fill::Uniform(-1.0, 1.0));
        let values: Vec<f32> = match fill {
            Fill::Uniform(lo, hi) => rng.vec(n, lo, hi),
            Fill::AwayFromZero(lo, hi) => (0..n)
                .map(|_| {
                    let m = rng.uniform(lo, hi);
                    if rng.below(2) == 0 { m } else { -m }
                })
                .collect(),
            Fill::Indices(max) => (0..n).map(|_| rng.below(max) as f32).collect(),
            Fill::DistinctIndices(max) => {
                let mut all: Vec<usize> = (0..max).collect();
                for i in (1..all.len()).rev() {
                    all.swap(i, rng.below(i + 1));
                }
                (0..n).map(|i| all[i % max.max(1)] as f32).collect()
            }
            Fill::Distinct => {
                let mut v: Vec<f32> = (0..n)
                    .map(|i| i as f32 / n.max(1) as f32 * 2.0 - 1.0)
                    .collect();
                for i in (1..v.len()).rev() {
                    v.swap(i, rng.below(i + 1));
                }
                v
            }
            Fill::Causal { n_kv, n_q } => {
                let rows = n / n_kv.max(1);
                let mut v = Vec::with_capacity(n);
                for r in 0..rows {
                    let i = r % t.ne[1];
                    for j in 0..n_kv {
                        let visible = i >= n_q || j <= i + (n_kv - n_q);
                        v.push(if visible { 0.0 } else { f32::NEG_INFINITY });
                    }
                }
                v
            }
            Fill::Positions(p0) => (0..n).map(|i| (p0 + i as i32) as f32).collect(),
        };
        let bytes = if t.is_empty() {
            Vec::new()
        } else {
            quant::quantize(t.dtype, &values)?
        };
        out.insert(leaf, bytes);
    }
    Ok(out)
}
