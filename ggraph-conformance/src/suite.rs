//! Running the suite on a device: every case built, filled, computed,
//! and compared with the f64 reference by normalised mean squared error.

use std::fmt::Write;
use std::sync::Arc;

use ggraph_core::backend::{Buffer, BufferType, BufferUsage, Device};
use ggraph_core::error::{Error, Result};
use ggraph_core::exec;
use ggraph_core::ir::{Graph, OpKind, TensorId};

use crate::case::{Case, CaseBuilder, CaseResult, Outcome, fill_leafs};
use crate::cases::cases;
use crate::reference;

/// The result of a suite run on one device.
#[derive(Clone, Debug)]
pub struct Report {
    /// The device's name, as `Device::name` gives it (e.g. `CPU`).
    pub device: String,
    /// One result per case run, in the order of [`cases`](crate::cases()).
    pub results: Vec<CaseResult>,
}

impl Report {
    /// Number of cases within their bound.
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Pass { .. }))
    }

    /// Number of cases the device refused (its `supports_op` said no to
    /// one of their ops). They count neither as passed nor as failed: the
    /// scheduler places such ops on another device.
    pub fn unsupported(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Unsupported))
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Cases that failed or errored.
    pub fn failures(&self) -> Vec<&CaseResult> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Fail { .. } | Outcome::Error(_)))
            .collect()
    }

    /// One line per op: cases passed, failed, unsupported, worst NMSE.
    pub fn summary(&self) -> String {
        let mut by_op: Vec<(OpKind, usize, usize, usize, f64)> = Vec::new();
        for r in &self.results {
            let i = match by_op.iter().position(|e| e.0 == r.op) {
                Some(i) => i,
                None => {
                    by_op.push((r.op, 0, 0, 0, 0.0));
                    by_op.len() - 1
                }
            };
            let e = &mut by_op[i];
            match &r.outcome {
                Outcome::Pass { nmse } => {
                    e.1 += 1;
                    e.4 = e.4.max(*nmse);
                }
                Outcome::Fail { .. } | Outcome::Error(_) => e.2 += 1,
                Outcome::Unsupported => e.3 += 1,
            }
        }
        let mut s = format!(
            "conformance on {}: {} passed, {} failed, {} unsupported\n{:<16} {:>5} {:>5} {:>6} {:>10}\n",
            self.device,
            self.passed(),
            self.failures().len(),
            self.unsupported(),
            "op",
            "pass",
            "fail",
            "unsup",
            "worst nmse"
        );
        for (op, p, f, u, w) in by_op {
            let _ = writeln!(
                s,
                "{:<16} {:>5} {:>5} {:>6} {:>10.2e}",
                op.name(),
                p,
                f,
                u,
                w
            );
        }
        for r in self.failures() {
            let _ = writeln!(
                s,
                "FAILED {}: {:?} (bound {:.1e})",
                r.name, r.outcome, r.max_nmse
            );
        }
        s
    }

    /// `Ok` when nothing failed; otherwise the summary as the error.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.failures().is_empty() {
            Ok(())
        } else {
            Err(self.summary())
        }
    }
}

/// Runs every case on `device`, one after another, each in a fresh buffer
/// of the device's buffer type. A case that fails to build, run or read
/// back is recorded as [`Outcome::Error`] and the run goes on.
pub fn run(device: &Arc<dyn Device>) -> Report {
    run_filtered(device, |_| true)
}

/// Runs the cases whose [`name`](crate::Case::name) passes `filter`, as
/// [`run`] does; e.g. `|name| name.starts_with("rope[")` for the rope
/// cases.
pub fn run_filtered(device: &Arc<dyn Device>, filter: impl Fn(&str) -> bool) -> Report {
    let results = cases()
        .into_iter()
        .filter(|c| filter(&c.name))
        .map(|c| {
            let outcome = match run_case(device.as_ref(), &c, None) {
                Ok(o) => o.unwrap_or(Outcome::Unsupported),
                Err(e) => Outcome::Error(e.to_string()),
            };
            result_of(c, outcome)
        })
        .collect();
    Report {
        device: device.name().to_string(),
        results,
    }
}

/// Runs, for each layout buffer type `device` offers
/// ([`Device::layout_buffer_types`]), every case with an input that the
/// buffer type lays out, with those inputs in a buffer of it (written with
/// ggml's bytes, which the buffer converts) and the rest in the device's
/// memory; one report per layout buffer type, named `DEVICE (BUFFER
/// TYPE)`. Cases with no such input are left out of its report.
pub fn run_layouts(device: &Arc<dyn Device>) -> Vec<Report> {
    device
        .layout_buffer_types()
        .into_iter()
        .map(|layout| {
            let results = cases()
                .into_iter()
                .filter_map(|c| {
                    let outcome = match run_case(device.as_ref(), &c, Some(&layout)) {
                        Ok(None) => return None,
                        Ok(Some(o)) => o,
                        Err(e) => Outcome::Error(e.to_string()),
                    };
                    Some(result_of(c, outcome))
                })
                .collect();
            Report {
                device: format!("{} ({})", device.name(), layout.name()),
                results,
            }
        })
        .collect()
}

fn result_of(c: Case, outcome: Outcome) -> CaseResult {
    CaseResult {
        name: c.name,
        op: c.op,
        max_nmse: c.max_nmse,
        outcome,
    }
}

/// Normalised mean squared error of `out` against `reference`.
pub fn nmse(out: &[f32], reference: &[f64]) -> f64 {
    if out.len() != reference.len() {
        return f64::INFINITY;
    }
    let mut err = 0.0;
    let mut norm = 0.0;
    for (o, r) in out.iter().zip(reference) {
        let o = *o as f64;
        if o.is_nan() != r.is_nan() {
            return f64::INFINITY;
        }
        if r.is_nan() || (o.is_infinite() && o == *r) {
            continue;
        }
        err += (o - r) * (o - r);
        norm += r * r;
    }
    if err == 0.0 {
        0.0
    } else if norm == 0.0 {
        f64::INFINITY
    } else {
        err / norm
    }
}

/// Runs one case; with a `layout` buffer type, the inputs it lays out go
/// in a buffer of it, and a case with none gives `None`.
fn run_case(
    device: &dyn Device,
    case: &Case,
    layout: Option<&Arc<dyn BufferType>>,
) -> Result<Option<Outcome>> {
    let mut cb = CaseBuilder::new();
    let out = (case.build)(&mut cb)?;
    cb.b.set_output(out)?;
    let fills = std::mem::take(&mut cb.fills);
    let mut graph = cb.b.build();
    let _laid = match layout {
        Some(layout) => match bind_laid_out(&mut graph, layout)? {
            Some(buffer) => Some(buffer),
            None => return Ok(None),
        },
        None => None,
    };
    for &n in graph.nodes() {
        if !graph.tensor(n).op.is_noop() && !device.supports_op(&graph, n) {
            return Ok(Some(Outcome::Unsupported));
        }
    }
    let data = fill_leafs(&graph, &fills, fnv(&case.name))?;
    let _buffer = exec::alloc_one_buffer(&mut graph, &device.buffer_type())?;
    for (&leaf, bytes) in &data {
        graph.write_bytes(leaf, bytes)?;
    }
    exec::compute_on(device, &graph)?;
    let got = graph.read_f32(out)?;
    let ev = reference::evaluate(&graph, |id| {
        data.get(&id)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("no data for leaf {id}")))
    })?;
    let want = ev.values(out);
    let e = nmse(&got, &want);
    Ok(Some(if e <= case.max_nmse {
        Outcome::Pass { nmse: e }
    } else {
        Outcome::Fail { nmse: e }
    }))
}

/// Binds the leafs of `graph` that `layout` lays out to one buffer of it;
/// `None` when there are none.
fn bind_laid_out(
    graph: &mut Graph,
    layout: &Arc<dyn BufferType>,
) -> Result<Option<Arc<dyn Buffer>>> {
    let ids: Vec<TensorId> = graph
        .leafs()
        .iter()
        .copied()
        .filter(|&id| {
            let t = graph.tensor(id);
            t.view.is_none() && t.data.is_none() && layout.lays_out(t.dtype, &t.ne)
        })
        .collect();
    exec::alloc_buffer_for(graph, &ids, layout, BufferUsage::Weights)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
