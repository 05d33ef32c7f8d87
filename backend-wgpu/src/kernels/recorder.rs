//! The dispatches of one split, recorded and then submitted together in
//! one command buffer.

use std::sync::Arc;

use ggraph_core::{DType, Error, Result};

use crate::gpu::Gpu;
use crate::pipeline_cache::Pipeline;

use super::args::{Binding, PARAM_BYTES, Params, TArg};

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
