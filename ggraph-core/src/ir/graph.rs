//! A graph: the tensor arena, the nodes in execution order and the leafs.

use std::sync::Arc;

use smallvec::SmallVec;

use super::tensor::{Tensor, TensorData, TensorId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::quant;

/// A tensor graph. Nodes are the tensors an op computes, in an order where
/// every source comes first; leafs are the tensors with no op (inputs,
/// weights, caches) that the nodes read.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub(crate) tensors: Vec<Tensor>,
    pub(crate) nodes: Vec<TensorId>,
    pub(crate) leafs: Vec<TensorId>,
}

impl Graph {
    /// The tensor with this id.
    ///
    /// Panics if `id` is not of this graph; [`Graph::get`] returns an error
    /// instead.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// The tensor with this id, to change its name, flags or memory.
    ///
    /// Panics if `id` is not of this graph. Changing shape, strides, op or
    /// sources bypasses the builder's checks; [`Graph::validate`] checks the
    /// result.
    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        &mut self.tensors[id.index()]
    }

    /// The tensor with this id, or an error if the id is not of this graph.
    pub fn get(&self, id: TensorId) -> Result<&Tensor> {
        self.tensors.get(id.index()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor {id} is not in this graph ({} tensors)",
                self.tensors.len()
            ))
        })
    }

    /// Every tensor of the arena, including those no node reaches.
    pub fn tensors(&self) -> impl Iterator<Item = (TensorId, &Tensor)> {
        self.tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (TensorId(i as u32), t))
    }

    /// Size of the arena: every id of this graph is below it.
    pub fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Computed tensors in execution order.
    pub fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }

    /// Tensors with no op that the nodes read.
    pub fn leafs(&self) -> &[TensorId] {
        &self.leafs
    }

    /// Makes room for `additional` more tensors (passes that add many).
    pub fn reserve_tensors(&mut self, additional: usize) {
        self.tensors.reserve(additional);
    }

    /// Appends a tensor to the arena without making it a node or a leaf, and
    /// returns its id; graph passes use this to add copies. Nothing is
    /// checked: list it with [`Graph::set_nodes`] or [`Graph::set_leafs`].
    pub fn push_tensor(&mut self, t: Tensor) -> TensorId {
        let id = TensorId(self.tensors.len() as u32);
        self.tensors.push(t);
        id
    }

    /// Replaces the node list (graph passes that rewrite the graph).
    pub fn set_nodes(&mut self, nodes: Vec<TensorId>) {
        self.nodes = nodes;
    }

    /// Marks node `id` as an output: read by the user after a compute, so
    /// never overwritten while the graph runs.
    pub fn set_output(&mut self, id: TensorId) -> Result<()> {
        self.get(id)?;
        if !self.nodes.contains(&id) {
            return Err(Error::InvalidArgument(format!(
                "'{}' is not a node of this graph: only computed tensors can be outputs",
                self.display_name(id)
            )));
        }
        self.tensor_mut(id).flags.output = true;
        Ok(())
    }

    /// Replaces the leaf list (graph passes that rewrite the graph).
    pub fn set_leafs(&mut self, leafs: Vec<TensorId>) {
        self.leafs = leafs;
    }

    /// The tensor whose memory `id` uses: itself, or its view base.
    pub fn base_of(&self, id: TensorId) -> TensorId {
        self.tensor(id).view.map_or(id, |v| v.base)
    }

    /// The first tensor with this name.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.tensors()
            .find(|(_, t)| &*t.name == name)
            .map(|(id, _)| id)
    }

    /// A printable name: the tensor's own, or its op and id.
    pub fn display_name(&self, id: TensorId) -> String {
        let t = self.tensor(id);
        if t.name.is_empty() {
            format!("{}{}", t.op.kind().name().to_lowercase(), id)
        } else {
            t.name.to_string()
        }
    }

    /// Where the bytes of `id` start: its own memory, or its view base's
    /// memory plus the view offset.
    pub fn data_of(&self, id: TensorId) -> Option<(Arc<dyn Buffer>, u64)> {
        self.memory_of(id).map(|(b, o)| (b.clone(), o))
    }

    /// [`Graph::data_of`], borrowed: for a backend that resolves every
    /// node of every step.
    pub fn memory_of(&self, id: TensorId) -> Option<(&Arc<dyn Buffer>, u64)> {
        let t = self.tensor(id);
        match t.view {
            Some(v) => {
                let base = self.tensor(v.base).data.as_ref()?;
                Some((&base.buffer, base.offset + v.offset as u64))
            }
            None => t.data.as_ref().map(|d| (&d.buffer, d.offset)),
        }
    }

    /// Binds a non-view tensor to memory.
    pub fn set_data(&mut self, id: TensorId, data: TensorData) -> Result<()> {
        let t = self.get(id)?;
        if t.view.is_some() {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' is a view: bind its base instead",
                self.display_name(id)
            )));
        }
        let need = t.nbytes() as u64;
        if data.offset + need > data.buffer.size() {
            return Err(Error::OutOfBounds {
                what: "set_data",
                offset: data.offset,
                end: data.offset + need,
                size: data.buffer.size(),
            });
        }
        data.buffer.init_tensor(data.offset, t.dtype, t.ne)?;
        self.tensors[id.index()].data = Some(data);
        Ok(())
    }

    fn bound(&self, id: TensorId) -> Result<(Arc<dyn Buffer>, u64)> {
        self.get(id)?;
        self.data_of(id)
            .ok_or_else(|| Error::Unallocated(self.display_name(id)))
    }

    /// Writes the raw bytes of a tensor (`nbytes()` of them, in its layout).
    pub fn write_bytes(&self, id: TensorId, bytes: &[u8]) -> Result<()> {
        let t = self.get(id)?;
        if bytes.len() != t.nbytes() {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' spans {} bytes, {} given",
                self.display_name(id),
                t.nbytes(),
                bytes.len()
            )));
        }
        let (buffer, offset) = self.bound(id)?;
        buffer.write(offset, bytes)
    }

    /// Reads the raw bytes of a tensor (`nbytes()` of them, in its layout).
    pub fn read_bytes(&self, id: TensorId) -> Result<Vec<u8>> {
        let n = self.get(id)?.nbytes();
        let (buffer, offset) = self.bound(id)?;
        let mut out = vec![0u8; n];
        buffer.read(offset, &mut out)?;
        Ok(out)
    }

    /// Writes logical values (`ne[0]` fastest), converting to the tensor's
    /// type and honouring its strides. Other bytes of the span are kept.
    ///
    /// Errors if `values.len()` is not the element count, or with
    /// [`Error::Unallocated`] if the tensor has no memory yet.
    pub fn write_f32(&self, id: TensorId, values: &[f32]) -> Result<()> {
        let t = self.get(id)?;
        if values.len() != t.nelements() {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' has {} elements, {} values given",
                self.display_name(id),
                t.nelements(),
                values.len()
            )));
        }
        if t.is_empty() {
            return Ok(());
        }
        let mut bytes = if t.is_contiguous() {
            vec![0u8; t.nbytes()]
        } else {
            self.read_bytes(id)?
        };
        let n0 = t.ne[0];
        let row_bytes = t.row_bytes();
        let mut row = vec![0u8; row_bytes];
        for (r, chunk) in values.chunks_exact(n0).enumerate() {
            let idx = row_index(t.ne, r);
            quant::quantize_row(t.dtype, chunk, &mut row)?;
            scatter_row(t, idx, &row, &mut bytes);
        }
        self.write_bytes(id, &bytes)
    }

    /// Reads logical values (`ne[0]` fastest) as f32, honouring strides.
    ///
    /// Errors with [`Error::Unallocated`] if the tensor has no memory yet.
    pub fn read_f32(&self, id: TensorId) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.get(id)?.nelements()];
        self.read_f32_into(id, &mut out)?;
        Ok(out)
    }

    /// Like [`Graph::read_f32`], into `out` (one value per element). A
    /// contiguous F32 tensor is copied straight from its buffer, with no
    /// allocation: the decode loop reads its logits this way every token.
    pub fn read_f32_into(&self, id: TensorId, out: &mut [f32]) -> Result<()> {
        let t = self.get(id)?;
        if out.len() != t.nelements() {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' has {} elements, room for {} given",
                self.display_name(id),
                t.nelements(),
                out.len()
            )));
        }
        if t.is_empty() {
            return Ok(());
        }
        if t.dtype == DType::F32 && t.is_contiguous() {
            let (buffer, offset) = self.bound(id)?;
            return buffer.read(offset, bytemuck::cast_slice_mut(out));
        }
        let bytes = self.read_bytes(id)?;
        let mut row = vec![0u8; t.row_bytes()];
        for (r, chunk) in out.chunks_exact_mut(t.ne[0]).enumerate() {
            let idx = row_index(t.ne, r);
            gather_row(t, idx, &bytes, &mut row);
            quant::dequantize_row(t.dtype, &row, chunk)?;
        }
        Ok(())
    }

    /// Writes I32 values (for index and position inputs).
    pub fn write_i32(&self, id: TensorId, values: &[i32]) -> Result<()> {
        let t = self.get(id)?;
        if t.dtype != DType::I32 {
            return Err(Error::dtype("write_i32", "tensor", t.dtype, "I32"));
        }
        let f: Vec<f32> = values.iter().map(|v| *v as f32).collect();
        // exact for |v| < 2^24; larger values go through bytes
        if values.iter().all(|v| v.unsigned_abs() < (1 << 24)) {
            return self.write_f32(id, &f);
        }
        if !t.is_contiguous() || values.len() != t.nelements() {
            return Err(Error::InvalidArgument(
                "write_i32 with large values needs a contiguous tensor".into(),
            ));
        }
        self.write_bytes(id, bytemuck::cast_slice(values))
    }

    /// Reads I32 values.
    pub fn read_i32(&self, id: TensorId) -> Result<Vec<i32>> {
        let t = self.get(id)?;
        if t.dtype != DType::I32 {
            return Err(Error::dtype("read_i32", "tensor", t.dtype, "I32"));
        }
        let bytes = self.read_bytes(id)?;
        let mut out = Vec::with_capacity(t.nelements());
        for r in 0..t.nrows() {
            let [_, i1, i2, i3] = row_index(t.ne, r);
            for i0 in 0..t.ne[0] {
                let o = t.offset_of([i0, i1, i2, i3]);
                out.push(i32::from_le_bytes([
                    bytes[o],
                    bytes[o + 1],
                    bytes[o + 2],
                    bytes[o + 3],
                ]));
            }
        }
        Ok(out)
    }

    /// For each tensor, the nodes that read it (as a source), in order.
    pub fn consumers(&self) -> Vec<SmallVec<[TensorId; 2]>> {
        let mut out = vec![SmallVec::new(); self.tensors.len()];
        for &n in &self.nodes {
            for &s in &self.tensor(n).src {
                if !out[s.index()].contains(&n) {
                    out[s.index()].push(n);
                }
            }
        }
        out
    }
}

/// The (i0=0, i1, i2, i3) index of row `r` of a tensor of shape `ne`.
#[inline]
pub fn row_index(ne: [usize; 4], r: usize) -> [usize; 4] {
    let i1 = r % ne[1];
    let i2 = (r / ne[1]) % ne[2];
    let i3 = r / (ne[1] * ne[2]);
    [0, i1, i2, i3]
}

fn gather_row(t: &Tensor, idx: [usize; 4], span: &[u8], row: &mut [u8]) {
    let base = t.offset_of(idx);
    if t.has_contiguous_rows() {
        row.copy_from_slice(&span[base..base + row.len()]);
    } else {
        let es = t.dtype.type_size();
        for i0 in 0..t.ne[0] {
            let o = base + i0 * t.nb[0];
            row[i0 * es..(i0 + 1) * es].copy_from_slice(&span[o..o + es]);
        }
    }
}

fn scatter_row(t: &Tensor, idx: [usize; 4], row: &[u8], span: &mut [u8]) {
    let base = t.offset_of(idx);
    if t.has_contiguous_rows() {
        span[base..base + row.len()].copy_from_slice(row);
    } else {
        let es = t.dtype.type_size();
        for i0 in 0..t.ne[0] {
            let o = base + i0 * t.nb[0];
            span[o..o + es].copy_from_slice(&row[i0 * es..(i0 + 1) * es]);
        }
    }
}
