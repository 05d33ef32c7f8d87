//! A dispatch's arguments: the parameter block (binding 0) and the tensors
//! bound to storage slots (bindings 1..), each at an aligned offset with
//! the rest of its layout in the parameters.

use std::sync::Arc;

use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{DType, Error, Result};

use crate::buffer::WgpuBuffer;
use crate::gpu::Gpu;

/// Threads per workgroup of the one-thread-per-item kernels.
pub(crate) const WG: u32 = 256;

/// Bytes of parameters per dispatch (128 u32).
pub(crate) const PARAM_BYTES: u64 = 512;

/// Where op parameters start in [`Params`] (after six tensor slots).
pub(crate) const P_OP: usize = 96;

/// The parameters of one dispatch: for tensor slot t, `u[16 t]` is the
/// byte offset of the tensor inside its binding, `u[16 t + 1 ..= 4]` its
/// shape and `u[16 t + 5 ..= 8]` its byte strides; op parameters follow
/// from [`P_OP`].
#[derive(Clone)]
pub(crate) struct Params {
    pub u: [u32; 128],
}

impl Params {
    pub fn new() -> Params {
        Params { u: [0; 128] }
    }

    pub fn tensor(&mut self, slot: usize, t: &TArg) {
        let b = 16 * slot;
        self.u[b] = t.rem;
        self.u[b + 1..b + 5].copy_from_slice(&t.ne);
        self.u[b + 5..b + 9].copy_from_slice(&t.nb);
    }

    pub fn set(&mut self, i: usize, v: u32) -> &mut Params {
        self.u[P_OP + i] = v;
        self
    }

    pub fn setf(&mut self, i: usize, v: f32) -> &mut Params {
        self.u[P_OP + i] = v.to_bits();
        self
    }
}

/// A range of a wgpu buffer bound to one storage slot.
#[derive(Clone)]
pub(crate) struct Binding {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

/// A tensor as a kernel sees it.
#[derive(Clone)]
pub(crate) struct TArg {
    pub dtype: DType,
    pub ne: [u32; 4],
    /// Byte strides.
    pub nb: [u32; 4],
    /// Byte offset of the tensor's first element inside the binding.
    pub rem: u32,
    pub binding: Binding,
}

impl TArg {
    pub fn nelements(&self) -> u64 {
        self.ne.iter().map(|&n| n as u64).product()
    }

    pub fn nrows(&self) -> u64 {
        self.ne[1] as u64 * self.ne[2] as u64 * self.ne[3] as u64
    }

    pub fn is_empty(&self) -> bool {
        self.ne.contains(&0)
    }
}

fn to_u32(what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what} {v} exceeds 32 bits")))
}

/// Resolves tensor `id` to a binding of this device's memory covering
/// `span` bytes from `extra` bytes past the tensor's start.
fn bind_span(gpu: &Arc<Gpu>, graph: &Graph, id: TensorId, extra: u64, span: u64) -> Result<TArg> {
    let t = graph.get(id)?;
    let (buffer, offset) = graph
        .data_of(id)
        .ok_or_else(|| Error::Unallocated(graph.display_name(id)))?;
    let wb = buffer
        .as_any()
        .downcast_ref::<WgpuBuffer>()
        .filter(|b| b.same_device(gpu))
        .ok_or_else(|| {
            Error::backend(
                &gpu.name,
                format!(
                    "tensor '{}' lives in {} memory, which {} cannot address; copy it first",
                    graph.display_name(id),
                    buffer.buffer_type_name(),
                    gpu.name
                ),
            )
        })?;
    let nbytes = t.nbytes() as u64;
    if offset + nbytes > buffer.size() {
        return Err(Error::OutOfBounds {
            what: "tensor memory",
            offset,
            end: offset + nbytes,
            size: buffer.size(),
        });
    }
    let align = gpu.storage_align();
    let first = offset + extra;
    let mut start = first / align * align;
    let rem = first - start;
    let mut size = ((rem + span).div_ceil(4) * 4).min(wb.raw_size() - start);
    if size < 4 {
        // an empty tensor at the very end of its buffer: bind any valid
        // word, nothing is read
        start = (wb.raw_size() - 4) / align * align;
        size = 4;
    }
    if size > gpu.max_binding() {
        return Err(Error::backend(
            &gpu.name,
            format!(
                "tensor '{}' spans {} bytes, more than one binding of {} bytes",
                graph.display_name(id),
                span,
                gpu.max_binding()
            ),
        ));
    }
    let mut ne = [0u32; 4];
    let mut nb = [0u32; 4];
    for d in 0..4 {
        ne[d] = to_u32("dimension", t.ne[d])?;
        nb[d] = to_u32("stride", t.nb[d]).unwrap_or(u32::MAX);
    }
    Ok(TArg {
        dtype: t.dtype,
        ne,
        nb,
        rem: rem as u32,
        binding: Binding {
            buffer: wb.raw.clone(),
            offset: start,
            size,
        },
    })
}

/// Resolves tensor `id` to a binding of its whole span.
pub(crate) fn bind(gpu: &Arc<Gpu>, graph: &Graph, id: TensorId) -> Result<TArg> {
    let span = graph.get(id)?.nbytes() as u64;
    bind_span(gpu, graph, id, 0, span)
}

/// Resolves rows `r0..r1` (of dimension 1) of a 2-d tensor: the binding
/// starts at row r0, and the shape says r1 - r0 rows.
pub(crate) fn bind_rows(
    gpu: &Arc<Gpu>,
    graph: &Graph,
    id: TensorId,
    r0: usize,
    r1: usize,
) -> Result<TArg> {
    let t = graph.get(id)?;
    let span = if r1 > r0 {
        ((r1 - r0 - 1) * t.nb[1] + t.row_bytes()) as u64
    } else {
        0
    };
    let mut a = bind_span(gpu, graph, id, (r0 * t.nb[1]) as u64, span)?;
    a.ne[1] = (r1 - r0) as u32;
    Ok(a)
}
