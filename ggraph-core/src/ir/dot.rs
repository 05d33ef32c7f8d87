//! Graphviz DOT export of a graph.

use std::fmt::Write;

use super::graph::Graph;
use super::tensor::TensorId;

/// How to draw one node: a fill colour and an optional cluster (e.g. the
/// split it belongs to). The scheduler provides these; plain graphs use the
/// default.
#[derive(Clone, Debug, Default)]
pub struct NodeStyle {
    /// Fill colour as Graphviz takes it (`"#ffcc88"`, `"lightblue"`); `None`
    /// draws white.
    pub color: Option<String>,
    /// Key and label of a cluster: nodes with the same key are drawn in one
    /// box with that label. `None` leaves the node outside any cluster.
    pub cluster: Option<(usize, String)>,
    /// An extra line at the bottom of the node's record (a backend name or
    /// the reason for a placement, say).
    pub note: Option<String>,
}

impl Graph {
    /// The graph in DOT: leafs as boxes, nodes as ellipses with op, type and
    /// shape, edges from sources to consumers.
    pub fn to_dot(&self) -> String {
        self.to_dot_styled(|_| NodeStyle::default())
    }

    /// DOT with a style per node (colour by backend, clusters by split).
    pub fn to_dot_styled(&self, style: impl Fn(TensorId) -> NodeStyle) -> String {
        let mut out = String::from(
            "digraph ggraph {\n  rankdir = TB;\n  node [fontname=\"monospace\" fontsize=10];\n",
        );
        let label = |id: TensorId| {
            let t = self.tensor(id);
            format!(
                "{} | {} | {} {:?}",
                escape(&self.display_name(id)),
                t.op.label(),
                t.dtype,
                t.ne
            )
        };
        for &l in self.leafs() {
            let _ = writeln!(
                out,
                "  t{} [shape=record style=filled fillcolor=\"#eeeeee\" label=\"{{{}}}\"];",
                l.0,
                label(l)
            );
        }
        let mut clusters: Vec<(usize, String, Vec<String>)> = Vec::new();
        for &n in self.nodes() {
            let s = style(n);
            let color = s.color.unwrap_or_else(|| "#ffffff".into());
            let note = s
                .note
                .map(|n| format!(" | {}", escape(&n)))
                .unwrap_or_default();
            let line = format!(
                "  t{} [shape=record style=\"rounded,filled\" fillcolor=\"{}\" label=\"{{{}{}}}\"];",
                n.0,
                color,
                label(n),
                note
            );
            match s.cluster {
                Some((k, name)) => match clusters.iter_mut().find(|c| c.0 == k) {
                    Some(c) => c.2.push(line),
                    None => clusters.push((k, name, vec![line])),
                },
                None => {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
        for (k, name, lines) in clusters {
            let _ = writeln!(
                out,
                "  subgraph cluster_{k} {{\n    label=\"{}\";",
                escape(&name)
            );
            for l in lines {
                let _ = writeln!(out, "  {l}");
            }
            out.push_str("  }\n");
        }
        for &n in self.nodes() {
            for s in &self.tensor(n).src {
                let _ = writeln!(out, "  t{} -> t{};", s.0, n.0);
            }
        }
        out.push_str("}\n");
        out
    }
}

fn escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' | '{' | '}' | '|' | '<' | '>' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}
