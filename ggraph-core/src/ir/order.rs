//! Execution order for graphs that come without one: a graph assembled
//! from parts or imported from elsewhere lists its nodes in any order, and
//! [`Graph::sort_nodes`] puts sources first, or names the circle that
//! makes that impossible.
//!
//! [`Graph::validate`] checks an order in one linear pass (the scheduler
//! runs it on every graph); sorting and naming a circle are petgraph's work
//! (topological sort, strongly connected components), done once per
//! imported graph or failed check.

use std::collections::HashMap;

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::DiGraph;

use super::graph::Graph;
use super::op::Op;
use super::tensor::TensorId;
use crate::error::{Error, Result};

/// The dependencies among a graph's nodes: an edge from each computed
/// source to the node that reads it. Leafs need no order.
struct Dependencies {
    graph: DiGraph<TensorId, ()>,
}

impl Dependencies {
    fn of(g: &Graph) -> Result<Dependencies> {
        let mut graph = DiGraph::with_capacity(g.nodes().len(), g.nodes().len() * 2);
        let mut index = HashMap::with_capacity(g.nodes().len());
        for &n in g.nodes() {
            g.get(n)?;
            index.entry(n).or_insert_with(|| graph.add_node(n));
        }
        for &n in g.nodes() {
            for &s in &g.tensor(n).src {
                g.get(s)?;
                match index.get(&s) {
                    Some(&from) => {
                        graph.add_edge(from, index[&n], ());
                    }
                    None if matches!(g.tensor(s).op, Op::Leaf) => {}
                    None => {
                        return Err(Error::InvalidArgument(format!(
                            "'{}' reads '{}', which is computed but not a node of the graph",
                            g.display_name(n),
                            g.display_name(s)
                        )));
                    }
                }
            }
        }
        Ok(Dependencies { graph })
    }

    /// The tensors of one circle of dependencies, if there is one.
    fn circle(&self) -> Option<Vec<TensorId>> {
        tarjan_scc(&self.graph)
            .into_iter()
            .find(|c| c.len() > 1 || self.graph.contains_edge(c[0], c[0]))
            .map(|c| c.into_iter().map(|i| self.graph[i]).collect())
    }
}

fn circle_error(g: &Graph, circle: &[TensorId]) -> Error {
    let names: Vec<String> = circle.iter().map(|&t| g.display_name(t)).collect();
    Error::InvalidArgument(format!(
        "the graph's nodes depend on each other in a circle: {}",
        names.join(" -> ")
    ))
}

impl Graph {
    /// Checks that every node's sources are computed before it or are leafs,
    /// and that every source id is in the arena. Use on imported graphs.
    pub fn validate(&self) -> Result<()> {
        let mut ready = vec![false; self.tensors.len()];
        for &l in &self.leafs {
            self.get(l)?;
            ready[l.index()] = true;
        }
        for (pos, &n) in self.nodes.iter().enumerate() {
            let t = self.get(n)?;
            for &s in &t.src {
                self.get(s)?;
                let src = self.tensor(s);
                if !ready[s.index()] && !matches!(src.op, Op::Leaf) {
                    let circle = Dependencies::of(self).ok().and_then(|d| d.circle());
                    return Err(match circle {
                        Some(c) => circle_error(self, &c),
                        None => Error::InvalidArgument(format!(
                            "node {pos} ('{}') reads '{}' before it is computed (Graph::sort_nodes orders a graph's nodes)",
                            self.display_name(n),
                            self.display_name(s)
                        )),
                    });
                }
            }
            ready[n.index()] = true;
        }
        Ok(())
    }

    /// Orders the nodes so that every node comes after the nodes it reads
    /// (views included); an error names the nodes of a circle, or a source
    /// that is computed but missing from the node list, and leaves the
    /// graph as it was.
    pub fn sort_nodes(&mut self) -> Result<()> {
        let deps = Dependencies::of(self)?;
        match toposort(&deps.graph, None) {
            Ok(order) => {
                let nodes = order.into_iter().map(|i| deps.graph[i]).collect();
                self.set_nodes(nodes);
                Ok(())
            }
            Err(_) => {
                let circle = deps.circle().unwrap_or_default();
                Err(circle_error(self, &circle))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::GraphBuilder;

    /// y = silu(a + b) * b, and its nodes.
    fn graph() -> (crate::ir::Graph, Vec<crate::ir::TensorId>) {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[4, 2]).unwrap();
        let w = b.input("w", DType::F32, &[4, 2]).unwrap();
        let s = b.add(x, w).unwrap();
        let a = b.silu(s).unwrap();
        let y = b.mul(a, w).unwrap();
        b.set_output(y).unwrap();
        let g = b.build();
        let nodes = g.nodes().to_vec();
        (g, nodes)
    }

    #[test]
    fn nodes_given_in_any_order_are_sorted_sources_first() {
        let (mut g, nodes) = graph();
        let mut shuffled = nodes.clone();
        shuffled.reverse();
        g.set_nodes(shuffled);
        assert!(g.validate().is_err());
        g.sort_nodes().unwrap();
        assert_eq!(g.nodes(), nodes);
        g.validate().unwrap();
    }

    #[test]
    fn a_circle_is_named_and_the_graph_left_as_it_was() {
        let (mut g, nodes) = graph();
        // add now reads the mul that reads it
        let (add, mul) = (nodes[0], nodes[2]);
        g.tensor_mut(add).src[1] = mul;
        let before = g.nodes().to_vec();
        let e = g.sort_nodes().unwrap_err().to_string();
        assert!(e.contains("circle"), "{e}");
        for n in &nodes {
            assert!(e.contains(&g.display_name(*n)), "{e} names {n}");
        }
        assert_eq!(g.nodes(), before);
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("circle"), "{e}");
    }

    #[test]
    fn a_computed_source_missing_from_the_nodes_is_an_error() {
        let (mut g, nodes) = graph();
        g.set_nodes(vec![nodes[2]]);
        let e = g.sort_nodes().unwrap_err().to_string();
        assert!(e.contains("not a node"), "{e}");
    }
}
