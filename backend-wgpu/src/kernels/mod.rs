//! WGSL kernels: shader generation, the pipeline cache, and the recording
//! of a split's dispatches into one submission.
//!
//! Every kernel binds a uniform block of parameters (binding 0) and one
//! storage binding per tensor (bindings 1..): the destination first, then
//! the sources. Tensors are bound at an offset that respects the adapter's
//! alignment; the remaining byte offset, the shape and the byte strides of
//! each tensor travel in the parameters (see [`Params`]), so one pipeline
//! serves every layout: views, broadcasts and permutations included.

mod attention;
mod copy;
mod elementwise;
mod matmul;
mod norm;
mod quantize;
mod rope;
mod sort;
pub(crate) mod wgsl;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ggraph_core::ir::{Graph, Op, TensorId};
use ggraph_core::{DType, Error, Result};

use crate::buffer::WgpuBuffer;
use crate::device::Gpu;

/// Threads per workgroup of the one-thread-per-item kernels.
pub(crate) const WG: u32 = 256;

/// Bytes of parameters per dispatch (128 u32).
const PARAM_BYTES: u64 = 512;

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

/// A compute pipeline with its bind group layout.
pub(crate) struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    n_storage: usize,
}

/// Pipelines of one device, keyed by kernel name and specialisation.
#[derive(Default)]
pub(crate) struct PipelineCache {
    map: Mutex<HashMap<String, Arc<Pipeline>>>,
}

impl PipelineCache {
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn keys(&self) -> Vec<String> {
        let mut k: Vec<String> = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    }
}

/// The pipeline for `key`, built from `source()` on first use.
pub(crate) fn pipeline(
    gpu: &Gpu,
    key: &str,
    n_storage: usize,
    source: impl FnOnce() -> String,
) -> Result<Arc<Pipeline>> {
    if let Some(p) = gpu
        .pipelines
        .map
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(key)
    {
        return Ok(p.clone());
    }
    let src = source();
    let started = std::time::Instant::now();
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: wgpu::BufferSize::new(PARAM_BYTES),
        },
        count: None,
    }];
    for i in 0..n_storage {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: i as u32 + 1,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    let built = gpu.scoped(&format!("building kernel {key}"), || {
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(key),
                entries: &entries,
            });
        let pl = gpu
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(key),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let module = gpu
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(key),
                source: wgpu::ShaderSource::Wgsl(src.as_str().into()),
            });
        let pipeline = gpu
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(key),
                layout: Some(&pl),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        (pipeline, layout)
    });
    let (pipeline, layout) = match built {
        Ok(p) => p,
        Err(e) => {
            if std::env::var_os("GGRAPH_WGPU_DUMP").is_some() {
                eprintln!("---- {key} ----\n{src}");
            }
            return Err(e);
        }
    };
    let took = started.elapsed();
    tracing::debug!(
        "{}: built kernel {key} in {:.1} ms",
        gpu.name,
        took.as_secs_f64() * 1e3
    );
    if std::env::var_os("GGRAPH_WGPU_LOG_BUILDS").is_some() {
        eprintln!(
            "{}: built kernel {key} in {:.1} ms",
            gpu.name,
            took.as_secs_f64() * 1e3
        );
    }
    let p = Arc::new(Pipeline {
        pipeline,
        layout,
        n_storage,
    });
    gpu.pipelines
        .map
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_string(), p.clone());
    Ok(p)
}

struct Dispatch {
    pipeline: Arc<Pipeline>,
    bindings: Vec<Binding>,
    params: Params,
    groups: [u32; 3],
}

/// The dispatches of one split, submitted together.
pub(crate) struct Recorder<'g> {
    pub gpu: &'g Arc<Gpu>,
    dispatches: Vec<Dispatch>,
    uses_status: bool,
}

impl<'g> Recorder<'g> {
    pub fn new(gpu: &'g Arc<Gpu>) -> Recorder<'g> {
        Recorder {
            gpu,
            dispatches: Vec::new(),
            uses_status: false,
        }
    }

    /// The device's status word as a kernel argument (bind it last; see
    /// [`wgsl::STATUS`]).
    pub fn status(&mut self) -> TArg {
        self.uses_status = true;
        TArg {
            dtype: DType::I32,
            ne: [4, 1, 1, 1],
            nb: [4, 16, 16, 16],
            rem: 0,
            binding: Binding {
                buffer: self.gpu.status.clone(),
                offset: 0,
                size: 16,
            },
        }
    }

    /// Queues a dispatch of `groups` workgroups (a count that exceeds the
    /// per-dimension limit is spread over y; kernels compute their linear
    /// workgroup index from `num_workgroups`).
    pub fn dispatch(
        &mut self,
        pipeline: Arc<Pipeline>,
        tensors: &[&TArg],
        params: Params,
        groups: u64,
    ) -> Result<()> {
        if groups == 0 {
            return Ok(());
        }
        let max = self.gpu.limits.max_compute_workgroups_per_dimension.max(1) as u64;
        let y = groups.div_ceil(max);
        if y > max {
            return Err(Error::backend(
                &self.gpu.name,
                format!("{groups} workgroups exceed what one dispatch can run"),
            ));
        }
        let x = groups.div_ceil(y);
        self.dispatch_grid(pipeline, tensors, params, [x as u32, y as u32, 1])
    }

    /// Queues a dispatch with an explicit grid.
    pub fn dispatch_grid(
        &mut self,
        pipeline: Arc<Pipeline>,
        tensors: &[&TArg],
        mut params: Params,
        groups: [u32; 3],
    ) -> Result<()> {
        if groups.contains(&0) {
            return Ok(());
        }
        if tensors.len() != pipeline.n_storage {
            return Err(Error::backend(
                &self.gpu.name,
                format!(
                    "kernel takes {} tensors, {} given",
                    pipeline.n_storage,
                    tensors.len()
                ),
            ));
        }
        for (slot, t) in tensors.iter().enumerate() {
            params.tensor(slot, t);
        }
        self.dispatches.push(Dispatch {
            pipeline,
            bindings: tensors.iter().map(|t| t.binding.clone()).collect(),
            params,
            groups,
        });
        Ok(())
    }

    /// Encodes every dispatch into one command buffer and submits it.
    pub fn submit(self) -> Result<Option<wgpu::SubmissionIndex>> {
        if self.dispatches.is_empty() {
            return Ok(None);
        }
        let gpu = self.gpu;
        let slot = PARAM_BYTES.max(gpu.limits.min_uniform_buffer_offset_alignment as u64);
        let mut data = vec![0u8; slot as usize * self.dispatches.len()];
        for (i, d) in self.dispatches.iter().enumerate() {
            let at = i * slot as usize;
            data[at..at + PARAM_BYTES as usize].copy_from_slice(bytemuck::cast_slice(&d.params.u));
        }
        let uniforms = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ggraph params"),
            size: data.len() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        gpu.queue.write_buffer(&uniforms, 0, &data);
        let groups: Vec<wgpu::BindGroup> = self
            .dispatches
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &uniforms,
                        offset: i as u64 * slot,
                        size: wgpu::BufferSize::new(PARAM_BYTES),
                    }),
                }];
                for (j, b) in d.bindings.iter().enumerate() {
                    entries.push(wgpu::BindGroupEntry {
                        binding: j as u32 + 1,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &b.buffer,
                            offset: b.offset,
                            size: wgpu::BufferSize::new(b.size),
                        }),
                    });
                }
                gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &d.pipeline.layout,
                    entries: &entries,
                })
            })
            .collect();
        let mut enc = gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("ggraph split"),
            });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            for (d, g) in self.dispatches.iter().zip(&groups) {
                pass.set_pipeline(&d.pipeline.pipeline);
                pass.set_bind_group(0, g, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
        }
        let index = gpu.queue.submit([enc.finish()]);
        if self.uses_status {
            gpu.status_pending
                .store(true, std::sync::atomic::Ordering::Release);
        }
        gpu.take_errors()?;
        Ok(Some(index))
    }
}

/// Records the kernels that compute `node`.
pub(crate) fn encode(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let t = graph.tensor(node);
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => Ok(()),
        Op::GetRows => copy::get_rows(rec, graph, node),
        Op::Binary(op) => elementwise::binary(rec, graph, node, *op),
        Op::Scale { scale, bias } => elementwise::scale(rec, graph, node, *scale, *bias),
        Op::Unary(u) => elementwise::unary(rec, graph, node, *u),
        Op::Glu { op, swapped } => elementwise::glu(rec, graph, node, *op, *swapped),
        Op::MulMat => matmul::mul_mat(rec, graph, node),
        Op::MulMatId => matmul::mul_mat_id(rec, graph, node),
        Op::RmsNorm { eps } => norm::rows(rec, graph, node, norm::RowOp::RmsNorm(*eps)),
        Op::Norm { eps } => norm::rows(rec, graph, node, norm::RowOp::Norm(*eps)),
        Op::SumRows => norm::rows(rec, graph, node, norm::RowOp::SumRows),
        Op::SoftMax { scale, max_bias } => norm::soft_max(rec, graph, node, *scale, *max_bias),
        Op::Rope(p) => rope::rope(rec, graph, node, p),
        Op::Cpy | Op::Cont => copy::copy(rec, graph, node),
        Op::SetRows => copy::set_rows(rec, graph, node),
        Op::Concat { dim } => copy::concat(rec, graph, node, *dim),
        Op::ArgSort { order } => sort::argsort(rec, graph, node, Some(*order), None),
        Op::TopK { k } => sort::argsort(rec, graph, node, None, Some(*k)),
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => attention::flash_attn_ext(rec, graph, node, *scale, *max_bias, *softcap),
    }
}

/// Longest row argsort and top_k take.
pub(crate) fn max_sort_row() -> usize {
    sort::MAX_SORT_ROW
}

/// Largest value dimension flash attention takes.
pub(crate) fn attention_max_dv() -> usize {
    attention::MAX_DV
}
