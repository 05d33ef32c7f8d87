//! The graph builder: ggml's op API with shape and type checks.
//!
//! Every op checks its operands when it is made and returns an error that
//! names the op and the mismatch; nothing here panics on bad input.

mod checks;
mod ops;
mod views;

use smallvec::SmallVec;

pub use checks::can_repeat;

use super::graph::Graph;
use super::op::Op;
use super::tensor::{MAX_DIMS, Tensor, TensorData, TensorId, ViewOf, shape4};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// Builds a [`Graph`]: make leafs and ops, then `expand` the results you
/// want computed (in the order they must run) and `build`.
#[derive(Default)]
pub struct GraphBuilder {
    graph: Graph,
    visited: Vec<bool>,
}

/// Largest element count of a tensor: keeps every byte computation far
/// from overflow.
const MAX_ELEMENTS: u128 = 1 << 48;

/// Largest stride or offset of a view, in bytes.
const MAX_VIEW_BYTES: usize = 1 << 52;

fn float_types() -> &'static str {
    "F32, F16 or BF16"
}

impl GraphBuilder {
    /// A builder with an empty graph.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// Continues building on a finished graph (its nodes and leafs count
    /// as expanded).
    pub fn from_graph(graph: Graph) -> GraphBuilder {
        let mut visited = vec![false; graph.n_tensors()];
        for id in graph.nodes().iter().chain(graph.leafs()) {
            visited[id.index()] = true;
        }
        GraphBuilder { graph, visited }
    }

    /// The graph built so far (tensors made; nodes expanded so far).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// A tensor made so far.
    pub fn tensor(&self, id: TensorId) -> Result<&Tensor> {
        self.graph.get(id)
    }

    /// Finishes the graph.
    pub fn build(self) -> Graph {
        self.graph
    }

    fn push(&mut self, t: Tensor) -> TensorId {
        self.visited.push(false);
        self.graph.push_tensor(t)
    }

    fn shape(op: &'static str, shape: &[usize]) -> Result<[usize; MAX_DIMS]> {
        let ne = shape4(shape).ok_or_else(|| {
            Error::shape(
                op,
                format!("a shape has 1 to 4 dimensions, {} given", shape.len()),
            )
        })?;
        // strides multiply every dim, even when another one is 0
        let elements = ne
            .iter()
            .try_fold(1u128, |acc, &n| acc.checked_mul(n.max(1) as u128));
        match elements {
            Some(e) if e <= MAX_ELEMENTS => Ok(ne),
            _ => Err(Error::shape(
                op,
                format!("{shape:?} has more than 2^48 elements"),
            )),
        }
    }

    fn check_row_blocks(op: &'static str, dtype: DType, ne0: usize) -> Result<()> {
        if ne0 % dtype.block_size() != 0 {
            return Err(Error::shape(
                op,
                format!(
                    "{dtype} rows hold whole blocks of {} values; ne[0] = {ne0}",
                    dtype.block_size()
                ),
            ));
        }
        Ok(())
    }

    fn new_leaf(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        let ne = Self::shape("new_tensor", shape)?;
        Self::check_row_blocks("new_tensor", dtype, ne[0])?;
        Ok(self.push(Tensor::leaf(name, dtype, ne)))
    }

    /// A leaf the user fills before each compute.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        let id = self.new_leaf(name, dtype, shape)?;
        self.graph.tensor_mut(id).flags.input = true;
        Ok(id)
    }

    /// A model parameter.
    pub fn weight(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        let id = self.new_leaf(name, dtype, shape)?;
        self.graph.tensor_mut(id).flags.weight = true;
        Ok(id)
    }

    /// A model parameter that already lives in memory.
    pub fn bound_weight(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        data: TensorData,
    ) -> Result<TensorId> {
        let id = self.weight(name, dtype, shape)?;
        if let Err(e) = self.graph.set_data(id, data) {
            // leave the arena as it was
            self.graph.tensors.pop();
            self.visited.pop();
            return Err(e);
        }
        Ok(id)
    }

    /// A plain leaf: a cache or other state tensor the user manages.
    pub fn tensor_leaf(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<TensorId> {
        self.new_leaf(name, dtype, shape)
    }

    /// A plain leaf that already lives in memory (a KV cache, say).
    pub fn bound_leaf(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        data: TensorData,
    ) -> Result<TensorId> {
        let id = self.new_leaf(name, dtype, shape)?;
        if let Err(e) = self.graph.set_data(id, data) {
            self.graph.tensors.pop();
            self.visited.pop();
            return Err(e);
        }
        Ok(id)
    }

    /// Names a tensor (for [`Graph::find`], errors, logs and DOT) and returns
    /// `id`. Errors if `id` is not of this graph.
    pub fn set_name(&mut self, id: TensorId, name: &str) -> Result<TensorId> {
        self.graph.get(id)?;
        self.graph.tensor_mut(id).name = name.into();
        Ok(id)
    }

    /// Marks a tensor the user writes before each compute (see
    /// [`Flags::input`](crate::ir::Flags::input)). Errors if `id` is not of
    /// this graph.
    pub fn set_input(&mut self, id: TensorId) -> Result<()> {
        self.graph.get(id)?;
        self.graph.tensor_mut(id).flags.input = true;
        Ok(())
    }

    /// Marks a result the user reads after compute, and expands it.
    pub fn set_output(&mut self, id: TensorId) -> Result<()> {
        self.graph.get(id)?;
        self.graph.tensor_mut(id).flags.output = true;
        self.expand(id)
    }

    /// Adds `id` and everything it depends on that is not yet in the graph
    /// to the node list, sources first (ggml's `build_forward_expand`).
    pub fn expand(&mut self, id: TensorId) -> Result<()> {
        self.graph.get(id)?;
        let mut stack: Vec<(TensorId, usize)> = vec![(id, 0)];
        while let Some((t, next)) = stack.pop() {
            if self.visited[t.index()] {
                continue;
            }
            let src = &self.graph.tensor(t).src;
            if next < src.len() {
                let s = src[next];
                stack.push((t, next + 1));
                if !self.visited[s.index()] {
                    stack.push((s, 0));
                }
                continue;
            }
            self.visited[t.index()] = true;
            if matches!(self.graph.tensor(t).op, Op::Leaf) {
                self.graph.leafs.push(t);
            } else {
                self.graph.nodes.push(t);
            }
        }
        Ok(())
    }

    /// A new node; its shape (derived from its sources') must stay within
    /// the element limit, or its strides would overflow.
    fn node(
        &mut self,
        op: Op,
        dtype: DType,
        ne: [usize; MAX_DIMS],
        src: &[TensorId],
    ) -> Result<TensorId> {
        Self::shape(op.kind().name(), &ne)?;
        let mut t = Tensor::leaf("", dtype, ne);
        t.op = op;
        t.src = SmallVec::from_slice(src);
        Ok(self.push(t))
    }

    fn view_node(
        &mut self,
        op: Op,
        a: TensorId,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offset: usize,
    ) -> TensorId {
        let src = self.graph.tensor(a);
        let (base, base_offset) = match src.view {
            Some(v) => (v.base, v.offset),
            None => (a, 0),
        };
        let mut t = Tensor::leaf("", src.dtype, ne);
        t.nb = nb;
        t.op = op;
        t.src = SmallVec::from_slice(&[a]);
        t.view = Some(ViewOf {
            base,
            offset: base_offset + offset,
        });
        self.push(t)
    }

    fn float(&self, op: &'static str, operand: &'static str, id: TensorId) -> Result<&Tensor> {
        let t = self.graph.get(id)?;
        if !t.dtype.is_float() {
            return Err(Error::dtype(op, operand, t.dtype, float_types()));
        }
        Ok(t)
    }

    fn i32(&self, op: &'static str, operand: &'static str, id: TensorId) -> Result<&Tensor> {
        let t = self.graph.get(id)?;
        if t.dtype != DType::I32 {
            return Err(Error::dtype(op, operand, t.dtype, "I32"));
        }
        Ok(t)
    }
}
