//! Why the scheduler did what it did: a per-node and per-split report, and
//! DOT with nodes coloured by backend and splits as clusters.

use std::fmt::Write;

use super::Scheduler;
use crate::ir::NodeStyle;
use crate::util::format_bytes;

const PALETTE: [&str; 8] = [
    "#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6", "#ffff99", "#1f78b4", "#33a02c",
];

impl Scheduler {
    /// Per node: its backend and why; per split: its inputs and the bytes
    /// they copy.
    pub fn explain(&self) -> String {
        let Some(g) = self.graph() else {
            return "no graph has been split yet\n".into();
        };
        let mut out = String::new();
        let name = |b: super::BackendId| self.device(b).name().to_string();
        let _ = writeln!(
            out,
            "{:>5} {:<28} {:<16} {:<8} why",
            "leaf", "name", "type", "backend"
        );
        for &l in g.leafs() {
            let t = g.tensor(l);
            let b = self.backend_of(l).map_or("-".into(), name);
            let why = self.cause_of(l).map_or("-".into(), |c| c.to_string());
            let kind = if t.flags.weight {
                "weight"
            } else if t.flags.input {
                "input"
            } else {
                "leaf"
            };
            let _ = writeln!(
                out,
                "{:>5} {:<28} {kind:<16} {b:<8} {why}",
                l.0,
                g.display_name(l)
            );
        }
        let _ = writeln!(
            out,
            "{:>5} {:<28} {:<16} {:<8} why",
            "node", "name", "op", "backend"
        );
        for (i, &n) in g.nodes().iter().enumerate() {
            let t = g.tensor(n);
            let b = self.backend_of(n).map_or("-".into(), name);
            let why = self.cause_of(n).map_or("-".into(), |c| c.to_string());
            let _ = writeln!(
                out,
                "{i:>5} {:<28} {:<16} {b:<8} {why}",
                g.display_name(n),
                t.op.label()
            );
        }
        let mut total = 0;
        for (si, split) in self.splits().iter().enumerate() {
            let _ = writeln!(
                out,
                "split {si} on {}: nodes {}..{}, {} input(s), {} copied",
                name(split.backend),
                split.nodes.start,
                split.nodes.end,
                split.inputs.len(),
                format_bytes(split.bytes_copied())
            );
            for input in &split.inputs {
                let from = self.backend_of(input.source).map_or("-".into(), name);
                let _ = writeln!(
                    out,
                    "    {} ({from} -> {}): {}",
                    g.display_name(input.source),
                    name(split.backend),
                    format_bytes(input.bytes)
                );
            }
            total += split.bytes_copied();
        }
        let _ = writeln!(
            out,
            "{} split(s), {} copies, {} copied per run",
            self.splits().len(),
            self.stats().copies,
            format_bytes(total)
        );
        out
    }

    /// The scheduled graph in DOT: nodes coloured by backend, one cluster
    /// per split.
    pub fn to_dot(&self) -> String {
        let Some(g) = self.graph() else {
            return "digraph ggraph {}\n".into();
        };
        let mut split_of = vec![None; g.n_tensors()];
        for (si, split) in self.splits().iter().enumerate() {
            for &n in &g.nodes()[split.nodes.clone()] {
                split_of[n.index()] = Some(si);
            }
        }
        g.to_dot_styled(|id| {
            let b = self.backend_of(id);
            NodeStyle {
                color: b.map(|b| PALETTE[b.index() % PALETTE.len()].to_string()),
                cluster: split_of[id.index()].map(|si| {
                    let backend = self.splits()[si].backend;
                    (si, format!("split {si}: {}", self.device(backend).name()))
                }),
                note: b.map(|b| self.device(b).name().to_string()),
            }
        })
    }
}
