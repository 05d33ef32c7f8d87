//! A model loaded onto devices: its weights packed into a few buffers per
//! device as the placement plan says, ready to build graphs from.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use super::arch::{ModelConfig, WeightSource};
use super::desc::{ModelDesc, TensorSpec, WeightData};
use super::kv::bytes_per_buffer_type;
use super::placement::{Home, PlacementOptions, PlacementPlan, ROW_ALIGN, plan_placement_named};
use ggraph_core::alloc::{RowSplitBuffer, RowSplitBufferType, VirtualBufferType, pack_weights};
use ggraph_core::backend::{Buffer, BufferType, Device};
use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GraphBuilder, TensorData, TensorId, shape4};

/// Whether loading allocates real memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadMode {
    /// Allocate and fill the weights.
    Real,
    /// Plan with virtual memory of the same types and sizes (estimates).
    DryRun,
}

/// Progress of a load: bytes done, bytes in all.
pub type LoadProgress<'a> = &'a mut dyn FnMut(u64, u64);

struct Loaded {
    dtype: DType,
    shape: Vec<usize>,
    data: TensorData,
}

/// Whether any of `devices` would take a prompt-sized product of a host
/// weight (op offload). Such products copy the weight from host memory,
/// so host weights then stay in GGUF's layout rather than the CPU's own,
/// as llama.cpp keeps them in a GPU's pinned host memory rather than its
/// CPU_REPACK buffers.
fn any_offloads_products(devices: &[Arc<dyn Device>]) -> Result<bool> {
    if devices.is_empty() {
        return Ok(false);
    }
    let mut b = GraphBuilder::new();
    let w = b.weight("w", DType::Q4_0, &[32, 8])?;
    let x = b.input("x", DType::F32, &[32, 512])?;
    let y = b.mul_mat(w, x)?;
    b.set_output(y)?;
    let graph = b.build();
    Ok(devices.iter().any(|d| d.offload_op(&graph, y)))
}

/// A model on its devices.
pub struct Model {
    /// The hyperparameters the graphs are built from.
    pub config: ModelConfig,
    /// Where each weight, layer and KV cache lives.
    pub plan: PlacementPlan,
    /// GPU-class devices in placement order.
    pub devices: Vec<Arc<dyn Device>>,
    /// The host device: weights the plan keeps on the host live in its
    /// buffer type, and the scheduler falls back to it.
    pub cpu: Arc<dyn Device>,
    /// Whether the weights are real memory or a dry run's virtual memory.
    pub mode: LoadMode,
    /// The GGUF metadata the model came from (vocabulary, chat template).
    pub metadata: Option<Arc<crate::gguf::GgufHeader>>,
    tensors: HashMap<String, Loaded>,
    buffers: Vec<Arc<dyn Buffer>>,
    /// Where the weights' bytes came from, to upload them again.
    source: WeightData,
    /// The tensors with memory of their own (not sharing another's).
    stored: Vec<TensorSpec>,
    /// Weights whose memory was lost and allocated again, not yet
    /// uploaded: an index into `stored` and the bytes of it (all, or a
    /// device's rows of a row-split matrix).
    stale: Mutex<Vec<(usize, Range<u64>)>>,
}

impl Model {
    /// The model's tokenizer, from the vocabulary in its metadata.
    pub fn tokenizer(&self) -> Result<crate::tokenizer::Tokenizer> {
        crate::desc::tokenizer_of(self.metadata.as_deref())
    }

    /// The model's chat template (`tokenizer.chat_template`), with its
    /// tokenizer's BOS and EOS text, and those the tokenizer adds itself
    /// taken off a rendering's ends (as llama.cpp does, so a prompt does
    /// not get two).
    pub fn chat_template(
        &self,
        tokenizer: &crate::tokenizer::Tokenizer,
    ) -> Result<crate::chat_template::ChatTemplate> {
        let source = self
            .metadata
            .as_deref()
            .and_then(|h| h.opt_str("tokenizer.chat_template").ok().flatten())
            .ok_or_else(|| {
                Error::InvalidArgument(
                    "this model has no chat template (tokenizer.chat_template)".into(),
                )
            })?;
        let (bos, eos) = tokenizer.bos_eos_text();
        let v = tokenizer.vocab();
        Ok(crate::chat_template::ChatTemplate::new(source, &bos, &eos)?
            .with_added_tokens(v.add_bos, v.add_eos))
    }

    /// Places `desc` on `devices` (and the host `cpu`) as `opts` say,
    /// allocates the weights (one packing per buffer type) and, in `Real`
    /// mode, copies their bytes in.
    pub fn load(
        desc: &ModelDesc,
        devices: &[Arc<dyn Device>],
        cpu: Arc<dyn Device>,
        opts: &PlacementOptions,
        mode: LoadMode,
        mut progress: Option<LoadProgress<'_>>,
    ) -> Result<Model> {
        let free: Vec<u64> = devices.iter().map(|d| d.memory().free_bytes).collect();
        let names: Vec<String> = devices.iter().map(|d| d.name().to_string()).collect();
        let plan = plan_placement_named(desc, &names, &free, opts, mode == LoadMode::Real)?;
        if tracing::enabled!(tracing::Level::DEBUG) {
            let layers = |d: Option<usize>| plan.layer_device.iter().filter(|&&l| l == d).count();
            let mut on: Vec<String> = vec![format!("host {}", layers(None))];
            on.extend(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| format!("{n} {}", layers(Some(i)))),
            );
            tracing::debug!(
                "placement: layers (the output layer counted) on {}; weight bytes {:?} (host first)",
                on.join(", "),
                plan.weight_bytes
            );
        }
        if mode == LoadMode::Real && !desc.has_data() {
            return Err(Error::InvalidArgument(
                "this model has no tensor data (opened from a header): load it in dry-run mode"
                    .into(),
            ));
        }
        let real = |bt: Arc<dyn BufferType>| -> Arc<dyn BufferType> {
            match mode {
                LoadMode::Real => bt,
                LoadMode::DryRun => VirtualBufferType::like(bt.as_ref()),
            }
        };
        // the buffer type of each weight: its device's layout buffer type
        // for it where one lays it out, else the device's memory
        let repack = opts.repack && !(opts.op_offload && any_offloads_products(devices)?);
        let buffer_type_of = |device: &dyn Device, t: &crate::desc::TensorSpec| {
            if repack {
                device.weight_buffer_type(t.dtype, &t.shape)
            } else {
                device.buffer_type()
            }
        };
        let device_bufts: Vec<Arc<dyn BufferType>> =
            devices.iter().map(|d| real(d.buffer_type())).collect();

        // group tensors per buffer type, in model order
        let mut tensors = HashMap::with_capacity(desc.tensors.len());
        let mut buffers: Vec<Arc<dyn Buffer>> = Vec::new();
        let mut groups: Vec<(Arc<dyn BufferType>, Vec<usize>)> = Vec::new();
        let mut rows: Vec<usize> = Vec::new();
        for (i, home) in plan.homes.iter().enumerate() {
            if plan.shared_with[i].is_some() {
                continue;
            }
            let t = &desc.tensors[i];
            let bt = match home {
                Home::Host => buffer_type_of(cpu.as_ref(), t),
                Home::Device(d) => buffer_type_of(devices[*d].as_ref(), t),
                Home::Rows => {
                    rows.push(i);
                    continue;
                }
            };
            match groups.iter_mut().find(|(b, _)| b.name() == bt.name()) {
                Some((_, v)) => v.push(i),
                None => groups.push((bt, vec![i])),
            }
        }
        for (bt, idx) in groups {
            let bt = real(bt);
            let sizes: Vec<(String, u64)> = idx
                .iter()
                .map(|&i| (desc.tensors[i].name.clone(), desc.tensors[i].nbytes()))
                .collect();
            let packed = pack_weights(&bt, &sizes)?;
            for (&i, data) in idx.iter().zip(packed.placements) {
                let t = &desc.tensors[i];
                let ne = shape4(&t.shape).ok_or_else(|| Error::Shape {
                    op: "model weight",
                    msg: format!(
                        "'{}' has {} dimensions: ggml has 1 to 4",
                        t.name,
                        t.shape.len()
                    ),
                })?;
                data.buffer.init_tensor(data.offset, t.dtype, ne)?;
                tensors.insert(
                    t.name.clone(),
                    Loaded {
                        dtype: t.dtype,
                        shape: t.shape.clone(),
                        data,
                    },
                );
            }
            buffers.extend(packed.buffers);
        }
        if !rows.is_empty() {
            let split = RowSplitBufferType::new(
                device_bufts.clone(),
                plan.row_split.clone(),
                ROW_ALIGN,
                plan.main_device,
            )?;
            let matrices: Vec<(String, usize, u64)> = rows
                .iter()
                .map(|&i| {
                    let t = &desc.tensors[i];
                    (t.name.clone(), t.shape[1], t.nbytes() / t.shape[1] as u64)
                })
                .collect();
            for (&i, rb) in rows.iter().zip(split.alloc_matrices(&matrices)?) {
                let t = &desc.tensors[i];
                for p in rb.parts() {
                    if !buffers.iter().any(|b| Arc::ptr_eq(b, &p.data.buffer)) {
                        buffers.push(p.data.buffer.clone());
                    }
                }
                let buffer: Arc<dyn Buffer> = rb;
                tensors.insert(
                    t.name.clone(),
                    Loaded {
                        dtype: t.dtype,
                        shape: t.shape.clone(),
                        data: TensorData { buffer, offset: 0 },
                    },
                );
            }
        }
        for (i, src) in plan.shared_with.iter().enumerate() {
            if let Some(src) = src {
                let (t, data) = (
                    &desc.tensors[i],
                    tensors[&desc.tensors[*src].name].data.clone(),
                );
                tensors.insert(
                    t.name.clone(),
                    Loaded {
                        dtype: t.dtype,
                        shape: t.shape.clone(),
                        data,
                    },
                );
            }
        }
        if mode == LoadMode::Real {
            let total: u64 = (desc.tensors.iter().zip(&plan.shared_with))
                .filter(|(_, shared)| shared.is_none())
                .map(|(t, _)| t.nbytes())
                .sum();
            let mut done = 0u64;
            for (t, shared) in desc.tensors.iter().zip(&plan.shared_with) {
                if shared.is_some() {
                    continue;
                }
                let dst = &tensors[&t.name].data;
                dst.buffer.write(dst.offset, &desc.data.bytes_of(t)?)?;
                desc.data.release(t);
                done += t.nbytes();
                if let Some(p) = progress.as_mut() {
                    p(done, total);
                }
            }
        }
        let stored = (desc.tensors.iter().zip(&plan.shared_with))
            .filter(|(_, shared)| shared.is_none())
            .map(|(t, _)| t.clone())
            .collect();
        Ok(Model {
            config: desc.config.clone(),
            plan,
            devices: devices.to_vec(),
            cpu,
            mode,
            metadata: desc.metadata.clone(),
            tensors,
            buffers,
            source: desc.data.clone(),
            stored,
            stale: Mutex::new(Vec::new()),
        })
    }

    /// Whether a device lost weight memory of this model
    /// ([`Buffer::lost`]: a remote server that restarted).
    pub fn weights_lost(&self) -> bool {
        self.buffers.iter().any(|b| b.lost()) || !self.lock_stale().is_empty()
    }

    /// Allocates lost weight memory again and uploads the weights it held
    /// from where the model was loaded from (its GGUF file; a server
    /// started with its cache takes large ones by hash): of a row-split
    /// matrix, only the rows of the devices that lost them. Returns the
    /// bytes uploaded. Errors while a device cannot be reached; the weights not
    /// yet uploaded are remembered for the next call.
    pub fn restore_weights(&self) -> Result<u64> {
        let mut stale = self.lock_stale();
        for (i, t) in self.stored.iter().enumerate() {
            let buffer = &self.tensors[&t.name].data.buffer;
            // a row-split matrix: only the rows of the devices that lost them
            let lost: Vec<Range<u64>> = match buffer.as_any().downcast_ref::<RowSplitBuffer>() {
                Some(rows) => (rows.parts().iter())
                    .filter(|p| p.data.buffer.lost())
                    .map(|p| {
                        p.rows.start as u64 * rows.row_bytes()..p.rows.end as u64 * rows.row_bytes()
                    })
                    .collect(),
                None if buffer.lost() => std::iter::once(0..t.nbytes()).collect(),
                None => Vec::new(),
            };
            for range in lost {
                if !stale.contains(&(i, range.clone())) {
                    stale.push((i, range));
                }
            }
        }
        for b in &self.buffers {
            b.restore()?;
        }
        let mut bytes = 0;
        while let Some((i, range)) = stale.last().cloned() {
            let t = &self.stored[i];
            let dst = &self.tensors[&t.name].data;
            let data = self.source.bytes_of(t)?;
            let part = data
                .get(range.start as usize..range.end as usize)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "'{}' has {} bytes, not {range:?}",
                        t.name,
                        data.len()
                    ))
                })?;
            dst.buffer.write(dst.offset + range.start, part)?;
            self.source.release(t);
            bytes += range.end - range.start;
            stale.pop();
        }
        if bytes > 0 {
            tracing::info!("{bytes} weight bytes uploaded again after their memory was lost");
        }
        Ok(bytes)
    }

    fn lock_stale(&self) -> MutexGuard<'_, Vec<(usize, Range<u64>)>> {
        self.stale.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Weight bytes allocated per buffer type.
    pub fn weight_bytes(&self) -> Vec<(String, u64)> {
        bytes_per_buffer_type(&self.buffers)
    }

    /// Device allocations the weights took.
    pub fn n_buffers(&self) -> usize {
        self.buffers.len()
    }

    /// The buffer type of a layer's KV cache (host without offload_kqv).
    pub fn kv_buffer_type(&self, layer: usize) -> Arc<dyn BufferType> {
        let bt = match self.plan.kv_device.get(layer).copied().flatten() {
            Some(d) => self.devices[d].buffer_type(),
            None => self.cpu.buffer_type(),
        };
        match self.mode {
            LoadMode::Real => bt,
            LoadMode::DryRun => VirtualBufferType::like(bt.as_ref()),
        }
    }
}

impl WeightSource for Model {
    fn weight(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<TensorId>> {
        (&*self).weight(b, name, shape)
    }
}

impl WeightSource for &Model {
    fn weight(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<TensorId>> {
        let Some(t) = self.tensors.get(name) else {
            return Ok(None);
        };
        // GGUF drops trailing dimensions of size 1
        let trimmed = |s: &[usize]| {
            let mut v = s.to_vec();
            while v.len() > 1 && v.last() == Some(&1) {
                v.pop();
            }
            v
        };
        if trimmed(&t.shape) != trimmed(shape) {
            return Err(Error::Shape {
                op: "model weight",
                msg: format!(
                    "'{name}' has shape {:?}; the graph expects {shape:?}",
                    t.shape
                ),
            });
        }
        b.bound_weight(name, t.dtype, &t.shape, t.data.clone())
            .map(Some)
    }
}
