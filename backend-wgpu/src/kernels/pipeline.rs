//! Building a kernel's compute pipeline from its WGSL source, once per
//! device (kept in the device's pipeline cache).

use std::sync::Arc;

use ggraph_core::Result;

use crate::gpu::Gpu;
use crate::pipeline_cache::Pipeline;

use super::args::PARAM_BYTES;

/// The pipeline for `key`, built from `source()` on first use.
pub(crate) fn pipeline(
    gpu: &Gpu,
    key: &str,
    n_storage: usize,
    source: impl FnOnce() -> String,
) -> Result<Arc<Pipeline>> {
    if let Some(p) = gpu.pipelines.get(key) {
        return Ok(p);
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
    gpu.pipelines.insert(key, p.clone());
    Ok(p)
}
