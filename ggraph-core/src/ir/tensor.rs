//! Tensor descriptions: the entries of a graph's arena.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use super::op::Op;
use crate::dtype::DType;
use crate::memory::Buffer;

/// Index of a tensor in its graph's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    /// The id as an index into per-tensor tables (`Vec`s sized by
    /// [`Graph::n_tensors`](crate::ir::Graph::n_tensors)).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Number of dimensions every tensor has (unused ones are 1).
pub const MAX_DIMS: usize = 4;

/// Role flags of a tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags {
    /// Data is written by the user before each compute.
    pub input: bool,
    /// Data is read by the user after a compute; never overwritten while
    /// the graph runs.
    pub output: bool,
    /// Model parameters: long-lived, placed by the model loader.
    pub weight: bool,
    /// Memory kept for the whole graph and never reused (the scheduler's
    /// pipelined input copies).
    pub keep: bool,
}

/// Where a tensor's bytes live: a buffer and a byte offset in it.
#[derive(Clone)]
pub struct TensorData {
    /// The buffer holding the bytes; shared with every tensor placed in it.
    pub buffer: Arc<dyn Buffer>,
    /// Byte offset of the tensor's first byte in `buffer`.
    pub offset: u64,
}

impl fmt::Debug for TensorData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.buffer.buffer_type_name(), self.offset)
    }
}

/// A view's base tensor and its byte offset into it. The base is never a
/// view itself: views of views are folded onto the base, as in ggml.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewOf {
    /// The tensor that owns the memory.
    pub base: TensorId,
    /// Bytes from the base's first byte to the view's first byte.
    pub offset: usize,
}

/// One tensor of a graph: shape, layout, the op that makes it, and where its
/// memory is once placed.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// The user's name for the tensor, empty for most intermediate results.
    /// Shared, so that cloning a graph does not copy names.
    pub name: Arc<str>,
    /// Element type; quantised types store `ne[0]` in whole blocks.
    pub dtype: DType,
    /// Number of elements per dimension, innermost first.
    pub ne: [usize; MAX_DIMS],
    /// Stride in bytes per dimension. For quantised types `nb[0]` is the block
    /// size in bytes and `nb[1]` the row size.
    pub nb: [usize; MAX_DIMS],
    /// The op that computes the tensor; [`Op::Leaf`] for inputs, weights and
    /// other tensors filled from outside.
    pub op: Op,
    /// The op's operands, in the order [`Op`] lists them; empty for a leaf.
    pub src: SmallVec<[TensorId; 4]>,
    /// The memory this tensor shares, if it is a view (views, reshapes,
    /// permutes, transposes, and the results of `cpy` and `set_rows`);
    /// `None` when the tensor owns its memory.
    pub view: Option<ViewOf>,
    /// Its roles: input, output, weight, kept.
    pub flags: Flags,
    /// Memory of a tensor that owns it (not a view): set by an allocator or
    /// the model loader.
    pub data: Option<TensorData>,
}

impl Tensor {
    /// A new contiguous leaf tensor.
    pub(crate) fn leaf(name: &str, dtype: DType, ne: [usize; MAX_DIMS]) -> Tensor {
        Tensor {
            name: name.into(),
            dtype,
            ne,
            nb: contiguous_strides(dtype, ne),
            op: Op::Leaf,
            src: SmallVec::new(),
            view: None,
            flags: Flags::default(),
            data: None,
        }
    }

    /// A soft_max's or flash_attn_ext's optional sources: its mask and its
    /// attention sinks, where it has them (`None` for other ops).
    pub fn mask_and_sinks(&self) -> (Option<TensorId>, Option<TensorId>) {
        let (mask, sinks) = self.mask_and_sinks_at();
        (mask.map(|i| self.src[i]), sinks.map(|i| self.src[i]))
    }

    /// As [`Tensor::mask_and_sinks`], their positions among the sources.
    pub fn mask_and_sinks_at(&self) -> (Option<usize>, Option<usize>) {
        let (first, sinks) = match self.op {
            Op::SoftMax { sinks, .. } => (1, sinks),
            Op::FlashAttnExt { sinks, .. } => (3, sinks),
            _ => return (None, None),
        };
        match (sinks, self.src.len().saturating_sub(first)) {
            (true, 2) => (Some(first), Some(first + 1)),
            (true, 1) => (None, Some(first)),
            (false, 1) => (Some(first), None),
            _ => (None, None),
        }
    }

    /// Number of elements, the product of `ne` (ggml's `ggml_nelements`).
    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Number of rows, `ne[1] * ne[2] * ne[3]` (ggml's `ggml_nrows`).
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes spanned by the tensor, as ggml's `ggml_nbytes`.
    pub fn nbytes(&self) -> usize {
        span_bytes(self.dtype, self.ne, self.nb)
    }

    /// Bytes of one packed row of `ne[0]` values (ggml's `ggml_row_size`).
    pub fn row_bytes(&self) -> usize {
        self.ne[0] / self.dtype.block_size() * self.dtype.type_size()
    }

    /// Whether the strides are those of a packed tensor of this shape, so its
    /// `nbytes()` bytes hold exactly its elements in order (ggml's
    /// `ggml_is_contiguous`). A tensor of at most one element always is.
    pub fn is_contiguous(&self) -> bool {
        self.nb == contiguous_strides(self.dtype, self.ne) || self.nelements() <= 1
    }

    /// Rows are packed (`nb[0]` is the element size) though rows themselves
    /// may be strided.
    pub fn has_contiguous_rows(&self) -> bool {
        self.nb[0] == self.dtype.type_size() || self.ne[0] <= 1
    }

    /// Dims 0 and 1 swapped relative to memory order (as by `transpose`).
    pub fn is_transposed(&self) -> bool {
        self.nb[0] > self.nb[1]
    }

    /// Whether the tensor uses another tensor's memory ([`Tensor::view`] is set).
    pub fn is_view(&self) -> bool {
        self.view.is_some()
    }

    /// Whether some dimension is 0, so the tensor has no elements and spans no
    /// bytes.
    pub fn is_empty(&self) -> bool {
        self.nelements() == 0
    }

    /// Same shape in every dimension.
    pub fn same_shape(&self, other: &Tensor) -> bool {
        self.ne == other.ne
    }

    /// The shape as a short string, e.g. `[4096, 32, 1, 1]`.
    pub fn shape_str(&self) -> String {
        format!("{:?}", self.ne)
    }

    /// Byte offset of element (i0, i1, i2, i3) from the tensor's start
    /// (i0 must be at a block boundary for quantised types).
    #[inline]
    pub fn offset_of(&self, i: [usize; 4]) -> usize {
        i[0] / self.dtype.block_size() * self.nb[0]
            + i[1] * self.nb[1]
            + i[2] * self.nb[2]
            + i[3] * self.nb[3]
    }
}

/// Contiguous strides for a shape.
pub fn contiguous_strides(dtype: DType, ne: [usize; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let mut nb = [0; MAX_DIMS];
    nb[0] = dtype.type_size();
    nb[1] = nb[0] * (ne[0] / dtype.block_size());
    for i in 2..MAX_DIMS {
        nb[i] = nb[i - 1] * ne[i - 1];
    }
    nb
}

/// Bytes spanned by a tensor of this layout (0 when it has no elements).
pub fn span_bytes(dtype: DType, ne: [usize; MAX_DIMS], nb: [usize; MAX_DIMS]) -> usize {
    if ne.contains(&0) {
        return 0;
    }
    let bs = dtype.block_size();
    let mut bytes = if bs == 1 {
        dtype.type_size()
    } else {
        ne[0] * nb[0] / bs
    };
    let first = if bs == 1 { 0 } else { 1 };
    for i in first..MAX_DIMS {
        bytes += (ne[i] - 1) * nb[i];
    }
    bytes
}

/// Pads a 1- to 4-element shape with ones.
pub fn shape4(shape: &[usize]) -> Option<[usize; MAX_DIMS]> {
    if shape.is_empty() || shape.len() > MAX_DIMS {
        return None;
    }
    let mut ne = [1; MAX_DIMS];
    ne[..shape.len()].copy_from_slice(shape);
    Some(ne)
}
