//! The row split pass on its own: mul_mats on row-split weights become
//! per-device partial mul_mats gathered in row order, and compute what the
//! whole matrix computes.

use std::sync::Arc;

use ggraph_conformance::reference::evaluate;
use ggraph_core::Result;
use ggraph_core::alloc::{RowSplitBufferType, VirtualBufferType};
use ggraph_core::backend::BufferType;
use ggraph_core::dtype::DType;
use ggraph_core::ir::{Graph, GraphBuilder, Op, TensorData, TensorId};
use ggraph_core::sched::passes::row_split::{RowSplitRewrite, rewrite_row_split};

const K: usize = 8;
const M: usize = 96;
const N: usize = 3;

fn weight_value(row: usize, k: usize) -> f32 {
    (row * K + k) as f32 * 0.01 - 1.0
}

fn input_value(col: usize, k: usize) -> f32 {
    (col as f32 + 1.0) * 0.1 + k as f32 * 0.05
}

/// `y = scale(mul_mat(w, x))` with `w` (M rows of K) row-split by
/// `fractions` over virtual devices; returns the graph, w, x, the
/// mul_mat and its consumer.
fn graph(fractions: &[f64]) -> (Graph, TensorId, TensorId, TensorId, TensorId) {
    let devices: Vec<Arc<dyn BufferType>> = (0..fractions.len())
        .map(|d| {
            VirtualBufferType::new(&format!("dev{d}"), 32, u64::MAX, false) as Arc<dyn BufferType>
        })
        .collect();
    let bt = RowSplitBufferType::new(devices, fractions.to_vec(), 32, 0).unwrap();
    let row_bytes = (K * 4) as u64;
    let buffer = bt
        .alloc_matrices(&[("w".into(), M, row_bytes)])
        .unwrap()
        .remove(0);
    let mut b = GraphBuilder::new();
    let data = TensorData { buffer, offset: 0 };
    let w = b.bound_weight("w", DType::F32, &[K, M], data).unwrap();
    let x = b.input("x", DType::F32, &[K, N]).unwrap();
    let mm = b.mul_mat(w, x).unwrap();
    let y = b.scale(mm, 2.0).unwrap();
    b.expand(y).unwrap();
    (b.build(), w, x, mm, y)
}

/// The bytes of rows `rows` of w, or of x.
fn bytes(graph: &Graph, id: TensorId, x: TensorId) -> Result<Vec<u8>> {
    let vals: Vec<f32> = if id == x {
        (0..N)
            .flat_map(|c| (0..K).map(move |k| input_value(c, k)))
            .collect()
    } else {
        let name = graph.tensor(id).name.to_string();
        let rows = match name.strip_prefix("w[") {
            Some(r) => {
                let (a, b) = r.trim_end_matches(']').split_once("..").unwrap();
                a.parse().unwrap()..b.parse().unwrap()
            }
            None => 0..M,
        };
        rows.flat_map(|r| (0..K).map(move |k| weight_value(r, k)))
            .collect()
    };
    Ok(vals.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// The weight slice a partial mul_mat reads, as its rows.
fn rows_of(graph: &Graph, part: TensorId) -> String {
    let t = graph.tensor(part);
    assert_eq!(t.op, Op::MulMat, "'{}' is a partial mul_mat", t.name);
    graph.tensor(t.src[0]).name.to_string()
}

#[test]
fn parts_are_gathered_in_row_order_into_the_original_node() {
    let (mut g, w, x, mm, y) = graph(&[1.0, 1.0, 1.0]);
    let before = g.clone();
    let r = rewrite_row_split(&mut g).unwrap();
    g.validate().unwrap();
    assert_eq!(r.rewritten, 1);
    // ((rows 0..32 ++ rows 32..64) ++ rows 64..96), the last being `mm`
    assert_eq!(r.gathers.len(), 2);
    assert_eq!(
        r.gathers[1].node, mm,
        "the last gather keeps the mul_mat's id"
    );
    assert!(
        r.gathers
            .iter()
            .all(|g| g.weight == w && g.buffer_type == "dev0")
    );
    let last = g.tensor(mm);
    assert_eq!(last.op, Op::Concat { dim: 0 });
    assert_eq!(last.ne, [M, N, 1, 1]);
    assert_eq!(last.src[0], r.gathers[0].node);
    assert_eq!(rows_of(&g, last.src[1]), "w[64..96]");
    let first = g.tensor(r.gathers[0].node);
    assert_eq!(first.op, Op::Concat { dim: 0 });
    assert_eq!(first.ne, [64, N, 1, 1]);
    assert_eq!(rows_of(&g, first.src[0]), "w[0..32]");
    assert_eq!(rows_of(&g, first.src[1]), "w[32..64]");
    assert_eq!(g.tensor(y).src[0], mm, "the consumer is untouched");
    assert!(!g.leafs().contains(&w), "the split weight is read no more");
    assert!(g.nodes().iter().all(|&n| !g.tensor(n).src.contains(&w)));

    // and the gathered result is the product with the whole matrix
    let want = evaluate(&before, |id| bytes(&before, id, x)).unwrap();
    let got = evaluate(&g, |id| bytes(&g, id, x)).unwrap();
    assert_eq!(got.values(y), want.values(y));
}

#[test]
fn parts_of_devices_without_rows_are_left_out() {
    let (mut g, _, x, mm, y) = graph(&[0.0, 1.0, 1.0]);
    let before = g.clone();
    let r = rewrite_row_split(&mut g).unwrap();
    g.validate().unwrap();
    assert_eq!(r.gathers.len(), 1);
    assert_eq!(r.gathers[0].node, mm);
    let t = g.tensor(mm);
    assert_eq!(rows_of(&g, t.src[0]), "w[0..64]");
    assert_eq!(rows_of(&g, t.src[1]), "w[64..96]");
    let want = evaluate(&before, |id| bytes(&before, id, x)).unwrap();
    let got = evaluate(&g, |id| bytes(&g, id, x)).unwrap();
    assert_eq!(got.values(y), want.values(y));
}

#[test]
fn one_device_with_every_row_keeps_a_single_mul_mat_and_no_gather() {
    for fractions in [&[1.0][..], &[0.0, 1.0]] {
        let (mut g, w, x, mm, y) = graph(fractions);
        let before = g.clone();
        let r = rewrite_row_split(&mut g).unwrap();
        g.validate().unwrap();
        assert_eq!(r.rewritten, 1);
        assert!(r.gathers.is_empty(), "{fractions:?}: {:?}", r.gathers);
        assert_eq!(rows_of(&g, mm), "w[0..96]");
        assert_eq!(g.tensor(mm).src[1], x);
        assert!(
            g.nodes()
                .iter()
                .all(|&n| !matches!(g.tensor(n).op, Op::Concat { .. }))
        );
        assert!(!g.leafs().contains(&w));
        let want = evaluate(&before, |id| bytes(&before, id, x)).unwrap();
        let got = evaluate(&g, |id| bytes(&g, id, x)).unwrap();
        assert_eq!(got.values(y), want.values(y));
    }
}

#[test]
fn a_graph_without_row_split_weights_is_unchanged() {
    let mut b = GraphBuilder::new();
    let w = b.weight("w", DType::F32, &[K, M]).unwrap();
    let x = b.input("x", DType::F32, &[K, N]).unwrap();
    let mm = b.mul_mat(w, x).unwrap();
    b.expand(mm).unwrap();
    let mut g = b.build();
    let nodes = g.nodes().to_vec();
    let r = rewrite_row_split(&mut g).unwrap();
    assert_eq!(r, RowSplitRewrite::default());
    assert_eq!(g.nodes(), nodes);
}
