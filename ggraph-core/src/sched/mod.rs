//! The scheduler: assigns every op of a graph to a backend in four passes,
//! cuts the graph into splits with the copies between them, plans memory
//! per backend with the graph allocator, and runs the splits.
//!
//! ```text
//! Graph ─► 0 row split ─► 1 weights location ─► 2 expansion ─► 3 upgrade ─► 4 copy insertion ─► splits
//!  (passes/row_split.rs, weights_location.rs, expansion.rs, upgrade.rs, copy_insertion.rs)
//! ```
//!
//! Pass 0 rewrites mul_mats on row-split weights into per-device parts
//! and places their gathers; a graph without such weights skips it.
//!
//! With one backend there is nothing to choose after pass 1: every other
//! node goes to it and the graph is one split (passes/single.rs).
//!
//! Every assignment keeps its [`Cause`]; [`Scheduler::explain`] prints, per
//! node, its backend and why, and per split its inputs and the bytes
//! copied.

pub mod cause;
mod execute;
mod explain;
pub mod offload;
pub mod passes;
pub mod split;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use cause::{BackendId, Cause, Direction, Pass};
pub use offload::{HostPerf, OffloadPolicy};
pub use split::{Split, SplitInput};

use crate::alloc::{GraphAllocator, Strategy, VirtualBufferType};
use crate::backend::{BufferType, Device, DeviceKind, Event, Stream};
use crate::error::{Error, Result};
use crate::ir::{Graph, TensorId};
use passes::copy_insertion::Scheduled;
use passes::{Assignments, BackendInfo, BufferTypes, PassContext};

/// One backend of a scheduler, in priority order.
pub struct BackendSpec {
    /// The device that runs the backend's splits.
    pub device: Arc<dyn Device>,
    /// Whether ops whose weights are in host memory may be lifted to this
    /// backend (op offload).
    pub op_offload: bool,
}

impl BackendSpec {
    /// `device` with op offload on.
    pub fn new(device: Arc<dyn Device>) -> BackendSpec {
        BackendSpec {
            device,
            op_offload: true,
        }
    }

    /// With op offload to this backend on or off.
    pub fn op_offload(mut self, on: bool) -> BackendSpec {
        self.op_offload = on;
        self
    }
}

/// Scheduler settings.
#[derive(Clone, Debug)]
pub struct SchedConfig {
    /// Graph copies for pipeline parallelism, 1 to 4: consecutive runs
    /// rotate input copies so one run's copies can overlap the last one's
    /// compute.
    pub n_copies: usize,
    /// When an op whose weight is in host memory moves to a backend with op
    /// offload on.
    pub offload_policy: OffloadPolicy,
    /// How the allocator places compute memory.
    pub strategy: Strategy,
    /// Plan only: compute memory is virtual and `compute` is refused.
    pub dry_run: bool,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            n_copies: 1,
            offload_policy: OffloadPolicy::Device,
            strategy: Strategy::default(),
            dry_run: false,
        }
    }
}

/// Counters of the scheduler's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Splits of the current graph.
    pub splits: usize,
    /// Copies per run of the current graph.
    pub copies: usize,
    /// Bytes copied between backends, over all runs.
    pub bytes_copied: u64,
    /// Copies made, over all runs.
    pub copies_made: u64,
    /// Graphs split.
    pub graphs_split: u64,
    /// Runs (computes).
    pub runs: u64,
    /// Runs of a graph already split and allocated (no new planning).
    pub graph_reuses: u64,
    /// Times the compute memory had to grow.
    pub reallocations: u64,
}

/// How long the last split took, per pass.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PassTimings {
    /// Pass 1 (with the placement of row-split gathers).
    pub weights_location: Duration,
    /// Pass 2, or with one backend the assignment of everything left.
    pub expansion: Duration,
    /// Pass 3; zero with one backend.
    pub upgrade: Duration,
    /// Pass 4 and the graph rewrite that applies it.
    pub copy_insertion: Duration,
}

impl PassTimings {
    /// The four passes together (the row-split rewrite is not counted).
    pub fn total(&self) -> Duration {
        self.weights_location + self.expansion + self.upgrade + self.copy_insertion
    }
}

/// Observes node outputs while a graph runs.
pub trait EvalCallback: Send {
    /// Whether to stop after `node` and show it to `observe`.
    fn wants(&mut self, graph: &Graph, node: TensorId) -> bool;

    /// Sees `node`'s output (readable through the graph); `false` stops
    /// the run with [`Error::Aborted`].
    fn observe(&mut self, graph: &Graph, node: TensorId) -> bool;
}

/// Asked between splits; `true` stops the run with [`Error::Aborted`].
pub type AbortCallback = Box<dyn FnMut() -> bool + Send>;

/// Places and runs graphs across an ordered list of backends.
pub struct Scheduler {
    config: SchedConfig,
    infos: Vec<BackendInfo>,
    streams: Vec<Box<dyn Stream>>,
    host: BackendId,
    bufts: BufferTypes,
    allocator: GraphAllocator,
    manual: HashMap<TensorId, BackendId>,
    assignments: Assignments,
    scheduled: Option<Scheduled>,
    allocated: bool,
    /// Per split, per graph copy: the event of that split's last run.
    events: Vec<Vec<Option<Arc<dyn Event>>>>,
    stats: SchedStats,
    timings: PassTimings,
    eval: Option<Box<dyn EvalCallback>>,
    abort: Option<AbortCallback>,
}

impl Scheduler {
    /// A scheduler over `backends` (priority = order). One of them must be
    /// a CPU: graph inputs start there.
    ///
    /// Errors with [`Error::InvalidArgument`] if `n_copies` is not 1 to 4,
    /// there are no backends (or more than 65535), none is a CPU, or a
    /// device appears twice; a backend error if a stream cannot be made.
    pub fn new(backends: Vec<BackendSpec>, config: SchedConfig) -> Result<Scheduler> {
        if !(1..=4).contains(&config.n_copies) {
            return Err(Error::InvalidArgument(format!(
                "pipeline depth (graph copies) must be 1 to 4, not {}",
                config.n_copies
            )));
        }
        if backends.is_empty() || backends.len() > u16::MAX as usize {
            return Err(Error::InvalidArgument(
                "a scheduler needs 1 to 65535 backends".into(),
            ));
        }
        let host = backends
            .iter()
            .position(|b| b.device.kind() == DeviceKind::Cpu)
            .ok_or_else(|| {
                Error::InvalidArgument(
                    "a scheduler needs a host (CPU) backend: graph inputs start there".into(),
                )
            })?;
        let mut names: Vec<&str> = backends.iter().map(|b| b.device.name()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::InvalidArgument(format!(
                "each device may appear once in a scheduler: {names:?}"
            )));
        }
        let mut bufts: HashMap<String, Arc<dyn BufferType>> = HashMap::new();
        let mut compute: Vec<Arc<dyn BufferType>> = Vec::new();
        for b in &backends {
            let bt = b.device.buffer_type();
            bufts.insert(bt.name().to_string(), bt.clone());
            if let Some(h) = b.device.host_buffer_type() {
                bufts.insert(h.name().to_string(), h);
            }
            for l in b.device.layout_buffer_types() {
                bufts.insert(l.name().to_string(), l);
            }
            compute.push(if config.dry_run {
                VirtualBufferType::like(bt.as_ref())
            } else {
                bt
            });
        }
        let streams = if config.dry_run {
            Vec::new()
        } else {
            backends
                .iter()
                .map(|b| b.device.new_stream())
                .collect::<Result<Vec<_>>>()?
        };
        let infos: Vec<BackendInfo> = backends
            .into_iter()
            .map(|b| BackendInfo {
                compute_buft: b.device.buffer_type().name().to_string(),
                device: b.device,
                op_offload: b.op_offload,
            })
            .collect();
        let bufts = BufferTypes::new(&infos, &bufts);
        Ok(Scheduler {
            allocator: GraphAllocator::new(compute).with_strategy(config.strategy),
            config,
            infos,
            streams,
            host: BackendId(host as u16),
            bufts,
            manual: HashMap::new(),
            assignments: Assignments::default(),
            scheduled: None,
            allocated: false,
            events: Vec::new(),
            stats: SchedStats::default(),
            timings: PassTimings::default(),
            eval: None,
            abort: None,
        })
    }

    /// A scheduler over `devices` with op offload on everywhere.
    pub fn with_devices(devices: &[Arc<dyn Device>], config: SchedConfig) -> Result<Scheduler> {
        Scheduler::new(
            devices
                .iter()
                .map(|d| BackendSpec::new(d.clone()))
                .collect(),
            config,
        )
    }

    /// Number of backends; every [`BackendId`] is below it.
    pub fn n_backends(&self) -> usize {
        self.infos.len()
    }

    /// The device of backend `b`. Panics if `b` is not one of this
    /// scheduler's backends.
    pub fn device(&self, b: BackendId) -> &Arc<dyn Device> {
        &self.infos[b.index()].device
    }

    /// The backend of the device named `name`.
    pub fn backend_named(&self, name: &str) -> Option<BackendId> {
        self.infos
            .iter()
            .position(|i| i.device.name() == name)
            .map(|i| BackendId(i as u16))
    }

    /// The first CPU backend in the list: graph inputs start there.
    pub fn host(&self) -> BackendId {
        self.host
    }

    /// The settings the scheduler was made with.
    pub fn config(&self) -> &SchedConfig {
        &self.config
    }

    /// Places `id` on `b` in the next split, whatever the passes would say.
    pub fn set_tensor_backend(&mut self, id: TensorId, b: BackendId) -> Result<()> {
        if b.index() >= self.infos.len() {
            return Err(Error::InvalidArgument(format!(
                "backend {} does not exist ({} backends)",
                b.0,
                self.infos.len()
            )));
        }
        self.manual.insert(id, b);
        Ok(())
    }

    /// Forgets manual placements.
    pub fn reset(&mut self) {
        self.manual.clear();
    }

    /// Observes node outputs during later runs (ggml's
    /// `ggml_backend_sched_set_eval_callback`); `None` removes the callback.
    pub fn set_eval_callback(&mut self, cb: Option<Box<dyn EvalCallback>>) {
        self.eval = cb;
    }

    /// Asked between splits of later runs whether to stop; `None` removes
    /// the callback.
    pub fn set_abort_callback(&mut self, cb: Option<AbortCallback>) {
        self.abort = cb;
    }

    /// Runs the four passes on `graph`; the result becomes the scheduler's
    /// graph (the same tensor ids, plus transfers). The scheduler takes the
    /// graph: read and write its tensors through [`Scheduler::graph`].
    pub fn split_graph(&mut self, mut graph: Graph) -> Result<&[Split]> {
        let _span = tracing::debug_span!("split_graph", nodes = graph.nodes().len()).entered();
        graph.validate()?;
        let rewrite = {
            let _s = tracing::trace_span!("pass 0: row split").entered();
            passes::row_split::rewrite_row_split(&mut graph)?
        };
        if rewrite.rewritten > 0 {
            graph.validate()?;
        }
        let ctx = PassContext::new(
            &graph,
            &self.infos,
            self.host,
            &self.config.offload_policy,
            &self.bufts,
        );
        let mut asg = std::mem::take(&mut self.assignments);
        asg.reset(graph.n_tensors());
        let t0 = Instant::now();
        passes::row_split::place_gathers(&ctx, &mut asg, &rewrite);
        {
            let _s = tracing::trace_span!("pass 1: weights location").entered();
            passes::weights_location::weights_location(&ctx, &mut asg, &self.manual)?;
        }
        let t1 = Instant::now();
        let single = self.infos.len() == 1;
        if single {
            passes::single::assign_rest(&ctx, &mut asg)?;
        } else {
            let _s = tracing::trace_span!("pass 2: expansion").entered();
            passes::expansion::expansion(&ctx, &mut asg);
        }
        let t2 = Instant::now();
        if !single {
            let _s = tracing::trace_span!("pass 3: upgrade").entered();
            passes::upgrade::upgrade(&ctx, &mut asg)?;
        }
        let t3 = Instant::now();
        let scheduled = if single {
            drop(ctx);
            passes::single::one_split(graph)
        } else {
            let _s = tracing::trace_span!("pass 4: copy insertion").entered();
            let plan =
                passes::copy_insertion::copy_insertion(&ctx, &mut asg, self.config.n_copies)?;
            drop(ctx);
            passes::copy_insertion::apply(graph, plan)
        };
        let t4 = Instant::now();
        if tracing::enabled!(tracing::Level::DEBUG) {
            self.log_passes(&rewrite, [t0, t1, t2, t3, t4], &scheduled);
        }
        self.timings = PassTimings {
            weights_location: t1 - t0,
            expansion: t2 - t1,
            upgrade: t3 - t2,
            copy_insertion: t4 - t3,
        };
        self.stats.splits = scheduled.splits.len();
        self.stats.copies = scheduled.splits.iter().map(|s| s.inputs.len()).sum();
        self.stats.graphs_split += 1;
        self.events = vec![vec![None; self.config.n_copies]; scheduled.splits.len()];
        self.assignments = asg;
        self.scheduled = Some(scheduled);
        self.allocated = false;
        Ok(&self.scheduled.as_ref().expect("just set").splits)
    }

    /// The passes' outcome and every split, as debug events (`RUST_LOG=
    /// ggraph=debug` or `-vv` in the tools).
    fn log_passes(
        &self,
        rewrite: &passes::row_split::RowSplitRewrite,
        t: [Instant; 5],
        scheduled: &Scheduled,
    ) {
        let n = scheduled.graph.nodes().len();
        tracing::debug!(
            "pass 0 row split: {} mul_mat(s) rewritten",
            rewrite.rewritten
        );
        tracing::debug!("pass 1 weights location: {:?}", t[1] - t[0]);
        if self.infos.len() == 1 {
            tracing::debug!(
                "passes 2-4: one backend, every node on it: {n} nodes in one split ({:?})",
                t[4] - t[1]
            );
        } else {
            tracing::debug!("pass 2 expansion: {:?}", t[2] - t[1]);
            tracing::debug!("pass 3 upgrade: {:?}", t[3] - t[2]);
            tracing::debug!(
                "pass 4 copy insertion: {:?}; {n} nodes in {} split(s)",
                t[4] - t[3],
                scheduled.splits.len()
            );
        }
        for (i, s) in scheduled.splits.iter().enumerate() {
            tracing::debug!(
                "split {i}: {} nodes {}..{}, {} input copies ({})",
                self.infos[s.backend.index()].device.name(),
                s.nodes.start,
                s.nodes.end,
                s.inputs.len(),
                crate::util::format_bytes(s.bytes_copied())
            );
        }
    }

    /// Splits `graph` and sizes the compute memory of every backend for it
    /// (the worst case later graphs will fit).
    pub fn reserve(&mut self, graph: Graph) -> Result<()> {
        self.split_graph(graph)?;
        let host = self.host.index();
        let asg = &self.assignments;
        let assign = |id: TensorId| asg.get(id).map_or(host, |b| b.index());
        let g = &self.scheduled.as_ref().expect("split above").graph;
        self.allocator.reserve(g, &assign)
    }

    /// Splits `graph` and gives every tensor that needs it memory.
    pub fn alloc_graph(&mut self, graph: Graph) -> Result<()> {
        self.split_graph(graph)?;
        self.alloc_scheduled()
    }

    fn alloc_scheduled(&mut self) -> Result<()> {
        let host = self.host.index();
        let asg = &self.assignments;
        let assign = |id: TensorId| asg.get(id).map_or(host, |b| b.index());
        let scheduled = self.scheduled.as_mut().ok_or_else(|| {
            Error::InvalidArgument("no graph: call split_graph or alloc_graph first".into())
        })?;
        let before = self.allocator.stats().reallocations;
        self.allocator.alloc_graph(&mut scheduled.graph, &assign)?;
        self.stats.reallocations += self.allocator.stats().reallocations - before;
        self.allocated = true;
        Ok(())
    }

    /// Compute memory per backend, in bytes (what the allocator holds).
    pub fn compute_buffer_bytes(&self) -> Vec<u64> {
        self.allocator.buffer_bytes()
    }

    /// Whether a device lost compute memory of this scheduler
    /// ([`Buffer::lost`](crate::backend::Buffer::lost): a remote server
    /// that restarted).
    pub fn memory_lost(&self) -> bool {
        self.allocator.buffers().iter().flatten().any(|b| b.lost())
    }

    /// Allocates lost compute memory again
    /// ([`Buffer::restore`](crate::backend::Buffer::restore)) and drops the
    /// events of earlier runs, which may have died with it: the next run
    /// starts afresh. Returns the buffers restored; errors while their
    /// device cannot be reached (call again later).
    pub fn restore_memory(&mut self) -> Result<usize> {
        let mut restored = 0;
        for b in self.allocator.buffers().iter().flatten() {
            if b.lost() {
                b.restore()?;
                restored += 1;
            }
        }
        // what still runs elsewhere is waited for; the runs on the lost
        // memory can only report that they failed, as they did already
        for ev in self.events.iter_mut().flatten() {
            if let Some(ev) = ev.take()
                && let Err(e) = ev.synchronize()
            {
                tracing::debug!("an event of a run before the restore: {e}");
            }
        }
        for s in &mut self.streams {
            if let Err(e) = s.synchronize() {
                tracing::debug!("a stream's work before the restore: {e}");
            }
        }
        Ok(restored)
    }

    /// Compute memory per backend a graph needs, without allocating.
    pub fn measure(&mut self, graph: Graph) -> Result<Vec<u64>> {
        self.split_graph(graph)?;
        let host = self.host.index();
        let asg = &self.assignments;
        let assign = |id: TensorId| asg.get(id).map_or(host, |b| b.index());
        let g = &self.scheduled.as_ref().expect("split above").graph;
        self.allocator.measure(g, &assign)
    }

    /// The scheduled graph: the user's tensor ids are valid in it; write
    /// inputs and read outputs here. `None` before the first split.
    pub fn graph(&self) -> Option<&Graph> {
        self.scheduled.as_ref().map(|s| &s.graph)
    }

    /// [`Scheduler::graph`], to bind memory or set flags; `None` before the
    /// first split.
    pub fn graph_mut(&mut self) -> Option<&mut Graph> {
        self.scheduled.as_mut().map(|s| &mut s.graph)
    }

    /// The splits of the current graph, in execution order; empty before
    /// the first split.
    pub fn splits(&self) -> &[Split] {
        self.scheduled.as_ref().map_or(&[], |s| &s.splits)
    }

    /// The backend a tensor of the scheduled graph runs on.
    pub fn backend_of(&self, id: TensorId) -> Option<BackendId> {
        self.assignments.get(id)
    }

    /// Why a tensor runs where it runs.
    pub fn cause_of(&self, id: TensorId) -> Option<&Cause> {
        self.assignments
            .cause
            .get(id.index())
            .and_then(|c| c.as_ref())
    }

    /// Counters of splits, copies and runs so far.
    pub fn stats(&self) -> SchedStats {
        self.stats
    }

    /// How long the last split took, per pass.
    pub fn pass_timings(&self) -> PassTimings {
        self.timings
    }

    /// The allocator's counters.
    pub fn alloc_stats(&self) -> crate::alloc::AllocStats {
        self.allocator.stats()
    }

    /// Runs the scheduled graph and waits for it.
    pub fn compute(&mut self) -> Result<()> {
        self.compute_async()?;
        self.synchronize()
    }

    /// Queues the scheduled graph's splits; `synchronize` waits for them.
    pub fn compute_async(&mut self) -> Result<()> {
        if self.config.dry_run {
            return Err(Error::InvalidArgument(
                "a dry-run scheduler plans only; it cannot compute".into(),
            ));
        }
        if !self.allocated {
            self.alloc_scheduled()?;
        } else {
            self.stats.graph_reuses += 1;
        }
        execute::run(self)
    }

    /// Waits for every backend.
    pub fn synchronize(&mut self) -> Result<()> {
        for s in &mut self.streams {
            s.synchronize()?;
        }
        Ok(())
    }
}
