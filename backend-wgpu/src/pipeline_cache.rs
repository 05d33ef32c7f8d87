//! The compute pipelines built on one device, by kernel name and
//! specialisation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A compute pipeline with its bind group layout.
pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    /// Storage bindings (tensors) the kernel takes.
    pub n_storage: usize,
}

/// Pipelines of one device, keyed by kernel name and specialisation.
#[derive(Default)]
pub(crate) struct PipelineCache {
    map: Mutex<HashMap<String, Arc<Pipeline>>>,
}

impl PipelineCache {
    /// The pipeline built for `key`, if any.
    pub fn get(&self, key: &str) -> Option<Arc<Pipeline>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    pub fn insert(&self, key: &str, pipeline: Arc<Pipeline>) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), pipeline);
    }

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
