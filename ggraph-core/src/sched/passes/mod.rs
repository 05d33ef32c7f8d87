//! The scheduler's passes, each its own function with one job: the graph
//! rewrite of [row split](row_split), then the four assignment passes,
//! [weights location](weights_location), [expansion],
//! [upgrade] and [copy insertion](copy_insertion); with one
//! backend, [single] stands in for the last three.

pub mod copy_insertion;
pub mod expansion;
pub mod row_split;
pub mod single;
pub mod upgrade;
pub mod weights_location;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::cause::{BackendId, Cause, intern};
use super::offload::OffloadPolicy;
use crate::backend::{BufferType, Device};
use crate::ir::{Graph, TensorId};

/// What the passes know about one backend.
pub struct BackendInfo {
    /// The device that runs the backend's splits.
    pub device: Arc<dyn Device>,
    /// Name of the buffer type its compute memory comes from.
    pub compute_buft: String,
    /// Op offload switch.
    pub op_offload: bool,
}

/// The backend and cause of every tensor, by tensor index.
#[derive(Clone, Debug, Default)]
pub struct Assignments {
    /// The backend of each tensor; `None` while no pass has placed it.
    pub backend: Vec<Option<BackendId>>,
    /// Why each placed tensor is where it is; `Some` exactly where `backend`
    /// is.
    pub cause: Vec<Option<Cause>>,
    /// The first backend that refused a node the rules sent it.
    pub refused: Vec<Option<BackendId>>,
}

impl Assignments {
    /// Empty tables for `n` tensors.
    pub fn new(n: usize) -> Assignments {
        Assignments {
            backend: vec![None; n],
            cause: vec![None; n],
            refused: vec![None; n],
        }
    }

    /// Forgets every assignment and sizes the tables for `n` tensors,
    /// keeping their memory.
    pub fn reset(&mut self, n: usize) {
        for v in [&mut self.backend, &mut self.refused] {
            v.clear();
            v.resize(n, None);
        }
        self.cause.clear();
        self.cause.resize(n, None);
    }

    /// The backend of `id`; `None` if it is not placed yet or lies past the
    /// tables.
    pub fn get(&self, id: TensorId) -> Option<BackendId> {
        self.backend.get(id.index()).copied().flatten()
    }

    /// Places `id` on `b` for `cause`, replacing any earlier placement; the
    /// tables grow for ids past their end (tensors a pass added).
    pub fn set(&mut self, id: TensorId, b: BackendId, cause: Cause) {
        let i = id.index();
        if i >= self.backend.len() {
            self.backend.resize(i + 1, None);
            self.cause.resize(i + 1, None);
            self.refused.resize(i + 1, None);
        }
        self.backend[i] = Some(b);
        self.cause[i] = Some(cause);
    }

    /// Records that `b` refused `id`; only the first refusal is kept.
    pub fn refuse(&mut self, id: TensorId, b: BackendId) {
        let r = &mut self.refused[id.index()];
        if r.is_none() {
            *r = Some(b);
        }
    }
}

/// A buffer type's small index in a scheduler's table.
pub type BuftId = u16;

/// Memory of a type no backend of the scheduler knows.
pub const UNKNOWN_BUFT: BuftId = u16::MAX;

/// The buffer types a scheduler knows, by index, and which backend's
/// kernels use which: answered once, then looked up.
pub struct BufferTypes {
    names: Vec<&'static str>,
    ids: HashMap<String, BuftId>,
    is_host: Vec<bool>,
    /// usable[backend][buft]
    usable: Vec<Vec<bool>>,
    /// The compute memory of each backend.
    compute: Vec<BuftId>,
}

impl BufferTypes {
    /// The table for `known` buffer types (by name), indexed in name order,
    /// with each backend's [`Device::supports_buffer_type`] answers.
    ///
    /// Panics if a backend's `compute_buft` is not among `known`.
    pub fn new(
        backends: &[BackendInfo],
        known: &HashMap<String, Arc<dyn BufferType>>,
    ) -> BufferTypes {
        let mut names: Vec<&'static str> = known.keys().map(|k| intern(k)).collect();
        names.sort();
        let ids: HashMap<String, BuftId> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), i as BuftId))
            .collect();
        let is_host = names.iter().map(|n| known[*n].is_host()).collect();
        let usable = backends
            .iter()
            .map(|b| {
                names
                    .iter()
                    .map(|n| b.device.supports_buffer_type(known[*n].as_ref()))
                    .collect()
            })
            .collect();
        let compute = backends.iter().map(|b| ids[&b.compute_buft]).collect();
        BufferTypes {
            names,
            ids,
            is_host,
            usable,
            compute,
        }
    }

    /// The index of the buffer type named `name`, or [`UNKNOWN_BUFT`].
    pub fn id(&self, name: &str) -> BuftId {
        self.ids.get(name).copied().unwrap_or(UNKNOWN_BUFT)
    }

    /// The name of buffer type `id`; `"unknown"` for an index not in the
    /// table.
    pub fn name(&self, id: BuftId) -> &'static str {
        self.names.get(id as usize).copied().unwrap_or("unknown")
    }
}

/// Everything the passes read.
pub struct PassContext<'a> {
    /// The graph being scheduled.
    pub graph: &'a Graph,
    /// The scheduler's backends, in priority order ([`BackendId`] indexes
    /// them).
    pub backends: &'a [BackendInfo],
    /// The backend graph inputs start on.
    pub host: BackendId,
    /// Which ops are lifted off the host when their weight is in host memory.
    pub offload: &'a OffloadPolicy,
    /// The offload policy's name, as causes record it.
    pub offload_name: &'static str,
    /// The buffer types the backends know, and which backend uses which.
    pub bufts: &'a BufferTypes,
    /// The buffer type of each tensor's own memory (NO_DATA if none).
    bound: Vec<BuftId>,
    /// supports_op answers per (tensor, backend): 0 not asked, 1 no, 2 yes.
    supported: RefCell<Vec<u8>>,
    /// Per backend: a GPU-class device (expands first).
    gpu_class: Vec<bool>,
}

/// No memory yet.
const NO_DATA: BuftId = u16::MAX - 1;

impl<'a> PassContext<'a> {
    /// The context for one scheduling of `graph`; looks up the buffer type of
    /// every tensor that already has memory. `supports_op` answers are asked
    /// lazily and cached for the life of the context.
    pub fn new(
        graph: &'a Graph,
        backends: &'a [BackendInfo],
        host: BackendId,
        offload: &'a OffloadPolicy,
        bufts: &'a BufferTypes,
    ) -> PassContext<'a> {
        // tensors share few buffers: look each buffer's type up once
        let mut by_buffer: Vec<(usize, BuftId)> = Vec::new();
        let bound = graph
            .tensors()
            .map(|(_, t)| match &t.data {
                None => NO_DATA,
                Some(d) => {
                    let key = Arc::as_ptr(&d.buffer) as *const () as usize;
                    match by_buffer.iter().find(|(k, _)| *k == key) {
                        Some(&(_, id)) => id,
                        None => {
                            let id = bufts.id(d.buffer.buffer_type_name());
                            by_buffer.push((key, id));
                            id
                        }
                    }
                }
            })
            .collect();
        PassContext {
            graph,
            backends,
            host,
            offload,
            offload_name: intern(&offload.name()),
            bufts,
            bound,
            supported: RefCell::new(vec![0; graph.n_tensors() * backends.len()]),
            gpu_class: backends
                .iter()
                .map(|b| b.device.kind().is_gpu_class())
                .collect(),
        }
    }

    /// Every backend id, in priority order.
    pub fn ids(&self) -> impl Iterator<Item = BackendId> + '_ {
        (0..self.backends.len()).map(|b| BackendId(b as u16))
    }

    /// The device of backend `b`.
    pub fn device(&self, b: BackendId) -> &dyn Device {
        self.backends[b.index()].device.as_ref()
    }

    /// Whether backend `b`'s device is a GPU or accelerator (see
    /// [`DeviceKind::is_gpu_class`](crate::backend::DeviceKind::is_gpu_class)),
    /// whose assignments expand first.
    pub fn is_gpu_class(&self, b: BackendId) -> bool {
        self.gpu_class[b.index()]
    }

    /// Backend `b` computes `node` (views and leafs need no support).
    pub fn supports(&self, b: BackendId, node: TensorId) -> bool {
        let t = self.graph.tensor(node);
        if t.op.is_noop() {
            return true;
        }
        let k = node.index() * self.backends.len() + b.index();
        let cached = self.supported.borrow().get(k).copied().unwrap_or(0);
        if cached != 0 {
            return cached == 2;
        }
        let yes = self.device(b).supports_op(self.graph, node);
        if let Some(slot) = self.supported.borrow_mut().get_mut(k) {
            *slot = if yes { 2 } else { 1 };
        }
        yes
    }

    /// Backend `b`'s kernels use memory of type `buft`.
    pub fn supports_buft(&self, b: BackendId, buft: BuftId) -> bool {
        self.bufts.usable[b.index()]
            .get(buft as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Whether buffer type `buft` is host memory; `false` for an index not in
    /// the table.
    pub fn is_host_buft(&self, buft: BuftId) -> bool {
        self.bufts
            .is_host
            .get(buft as usize)
            .copied()
            .unwrap_or(false)
    }

    /// The buffer type a tensor's memory is in already (its own, or its
    /// view base's); [`UNKNOWN_BUFT`] for memory of a type no backend knows,
    /// `None` for a tensor with no memory yet.
    pub fn bound_buft(&self, id: TensorId) -> Option<BuftId> {
        match self.bound[self.graph.base_of(id).index()] {
            NO_DATA => None,
            b => Some(b),
        }
    }

    /// The name of the buffer type of a bound tensor, for errors.
    pub fn bound_buft_name(&self, id: TensorId) -> String {
        let base = self.graph.base_of(id);
        self.graph
            .tensor(base)
            .data
            .as_ref()
            .map_or_else(String::new, |d| d.buffer.buffer_type_name().to_string())
    }

    /// Where a tensor's memory is or will be: bound memory, else the
    /// compute memory of its (or its view base's) backend.
    pub fn buft_of(&self, id: TensorId, asg: &Assignments) -> Option<BuftId> {
        if let Some(b) = self.bound_buft(id) {
            return Some(b);
        }
        let owner = asg.get(id).or_else(|| asg.get(self.graph.base_of(id)))?;
        Some(self.bufts.compute[owner.index()])
    }

    /// Whether backend `b` reads `src` where it lies.
    pub fn reads_in_place(&self, b: BackendId, src: TensorId, asg: &Assignments) -> bool {
        self.buft_of(src, asg)
            .is_some_and(|t| self.supports_buft(b, t))
    }

    /// Whether two backends compute in the same memory.
    pub fn same_compute_memory(&self, a: BackendId, b: BackendId) -> bool {
        self.bufts.compute[a.index()] == self.bufts.compute[b.index()]
    }
}
