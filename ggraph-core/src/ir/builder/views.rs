//! Views: slices, reshapes and permutations of a tensor's memory, no
//! compute.

use super::{GraphBuilder, MAX_VIEW_BYTES};
use crate::error::{Error, Result};
use crate::ir::op::Op;
use crate::ir::tensor::{MAX_DIMS, TensorId, contiguous_strides, span_bytes};

impl GraphBuilder {
    /// A view of `a`'s memory with `shape` (1 to 4 dims), the byte strides
    /// `strides` of dims 1 and up (one fewer than `shape` has; `nb[0]` is the
    /// element size and dims past those given are packed), starting `offset`
    /// bytes into `a` (ggml's `ggml_view_*d`). A view of a view points at the
    /// same base, with the offsets added.
    ///
    /// Errors with [`Error::Shape`] if the number of strides is wrong,
    /// `shape[0]` is not whole blocks of a quantised type, the offset or a
    /// stride is not a multiple of the element size, or the view reaches past
    /// the end of its base.
    pub fn view(
        &mut self,
        a: TensorId,
        shape: &[usize],
        strides: &[usize],
        offset: usize,
    ) -> Result<TensorId> {
        const OP: &str = "view";
        let ne = Self::shape(OP, shape)?;
        let src = self.graph.get(a)?;
        if strides.len() + 1 != shape.len() {
            return Err(Error::shape(
                OP,
                format!(
                    "{} dims need {} strides (nb[1]..), {} given",
                    shape.len(),
                    shape.len() - 1,
                    strides.len()
                ),
            ));
        }
        Self::check_row_blocks(OP, src.dtype, ne[0])?;
        let ts = src.dtype.type_size();
        if offset > MAX_VIEW_BYTES || strides.iter().any(|s| *s > MAX_VIEW_BYTES) {
            return Err(Error::shape(OP, "offset or stride beyond 2^52 bytes"));
        }
        if offset % ts != 0 || strides.iter().any(|s| s % ts != 0) {
            return Err(Error::shape(
                OP,
                format!(
                    "offset {offset} and strides {strides:?} must be multiples of the {} byte element size",
                    ts
                ),
            ));
        }
        let mut nb = [0usize; MAX_DIMS];
        nb[0] = src.dtype.type_size();
        nb[1..=strides.len()].copy_from_slice(strides);
        for i in strides.len() + 1..MAX_DIMS {
            nb[i] = nb[i - 1]
                .checked_mul(ne[i - 1])
                .filter(|s| *s <= MAX_VIEW_BYTES)
                .ok_or_else(|| Error::shape(OP, "a trailing stride beyond 2^52 bytes"))?;
        }
        let (base, base_offset) = match src.view {
            Some(v) => (v.base, v.offset),
            None => (a, 0),
        };
        let base_bytes = self.graph.tensor(base).nbytes();
        let bs = src.dtype.block_size();
        let wide_span: u128 = if ne.contains(&0) {
            0
        } else {
            let row = if bs == 1 {
                (ne[0] as u128 - 1) * nb[0] as u128 + ts as u128
            } else {
                (ne[0] / bs) as u128 * nb[0] as u128
            };
            row + (1..MAX_DIMS)
                .map(|i| (ne[i] as u128 - 1) * nb[i] as u128)
                .sum::<u128>()
        };
        if (base_offset + offset) as u128 + wide_span > base_bytes as u128 {
            return Err(Error::shape(
                OP,
                format!(
                    "view of {wide_span} bytes at offset {} overruns its base '{}' of {base_bytes} bytes",
                    base_offset + offset,
                    self.graph.display_name(base)
                ),
            ));
        }
        let span = span_bytes(src.dtype, ne, nb);
        if base_offset + offset + span > base_bytes {
            return Err(Error::shape(
                OP,
                format!(
                    "view of {span} bytes at offset {} overruns its base '{}' of {base_bytes} bytes",
                    base_offset + offset,
                    self.graph.display_name(base)
                ),
            ));
        }
        Ok(self.view_node(Op::View, a, ne, nb, offset))
    }

    /// `ne0` elements of `a` starting `offset` bytes in (see
    /// [`GraphBuilder::view`]).
    pub fn view_1d(&mut self, a: TensorId, ne0: usize, offset: usize) -> Result<TensorId> {
        self.view(a, &[ne0], &[], offset)
    }

    /// A `[ne0, ne1]` view of `a` with rows `nb1` bytes apart, starting
    /// `offset` bytes in (see [`GraphBuilder::view`]).
    pub fn view_2d(
        &mut self,
        a: TensorId,
        ne0: usize,
        ne1: usize,
        nb1: usize,
        offset: usize,
    ) -> Result<TensorId> {
        self.view(a, &[ne0, ne1], &[nb1], offset)
    }

    /// A 3-dim view of `a` with byte strides `nb1` and `nb2`, starting
    /// `offset` bytes in (see [`GraphBuilder::view`]).
    pub fn view_3d(
        &mut self,
        a: TensorId,
        ne: [usize; 3],
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> Result<TensorId> {
        self.view(a, &ne, &[nb1, nb2], offset)
    }

    /// A 4-dim view of `a` with byte strides `nb` of dims 1 to 3, starting
    /// `offset` bytes in (see [`GraphBuilder::view`]).
    pub fn view_4d(
        &mut self,
        a: TensorId,
        ne: [usize; 4],
        nb: [usize; 3],
        offset: usize,
    ) -> Result<TensorId> {
        self.view(a, &ne, &nb, offset)
    }

    /// `a` seen with another shape; `a` must be contiguous.
    pub fn reshape(&mut self, a: TensorId, shape: &[usize]) -> Result<TensorId> {
        const OP: &str = "reshape";
        let ne = Self::shape(OP, shape)?;
        let src = self.graph.get(a)?;
        if !src.is_contiguous() {
            return Err(Error::shape(
                OP,
                format!(
                    "source {} is not contiguous; make it so with cont first",
                    src.shape_str()
                ),
            ));
        }
        if ne.iter().product::<usize>() != src.nelements() {
            return Err(Error::shape(
                OP,
                format!(
                    "{:?} has {} elements, the source {} has {}",
                    ne,
                    ne.iter().product::<usize>(),
                    src.shape_str(),
                    src.nelements()
                ),
            ));
        }
        Self::check_row_blocks(OP, src.dtype, ne[0])?;
        let nb = contiguous_strides(src.dtype, ne);
        Ok(self.view_node(Op::Reshape, a, ne, nb, 0))
    }

    /// Source dim i becomes dim `axes[i]` (ggml's `permute`).
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        const OP: &str = "permute";
        let src = self.graph.get(a)?;
        let mut seen = [false; 4];
        for &ax in &axes {
            if ax >= 4 || seen[ax] {
                return Err(Error::shape(
                    OP,
                    format!("axes {axes:?} are not a permutation of 0..4"),
                ));
            }
            seen[ax] = true;
        }
        if src.dtype.is_quantized() && axes[0] != 0 {
            return Err(Error::shape(
                OP,
                format!("{} rows cannot be permuted away from dim 0", src.dtype),
            ));
        }
        let mut ne = [0; 4];
        let mut nb = [0; 4];
        for i in 0..4 {
            ne[axes[i]] = src.ne[i];
            nb[axes[i]] = src.nb[i];
        }
        Ok(self.view_node(Op::Permute(axes), a, ne, nb, 0))
    }

    /// Dims 0 and 1 swapped.
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        let src = self.graph.get(a)?;
        if src.dtype.is_quantized() {
            return Err(Error::shape(
                "transpose",
                format!("{} rows cannot be transposed", src.dtype),
            ));
        }
        let mut ne = src.ne;
        let mut nb = src.nb;
        ne.swap(0, 1);
        nb.swap(0, 1);
        Ok(self.view_node(Op::Transpose, a, ne, nb, 0))
    }
}
