//! An f64 reference evaluator, written separately from every backend.
//!
//! It is the definition the conformance suite checks backends against: each
//! op is computed plainly, element by element, in f64. Memory is modelled
//! per base tensor as one f64 slot per stored value, so that views, strides
//! and in-place writes (cpy, set_rows) behave as they do in real memory.
//! Values written to F16, BF16 or quantised tensors are rounded to what
//! that storage can hold, as on a device; F32 storage keeps f64 precision.

use std::collections::HashMap;

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{
    BinaryOp, Graph, Op, RopeMode, SortOrder, Tensor, TensorId, UnaryOp, alibi_slope, row_index,
};
use ggraph_core::quant;

/// The evaluated values of a graph.
pub struct Evaluation<'g> {
    graph: &'g Graph,
    memory: HashMap<TensorId, Vec<f64>>,
}

/// Evaluates every node of `graph` in order. `leaf_bytes` gives the raw
/// bytes (in the leaf's layout, `nbytes()` long) of each leaf base tensor
/// the graph reads.
pub fn evaluate<'g>(
    graph: &'g Graph,
    mut leaf_bytes: impl FnMut(TensorId) -> Result<Vec<u8>>,
) -> Result<Evaluation<'g>> {
    let mut ev = Evaluation {
        graph,
        memory: HashMap::new(),
    };
    for &leaf in graph.leafs() {
        let base = graph.base_of(leaf);
        if let std::collections::hash_map::Entry::Vacant(e) = ev.memory.entry(base) {
            let bytes = leaf_bytes(base)?;
            let slots = decode_storage(graph.tensor(base), &bytes)?;
            e.insert(slots);
        }
    }
    for &node in graph.nodes() {
        ev.eval_node(node)?;
    }
    Ok(ev)
}

/// Decodes a base tensor's bytes as consecutive blocks: slot k of the
/// result is the value stored at element offset k.
fn decode_storage(t: &Tensor, bytes: &[u8]) -> Result<Vec<f64>> {
    let ts = t.dtype.type_size();
    let n_blocks = bytes.len() / ts;
    let n = n_blocks * t.dtype.block_size();
    let mut vals = vec![0f32; n];
    if t.dtype == DType::I32 {
        return Ok(bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect());
    }
    quant::dequantize_row(t.dtype, &bytes[..n_blocks * ts], &mut vals)?;
    Ok(vals.into_iter().map(f64::from).collect())
}

/// Rounds a value to what an element of `dtype` stores (non-quantised).
fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => v,
        DType::F16 => quant::f16_to_f32(quant::f32_to_f16(v as f32)) as f64,
        DType::BF16 => quant::bf16_to_f32(quant::f32_to_bf16(v as f32)) as f64,
        DType::I32 => v.trunc(),
        _ => unreachable!("quantised values are rounded per row"),
    }
}

fn bad_index(op: &str, idx: f64, limit: usize) -> Error {
    Error::InvalidArgument(format!("{op}: index {idx} is outside 0..{limit}"))
}

impl Evaluation<'_> {
    /// The slot of element `i` of tensor `id` in its base's memory.
    fn slot(&self, id: TensorId, i: [usize; 4]) -> (TensorId, usize) {
        let t = self.graph.tensor(id);
        let (base, off) = match t.view {
            Some(v) => (v.base, v.offset),
            None => (id, 0),
        };
        let bs = t.dtype.block_size();
        let byte = off + t.offset_of(i);
        (base, byte / t.dtype.type_size() * bs + i[0] % bs)
    }

    fn get(&self, id: TensorId, i: [usize; 4]) -> f64 {
        let (base, k) = self.slot(id, i);
        self.memory[&base][k]
    }

    /// Logical values of plane (`i2`, `i3`) of tensor `id`: its ne[1]
    /// rows of ne[0], one after the other.
    fn plane(&self, id: TensorId, i2: usize, i3: usize) -> Vec<f64> {
        let ne = self.graph.tensor(id).ne;
        let mut out = Vec::with_capacity(ne[0] * ne[1]);
        for i1 in 0..ne[1] {
            for i0 in 0..ne[0] {
                out.push(self.get(id, [i0, i1, i2, i3]));
            }
        }
        out
    }

    /// Logical values of any evaluated tensor, `ne[0]` fastest.
    pub fn values(&self, id: TensorId) -> Vec<f64> {
        let t = self.graph.tensor(id);
        let mut out = Vec::with_capacity(t.nelements());
        for r in 0..t.nrows() {
            let [_, i1, i2, i3] = row_index(t.ne, r);
            for i0 in 0..t.ne[0] {
                out.push(self.get(id, [i0, i1, i2, i3]));
            }
        }
        out
    }

    /// Logical values as f32.
    pub fn values_f32(&self, id: TensorId) -> Vec<f32> {
        self.values(id).into_iter().map(|v| v as f32).collect()
    }

    /// Writes logical values into tensor `id` (a fresh node or a view of
    /// existing memory), rounding to its storage type.
    fn store(&mut self, id: TensorId, values: &[f64]) -> Result<()> {
        let t = self.graph.tensor(id).clone();
        let base = self.graph.base_of(id);
        if !self.memory.contains_key(&base) {
            let bt = self.graph.tensor(base);
            let n = bt.nbytes() / bt.dtype.type_size() * bt.dtype.block_size();
            self.memory.insert(base, vec![0.0; n]);
        }
        let n0 = t.ne[0];
        if n0 == 0 {
            return Ok(());
        }
        for (r, row) in values.chunks_exact(n0).enumerate() {
            let [_, i1, i2, i3] = row_index(t.ne, r);
            let stored: Vec<f64> = if t.dtype.is_quantized() {
                let f: Vec<f32> = row.iter().map(|v| *v as f32).collect();
                let q = quant::quantize(t.dtype, &f)?;
                quant::dequantize(t.dtype, &q, n0)?
                    .into_iter()
                    .map(f64::from)
                    .collect()
            } else {
                row.iter().map(|v| round_to(t.dtype, *v)).collect()
            };
            for (i0, v) in stored.into_iter().enumerate() {
                let (b, k) = self.slot(id, [i0, i1, i2, i3]);
                self.memory.get_mut(&b).expect("base allocated above")[k] = v;
            }
        }
        Ok(())
    }

    fn eval_node(&mut self, id: TensorId) -> Result<()> {
        let g = self.graph;
        let t = g.tensor(id);
        let src = |i: usize| t.src[i];
        let ne = t.ne;
        let out: Vec<f64> = match &t.op {
            Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => return Ok(()),
            Op::AddId => {
                let (a, b, ids) = (src(0), src(1), src(2));
                let n_expert = g.tensor(b).ne[1];
                let mut out = Vec::with_capacity(t.nelements());
                for r in 0..t.nrows() {
                    let [_, i1, i2, i3] = row_index(ne, r);
                    let e = self.get(ids, [i1, i2, 0, 0]);
                    if e < 0.0 || e as usize >= n_expert {
                        return Err(bad_index("add_id", e, n_expert));
                    }
                    for i0 in 0..ne[0] {
                        out.push(
                            self.get(a, [i0, i1, i2, i3]) + self.get(b, [i0, e as usize, 0, 0]),
                        );
                    }
                }
                out
            }
            Op::GetRows => {
                let (a, idx) = (src(0), src(1));
                let ta = g.tensor(a);
                let mut out = Vec::with_capacity(t.nelements());
                for r in 0..t.nrows() {
                    let [_, j, i1, i2] = row_index(ne, r);
                    let row = self.get(idx, [j, i1, i2, 0]);
                    if row < 0.0 || row as usize >= ta.ne[1] {
                        return Err(bad_index("get_rows", row, ta.ne[1]));
                    }
                    for i0 in 0..ne[0] {
                        out.push(self.get(a, [i0, row as usize, i1, i2]));
                    }
                }
                out
            }
            Op::Binary(op) => {
                let (a, b) = (src(0), src(1));
                let tb = g.tensor(b);
                self.map_indexed(ne, |ev, i| {
                    let x = ev.get(a, i);
                    let y = ev.get(b, broadcast(i, tb.ne));
                    match op {
                        BinaryOp::Add => x + y,
                        BinaryOp::Sub => x - y,
                        BinaryOp::Mul => x * y,
                        BinaryOp::Div => x / y,
                    }
                })
            }
            Op::Scale { scale, bias } => {
                let a = src(0);
                self.map_indexed(ne, |ev, i| ev.get(a, i) * *scale as f64 + *bias as f64)
            }
            Op::Unary(u) => {
                let a = src(0);
                self.map_indexed(ne, |ev, i| u.eval(ev.get(a, i)))
            }
            Op::Glu { op, swapped } => {
                if t.src.len() == 2 {
                    let (a, b) = (src(0), src(1));
                    self.map_indexed(ne, |ev, i| op.eval(ev.get(a, i), ev.get(b, i)))
                } else {
                    let a = src(0);
                    let n = ne[0];
                    let (xo, go) = if *swapped { (n, 0) } else { (0, n) };
                    self.map_indexed(ne, |ev, [i0, i1, i2, i3]| {
                        op.eval(
                            ev.get(a, [i0 + xo, i1, i2, i3]),
                            ev.get(a, [i0 + go, i1, i2, i3]),
                        )
                    })
                }
            }
            Op::MulMat => {
                let (a, b) = (src(0), src(1));
                let (ta, tb) = (g.tensor(a), g.tensor(b));
                let k = ta.ne[0];
                let r2 = tb.ne[2] / ta.ne[2].max(1);
                let r3 = tb.ne[3] / ta.ne[3].max(1);
                // Each operand's plane is read into rows once: resolving
                // every element's slot for every product made a small
                // llama's reference take seconds. The sums are the same
                // products added in the same order.
                let mut out = Vec::with_capacity(t.nelements());
                for i3 in 0..ne[3] {
                    for i2 in 0..ne[2] {
                        let pa = self.plane(a, i2 / r2, i3 / r3);
                        let pb = self.plane(b, i2, i3);
                        for j in 0..ne[1] {
                            let rb = &pb[j * k..(j + 1) * k];
                            for i in 0..ne[0] {
                                let ra = &pa[i * k..(i + 1) * k];
                                out.push(ra.iter().zip(rb).map(|(x, y)| x * y).sum());
                            }
                        }
                    }
                }
                out
            }
            Op::MulMatId => {
                let (a, b, ids) = (src(0), src(1), src(2));
                let (ta, tb) = (g.tensor(a), g.tensor(b));
                let k = ta.ne[0];
                let n_b = tb.ne[1];
                let mut out = Vec::with_capacity(t.nelements());
                for r in 0..t.nrows() {
                    let [_, e, tok, _] = row_index(ne, r);
                    let expert = self.get(ids, [e, tok, 0, 0]);
                    if expert < 0.0 || expert as usize >= ta.ne[2] {
                        return Err(bad_index("mul_mat_id", expert, ta.ne[2]));
                    }
                    for i in 0..ne[0] {
                        out.push(
                            (0..k)
                                .map(|kk| {
                                    self.get(a, [kk, i, expert as usize, 0])
                                        * self.get(b, [kk, e % n_b, tok, 0])
                                })
                                .sum(),
                        );
                    }
                }
                out
            }
            Op::RmsNorm { eps } => {
                let a = src(0);
                self.map_rows(ne, |ev, [_, i1, i2, i3]| {
                    let x: Vec<f64> = (0..ne[0]).map(|i0| ev.get(a, [i0, i1, i2, i3])).collect();
                    let ms = x.iter().map(|v| v * v).sum::<f64>() / ne[0] as f64;
                    let s = 1.0 / (ms + *eps as f64).sqrt();
                    x.iter().map(|v| v * s).collect()
                })
            }
            Op::Norm { eps } => {
                let a = src(0);
                self.map_rows(ne, |ev, [_, i1, i2, i3]| {
                    let x: Vec<f64> = (0..ne[0]).map(|i0| ev.get(a, [i0, i1, i2, i3])).collect();
                    let mean = x.iter().sum::<f64>() / ne[0] as f64;
                    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / ne[0] as f64;
                    let s = 1.0 / (var + *eps as f64).sqrt();
                    x.iter().map(|v| (v - mean) * s).collect()
                })
            }
            Op::Rope(p) => {
                let (a, pos) = (src(0), src(1));
                let ff = t.src.get(2).copied();
                let nd = p.n_dims;
                self.map_rows(ne, |ev, [_, i1, i2, i3]| {
                    let mut x: Vec<f64> =
                        (0..ne[0]).map(|i0| ev.get(a, [i0, i1, i2, i3])).collect();
                    let position = ev.get(pos, [i2, 0, 0, 0]);
                    for i0 in (0..nd).step_by(2) {
                        let f = ff.map_or(1.0, |ff| ev.get(ff, [i0 / 2, 0, 0, 0]));
                        let (c, s) = p.rotation(position, i0, f);
                        let (j0, j1) = match p.mode {
                            RopeMode::Normal => (i0, i0 + 1),
                            RopeMode::Neox => (i0 / 2, i0 / 2 + nd / 2),
                        };
                        let (x0, x1) = (x[j0], x[j1]);
                        x[j0] = x0 * c - x1 * s;
                        x[j1] = x0 * s + x1 * c;
                    }
                    x
                })
            }
            Op::SoftMax {
                scale, max_bias, ..
            } => {
                let a = src(0);
                let (mask, sinks) = t.mask_and_sinks();
                let n_head = ne[2];
                self.map_rows(ne, |ev, [_, i1, i2, i3]| {
                    let slope = alibi_slope(*max_bias, n_head, i2);
                    let x: Vec<f64> = (0..ne[0])
                        .map(|i0| {
                            let mut v = ev.get(a, [i0, i1, i2, i3]) * *scale as f64;
                            if let Some(m) = mask {
                                let tm = ev.graph.tensor(m);
                                v += slope * ev.get(m, [i0, i1, i2 % tm.ne[2], i3 % tm.ne[3]]);
                            }
                            v
                        })
                        .collect();
                    let sink = sinks.map(|s| ev.get(s, [i2, 0, 0, 0]));
                    softmax_with_sink(&x, sink)
                })
            }
            Op::Cpy => {
                let vals = self.values(src(0));
                self.store(id, &vals)?;
                return Ok(());
            }
            Op::Cont | Op::Transfer => self.values(src(0)),
            Op::SetRows => {
                let (s, idx) = (src(1), src(2));
                let (ts, ti) = (g.tensor(s), g.tensor(idx));
                let n_dst_rows = t.ne[1];
                let mut rows: Vec<([usize; 4], Vec<f64>)> = Vec::new();
                for r in 0..ts.nrows() {
                    let [_, i1, i2, i3] = row_index(ts.ne, r);
                    let target = self.get(idx, [i1, i2 % ti.ne[1], i3 % ti.ne[2], 0]);
                    if target < 0.0 || target as usize >= n_dst_rows {
                        return Err(bad_index("set_rows", target, n_dst_rows));
                    }
                    let row = (0..ts.ne[0])
                        .map(|i0| self.get(s, [i0, i1, i2, i3]))
                        .collect();
                    rows.push(([0, target as usize, i2, i3], row));
                }
                for (at, row) in rows {
                    self.store_row(id, at, &row)?;
                }
                return Ok(());
            }
            Op::Concat { dim } => {
                let (a, b) = (src(0), src(1));
                let na = g.tensor(a).ne[*dim];
                self.map_indexed(ne, |ev, i| {
                    if i[*dim] < na {
                        ev.get(a, i)
                    } else {
                        let mut j = i;
                        j[*dim] -= na;
                        ev.get(b, j)
                    }
                })
            }
            Op::SsmConv => {
                let (sx, c) = (src(0), src(1));
                let d_conv = g.tensor(c).ne[0];
                self.map_indexed(ne, |ev, [i, t, s, _]| {
                    (0..d_conv)
                        .map(|k| ev.get(sx, [t + k, i, s, 0]) * ev.get(c, [k, i, 0, 0]))
                        .sum()
                })
            }
            Op::SsmScan => {
                self.ssm_scan([src(0), src(1), src(2), src(3), src(4), src(5), src(6)])?
            }
            Op::GatedDeltaNet => {
                self.gated_delta_net([src(0), src(1), src(2), src(3), src(4), src(5)])
            }
            Op::SumRows => {
                let a = src(0);
                let n0 = g.tensor(a).ne[0];
                self.map_indexed(ne, |ev, [_, i1, i2, i3]| {
                    (0..n0).map(|i0| ev.get(a, [i0, i1, i2, i3])).sum()
                })
            }
            Op::ArgSort { order } => {
                let a = src(0);
                self.map_rows(ne, |ev, [_, i1, i2, i3]| {
                    let mut idx: Vec<usize> = (0..ne[0]).collect();
                    let key = |i: &usize| ev.get(a, [*i, i1, i2, i3]);
                    idx.sort_by(|x, y| {
                        let o = key(x).total_cmp(&key(y));
                        if *order == SortOrder::Ascending {
                            o
                        } else {
                            o.reverse()
                        }
                    });
                    idx.into_iter().map(|i| i as f64).collect()
                })
            }
            Op::TopK { k } => {
                let a = src(0);
                let n0 = g.tensor(a).ne[0];
                self.map_rows(ne, |ev, [_, i1, i2, i3]| {
                    let mut idx: Vec<usize> = (0..n0).collect();
                    let key = |i: &usize| ev.get(a, [*i, i1, i2, i3]);
                    idx.sort_by(|x, y| key(y).total_cmp(&key(x)));
                    idx.into_iter().take(*k).map(|i| i as f64).collect()
                })
            }
            Op::FlashAttnExt {
                scale,
                max_bias,
                softcap,
                ..
            } => {
                let (q, k, v) = (src(0), src(1), src(2));
                let (mask, sinks) = t.mask_and_sinks();
                let (tq, tk) = (g.tensor(q), g.tensor(k));
                let d = tq.ne[0];
                let n_kv = tk.ne[1];
                let n_head = tq.ne[2];
                let group = n_head / tk.ne[2].max(1);
                // result [dv, n_head, n_q, n_seq]: row (head, query, seq)
                self.map_rows(ne, |ev, [_, h, iq, is]| {
                    let hk = h / group.max(1);
                    let slope = alibi_slope(*max_bias, n_head, h);
                    let scores: Vec<f64> = (0..n_kv)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|c| ev.get(q, [c, iq, h, is]) * ev.get(k, [c, j, hk, is]))
                                .sum();
                            let mut s = dot * *scale as f64;
                            if *softcap != 0.0 {
                                s = *softcap as f64 * (s / *softcap as f64).tanh();
                            }
                            if let Some(m) = mask {
                                let tm = ev.graph.tensor(m);
                                s += slope * ev.get(m, [j, iq, h % tm.ne[2], is % tm.ne[3]]);
                            }
                            s
                        })
                        .collect();
                    let p = softmax_with_sink(&scores, sinks.map(|s| ev.get(s, [h, 0, 0, 0])));
                    (0..ne[0])
                        .map(|c| (0..n_kv).map(|j| p[j] * ev.get(v, [c, j, hk, is])).sum())
                        .collect()
                })
            }
        };
        self.store(id, &out)
    }

    fn store_row(&mut self, id: TensorId, at: [usize; 4], row: &[f64]) -> Result<()> {
        let t = self.graph.tensor(id);
        let stored: Vec<f64> = if t.dtype.is_quantized() {
            let f: Vec<f32> = row.iter().map(|v| *v as f32).collect();
            let q = quant::quantize(t.dtype, &f)?;
            quant::dequantize(t.dtype, &q, row.len())?
                .into_iter()
                .map(f64::from)
                .collect()
        } else {
            row.iter().map(|v| round_to(t.dtype, *v)).collect()
        };
        for (i0, v) in stored.into_iter().enumerate() {
            let (b, k) = self.slot(id, [i0, at[1], at[2], at[3]]);
            match self.memory.get_mut(&b) {
                Some(m) => m[k] = v,
                None => return Err(Error::Unallocated(self.graph.display_name(b))),
            }
        }
        Ok(())
    }

    /// gated_delta_net's outputs, then its final states
    /// ([`Op::GatedDeltaNet`]), with `m[i][j]` the state's element
    /// `[i, j]`.
    fn gated_delta_net(&self, [q, k, v, g, beta, state]: [TensorId; 6]) -> Vec<f64> {
        let gr = self.graph;
        let [s, h, n_t, n_s] = gr.tensor(v).ne;
        let (h_k, s_k) = (gr.tensor(q).ne[1], gr.tensor(q).ne[3]);
        let per_channel = gr.tensor(g).ne[0] == s;
        let scale = 1.0 / (s as f64).sqrt();
        let mut out = vec![0f64; s * h * n_t * n_s];
        let mut states = vec![0f64; s * s * h * n_s];
        for seq in 0..n_s {
            let seq_k = seq / (n_s / s_k);
            for head in 0..h {
                let head_k = head % h_k;
                let mut m: Vec<Vec<f64>> = (0..s)
                    .map(|i| (0..s).map(|j| self.get(state, [i, j, head, seq])).collect())
                    .collect();
                for t in 0..n_t {
                    for (i, row) in m.iter_mut().enumerate() {
                        let gate = self.get(g, [if per_channel { i } else { 0 }, head, t, seq]);
                        row.iter_mut().for_each(|x| *x *= gate.exp());
                    }
                    let kv: Vec<f64> = (0..s).map(|i| self.get(k, [i, head_k, t, seq_k])).collect();
                    let b = self.get(beta, [0, head, t, seq]);
                    let delta: Vec<f64> = (0..s)
                        .map(|j| {
                            let mk: f64 = (0..s).map(|i| m[i][j] * kv[i]).sum();
                            (self.get(v, [j, head, t, seq]) - mk) * b
                        })
                        .collect();
                    for (i, row) in m.iter_mut().enumerate() {
                        for (x, d) in row.iter_mut().zip(&delta) {
                            *x += kv[i] * d;
                        }
                    }
                    for j in 0..s {
                        let mq: f64 = (0..s)
                            .map(|i| m[i][j] * self.get(q, [i, head_k, t, seq_k]))
                            .sum();
                        out[((seq * n_t + t) * h + head) * s + j] = mq * scale;
                    }
                }
                for (i, row) in m.iter().enumerate() {
                    for (j, x) in row.iter().enumerate() {
                        states[((seq * h + head) * s + j) * s + i] = *x;
                    }
                }
            }
        }
        out.extend(states);
        out
    }

    /// ssm_scan's y, then its final states ([`Op::SsmScan`]).
    fn ssm_scan(&self, [s, x, dt, a, b, c, ids]: [TensorId; 7]) -> Result<Vec<f64>> {
        let g = self.graph;
        let (d_state, n_rs) = (g.tensor(s).ne[0], g.tensor(s).ne[3]);
        let [head_dim, n_head, n_t, n_s] = g.tensor(x).ne;
        let per_group = n_head / g.tensor(b).ne[1];
        let mamba2 = g.tensor(a).ne[0] == 1;
        let mut y = vec![0f64; head_dim * n_head * n_t * n_s];
        let mut states = vec![0f64; d_state * head_dim * n_head * n_s];
        for j in 0..n_s {
            let id = self.get(ids, [j, 0, 0, 0]);
            if id < 0.0 || id as usize >= n_rs {
                return Err(bad_index("ssm_scan", id, n_rs));
            }
            for h in 0..n_head {
                let grp = h / per_group;
                for i1 in 0..head_dim {
                    let at = ((j * n_head + h) * head_dim + i1) * d_state;
                    let st = &mut states[at..at + d_state];
                    for (i0, v) in st.iter_mut().enumerate() {
                        *v = self.get(s, [i0, i1, h, id as usize]);
                    }
                    for t in 0..n_t {
                        let d = UnaryOp::Softplus.eval(self.get(dt, [h, t, j, 0]));
                        let x_dt = self.get(x, [i1, h, t, j]) * d;
                        let mut sum = 0.0;
                        for (i0, v) in st.iter_mut().enumerate() {
                            let decay = self.get(a, [if mamba2 { 0 } else { i0 }, h, 0, 0]);
                            *v = *v * (d * decay).exp() + self.get(b, [i0, grp, t, j]) * x_dt;
                            sum += *v * self.get(c, [i0, grp, t, j]);
                        }
                        y[((j * n_t + t) * n_head + h) * head_dim + i1] = sum;
                    }
                }
            }
        }
        y.extend(states);
        Ok(y)
    }

    fn map_indexed(&self, ne: [usize; 4], f: impl Fn(&Self, [usize; 4]) -> f64) -> Vec<f64> {
        let mut out = Vec::with_capacity(ne.iter().product());
        for r in 0..ne[1] * ne[2] * ne[3] {
            let [_, i1, i2, i3] = row_index(ne, r);
            for i0 in 0..ne[0] {
                out.push(f(self, [i0, i1, i2, i3]));
            }
        }
        out
    }

    fn map_rows(&self, ne: [usize; 4], f: impl Fn(&Self, [usize; 4]) -> Vec<f64>) -> Vec<f64> {
        let mut out = Vec::with_capacity(ne.iter().product());
        if ne[0] == 0 {
            return out;
        }
        for r in 0..ne[1] * ne[2] * ne[3] {
            out.extend(f(self, row_index(ne, r)));
        }
        out
    }
}

/// Index `i` wrapped into a tensor of shape `ne` (repetition broadcast).
fn broadcast(i: [usize; 4], ne: [usize; 4]) -> [usize; 4] {
    [i[0] % ne[0], i[1] % ne[1], i[2] % ne[2], i[3] % ne[3]]
}

/// Softmax of a row; a row with no finite value gives zeros.
/// softmax of `x`, with an attention sink's logit (where there is one) in
/// the maximum and the sum but taking no probability.
fn softmax_with_sink(x: &[f64], sink: Option<f64>) -> Vec<f64> {
    let max = x
        .iter()
        .copied()
        .chain(sink)
        .fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return vec![0.0; x.len()];
    }
    let e: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
    e.into_iter().map(|v| v / sum).collect()
}
