//! Row split: one matrix's rows spread over several devices, and the graph
//! pass that turns a mul_mat on such a matrix into per-device partial
//! mul_mats gathered onto one device.
//!
//! The rows live in a [`RowSplitBuffer`] (a `Buffer` whose writes and reads
//! go to the devices holding each row range), allocated by a
//! [`RowSplitBufferType`] that packs the slices of many matrices into one
//! buffer per device. The rewrite ([`rewrite_row_split`]) works on any
//! backend that runs mul_mat and concat.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use ggraph_core::alloc::pack_weights;
use ggraph_core::backend::{Buffer, BufferType, BufferUsage, check_range};
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{Flags, Graph, Op, Tensor, TensorData, TensorId, contiguous_strides};

/// Name of the row-split buffer type.
pub const ROW_SPLIT: &str = "row-split";

/// One device's rows of a row-split matrix.
#[derive(Clone, Debug)]
pub struct RowPart {
    /// Index of the device (in the split's device order).
    pub device: usize,
    pub rows: Range<usize>,
    pub data: TensorData,
}

/// The rows of one matrix, spread over devices.
pub struct RowSplitBuffer {
    parts: Vec<RowPart>,
    row_bytes: u64,
    rows: usize,
}

impl RowSplitBuffer {
    pub fn parts(&self) -> &[RowPart] {
        &self.parts
    }

    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Calls `f(part, offset in the part, range in the caller's bytes)` for
    /// the pieces of `offset..offset + len`.
    fn pieces(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(&RowPart, u64, Range<usize>) -> Result<()>,
    ) -> Result<()> {
        check_range("row-split access", offset, len, self.size())?;
        let end = offset + len;
        for p in &self.parts {
            let start = p.rows.start as u64 * self.row_bytes;
            let stop = p.rows.end as u64 * self.row_bytes;
            let (a, b) = (offset.max(start), end.min(stop));
            if a < b {
                f(p, a - start, (a - offset) as usize..(b - offset) as usize)?;
            }
        }
        Ok(())
    }
}

impl Buffer for RowSplitBuffer {
    fn buffer_type_name(&self) -> &str {
        ROW_SPLIT
    }

    fn size(&self) -> u64 {
        self.rows as u64 * self.row_bytes
    }

    fn usage(&self) -> BufferUsage {
        BufferUsage::Weights
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.pieces(offset, data.len() as u64, |p, at, r| {
            p.data.buffer.write(p.data.offset + at, &data[r])
        })
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let mut pieces = Vec::new();
        self.pieces(offset, out.len() as u64, |p, at, r| {
            pieces.push((p.data.clone(), at, r));
            Ok(())
        })?;
        for (d, at, r) in pieces {
            d.buffer.read(d.offset + at, &mut out[r])?;
        }
        Ok(())
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.pieces(offset, len, |p, at, r| {
            p.data
                .buffer
                .fill(p.data.offset + at, r.len() as u64, value)
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Allocates row-split matrices over devices' buffer types.
pub struct RowSplitBufferType {
    devices: Vec<Arc<dyn BufferType>>,
    fractions: Vec<f64>,
    align_rows: usize,
}

impl RowSplitBufferType {
    pub fn new(
        devices: Vec<Arc<dyn BufferType>>,
        fractions: Vec<f64>,
        align_rows: usize,
    ) -> Result<RowSplitBufferType> {
        if devices.is_empty() || devices.len() != fractions.len() {
            return Err(Error::InvalidArgument(format!(
                "row split over {} devices with {} fractions",
                devices.len(),
                fractions.len()
            )));
        }
        Ok(RowSplitBufferType {
            devices,
            // shares, as tensor_split gives them: [1, 1] is half each
            fractions: super::placement::normalise(&fractions)?,
            align_rows,
        })
    }

    /// Allocates matrices given as (name, rows, bytes per row): their row
    /// slices are packed into one allocation per device.
    pub fn alloc_matrices(
        &self,
        matrices: &[(String, usize, u64)],
    ) -> Result<Vec<Arc<RowSplitBuffer>>> {
        let splits: Vec<Vec<usize>> = matrices
            .iter()
            .map(|(_, rows, _)| {
                super::placement::split_rows(*rows, &self.fractions, self.align_rows)
            })
            .collect();
        // per device: the slices it holds, packed
        let mut per_device: Vec<Vec<TensorData>> = Vec::with_capacity(self.devices.len());
        for (d, bt) in self.devices.iter().enumerate() {
            let sizes: Vec<(String, u64)> = matrices
                .iter()
                .zip(&splits)
                .map(|((name, _, row_bytes), s)| {
                    (format!("{name}[dev {d}]"), s[d] as u64 * row_bytes)
                })
                .collect();
            per_device.push(pack_weights(bt, &sizes)?.placements);
        }
        Ok(matrices
            .iter()
            .enumerate()
            .map(|(i, (_, rows, row_bytes))| {
                let mut start = 0;
                let parts = splits[i]
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(d, &n)| {
                        let p = RowPart {
                            device: d,
                            rows: start..start + n,
                            data: per_device[d][i].clone(),
                        };
                        start += n;
                        p
                    })
                    .collect();
                Arc::new(RowSplitBuffer {
                    parts,
                    row_bytes: *row_bytes,
                    rows: *rows,
                })
            })
            .collect())
    }
}

impl BufferType for RowSplitBufferType {
    fn name(&self) -> &str {
        ROW_SPLIT
    }

    fn alignment(&self) -> u64 {
        self.devices
            .iter()
            .map(|d| d.alignment())
            .max()
            .unwrap_or(1)
    }

    fn is_host(&self) -> bool {
        false
    }

    /// Row-split memory is allocated per matrix set: use `alloc_matrices`.
    fn alloc(&self, size: u64, _usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        Err(Error::InvalidArgument(format!(
            "row-split memory holds whole matrices: allocate {size} bytes through alloc_matrices"
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The row split a weight lives in, if any.
fn split_of(graph: &Graph, w: TensorId) -> Option<Arc<dyn Buffer>> {
    let base = graph.base_of(w);
    let data = graph.tensor(base).data.as_ref()?;
    data.buffer
        .as_any()
        .downcast_ref::<RowSplitBuffer>()
        .map(|_| data.buffer.clone())
}

/// What [`rewrite_row_split`] did to a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowSplitRewrite {
    /// How many mul_mats were rewritten.
    pub rewritten: usize,
    /// The concats that gather the partial results, in graph order. They
    /// belong on the main device: the scheduler would otherwise place them
    /// beside one of their parts (see `Scheduler::set_tensor_backend`).
    pub gathers: Vec<TensorId>,
}

/// Rewrites every mul_mat whose weight is row-split into one partial
/// mul_mat per device (each reading its device's rows) and concats that
/// gather the parts in row order. The gathering concat keeps the original
/// node's id, so consumers are untouched.
pub fn rewrite_row_split(graph: &mut Graph) -> Result<RowSplitRewrite> {
    let mut nodes = Vec::with_capacity(graph.nodes().len());
    let mut leafs = graph.leafs().to_vec();
    let mut rewritten = 0;
    let mut gathers = Vec::new();
    for &node in &graph.nodes().to_vec() {
        let t = graph.tensor(node).clone();
        let split = (t.op == Op::MulMat)
            .then(|| split_of(graph, t.src[0]))
            .flatten();
        let Some(buffer) = split else {
            nodes.push(node);
            continue;
        };
        let rs = buffer
            .as_any()
            .downcast_ref::<RowSplitBuffer>()
            .expect("checked by split_of");
        let w = graph.tensor(t.src[0]).clone();
        if w.view.is_some() || !w.is_contiguous() || w.ne[2] * w.ne[3] != 1 {
            return Err(Error::Unsupported {
                device: ROW_SPLIT.into(),
                what: format!(
                    "mul_mat on a view or batch of the row-split weight '{}'",
                    w.name
                ),
            });
        }
        let x = t.src[1];
        let mut parts = Vec::new();
        for p in rs.parts() {
            let rows = p.rows.len();
            let ne = [w.ne[0], rows, 1, 1];
            let leaf = graph.push_tensor(Tensor {
                name: format!("{}[{}..{}]", w.name, p.rows.start, p.rows.end).into(),
                dtype: w.dtype,
                ne,
                nb: contiguous_strides(w.dtype, ne),
                op: Op::Leaf,
                src: Default::default(),
                view: None,
                flags: Flags {
                    weight: true,
                    ..Flags::default()
                },
                data: Some(p.data.clone()),
            });
            leafs.push(leaf);
            let out_ne = [rows, t.ne[1], t.ne[2], t.ne[3]];
            let mm = graph.push_tensor(Tensor {
                name: format!("{}@rows{}", graph.display_name(node), p.rows.start).into(),
                dtype: t.dtype,
                ne: out_ne,
                nb: contiguous_strides(t.dtype, out_ne),
                op: Op::MulMat,
                src: [leaf, x].into_iter().collect(),
                view: None,
                flags: Flags::default(),
                data: None,
            });
            nodes.push(mm);
            parts.push((mm, rows));
        }
        // gather: ((p0 ++ p1) ++ p2) ..., the last concat being `node`
        let (mut acc, mut acc_rows) = parts[0];
        for (i, &(p, rows)) in parts.iter().enumerate().skip(1) {
            let ne = [acc_rows + rows, t.ne[1], t.ne[2], t.ne[3]];
            let id = if i + 1 == parts.len() {
                node
            } else {
                graph.push_tensor(Tensor {
                    name: format!("{}@gather{i}", graph.display_name(node)).into(),
                    dtype: t.dtype,
                    ne,
                    nb: contiguous_strides(t.dtype, ne),
                    op: Op::Leaf,
                    src: Default::default(),
                    view: None,
                    flags: Flags::default(),
                    data: None,
                })
            };
            let c = graph.tensor_mut(id);
            c.op = Op::Concat { dim: 0 };
            c.src = [acc, p].into_iter().collect();
            nodes.push(id);
            gathers.push(id);
            acc = id;
            acc_rows += rows;
        }
        if parts.len() == 1 {
            // one device holds every row: the node reads that part directly
            let only = graph.tensor(parts[0].0).src[0];
            nodes.pop();
            graph.tensor_mut(node).src[0] = only;
            nodes.push(node);
        }
        rewritten += 1;
    }
    graph.set_nodes(nodes);
    // the split weights themselves are read by no node any more
    let read: std::collections::HashSet<TensorId> = graph
        .nodes()
        .iter()
        .flat_map(|&n| graph.tensor(n).src.clone())
        .collect();
    leafs.retain(|&l| read.contains(&l) || split_of(graph, l).is_none());
    graph.set_leafs(leafs);
    Ok(RowSplitRewrite { rewritten, gathers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggraph_core::alloc::VirtualBufferType;
    use ggraph_core::dtype::DType;
    use ggraph_core::ir::GraphBuilder;
    use ggraph_conformance::reference::evaluate;

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
                VirtualBufferType::new(&format!("dev{d}"), 32, u64::MAX, false)
                    as Arc<dyn BufferType>
            })
            .collect();
        let bt = RowSplitBufferType::new(devices, fractions.to_vec(), 32).unwrap();
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
        assert_eq!(r.gathers[1], mm, "the last gather keeps the mul_mat's id");
        let last = g.tensor(mm);
        assert_eq!(last.op, Op::Concat { dim: 0 });
        assert_eq!(last.ne, [M, N, 1, 1]);
        assert_eq!(last.src[0], r.gathers[0]);
        assert_eq!(rows_of(&g, last.src[1]), "w[64..96]");
        let first = g.tensor(r.gathers[0]);
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
        assert_eq!(r.gathers, [mm]);
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
}
