//! A decoding context: a model, its KV cache and a scheduler, and the
//! decode loop that runs batches through them.
//!
//! For each ubatch: find cache cells and claim them, build the graph or
//! reuse the last one when the shape repeats, set the inputs, compute,
//! gather the logits. A failure rolls the cache back to what it held
//! before that ubatch and names what failed.

use std::sync::Arc;

use crate::arch::{
    Attention, GraphInputs, ModelGraph, PoolShape, Pooling, build_graph, mean_weights, picked_rows,
    pooled_seqs,
};
use crate::batch::{Batch, SaneBatch, UbatchSplit, sanitize, split};
use crate::kv::{SeqId, TokenPlace};
use crate::loaded::{LoadMode, Model};
use crate::memory::{KvMemoryParams, Memory, MemoryPlacement, PlaceError};
use ggraph_core::backend::Device;
use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::Graph;
use ggraph_core::sched::{BackendSpec, OffloadPolicy, SchedConfig, Scheduler};

/// Context settings.
#[derive(Clone, Debug)]
pub struct ContextParams {
    /// KV cells (all sequences together).
    pub n_ctx: usize,
    /// Most tokens one `decode` takes.
    pub n_batch: usize,
    /// Most tokens one graph computes.
    pub n_ubatch: usize,
    /// Sequences the cache tracks, ids `0..n_seq_max`; at most
    /// [`MAX_SEQS`](crate::kv::MAX_SEQS) (llama.cpp's `n_seq_max`).
    pub n_seq_max: usize,
    /// Standard or flash attention (llama.cpp's `flash_attn`); standard
    /// attention stores V transposed and so needs an unquantised `v_type`.
    pub attention: Attention,
    /// Type of the K cache (llama.cpp's `type_k`, `--cache-type-k`).
    pub k_type: DType,
    /// Type of the V cache (llama.cpp's `type_v`, `--cache-type-v`).
    pub v_type: DType,
    /// How a batch is cut into ubatches of at most `n_ubatch` tokens.
    pub ubatch_split: UbatchSplit,
    /// Attention looks at the used cells rounded up to this.
    pub n_kv_pad: usize,
    /// Pipeline depth of the scheduler.
    pub n_copies: usize,
    /// When an op whose weight is in host memory runs on a device instead
    /// (ggml's op offload).
    pub offload_policy: OffloadPolicy,
    /// Also keep the embeddings of the output tokens: the output norm's
    /// result, n_embd values per token (llama.cpp's embeddings), or with
    /// pooling one vector per sequence ([`Context::embeddings_seq`]).
    /// Always on for a model without logits (an embedding model).
    pub embeddings: bool,
    /// How embeddings are pooled (llama.cpp's `pooling_type`); None: the
    /// model's own (`{arch}.pooling_type`). Pooled embeddings are computed
    /// instead of logits, from every token of the batch.
    pub pooling: Option<Pooling>,
    /// Sliding-window layers keep every cell, in the main cache (llama.cpp's
    /// `--swa-full`); else they have a cache of their own, of the window
    /// times the sequences plus a ubatch, whose cells out of the window are
    /// reused.
    pub swa_full: bool,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_batch: 2048,
            n_ubatch: 512,
            n_seq_max: 1,
            attention: Attention::Flash,
            k_type: DType::F16,
            v_type: DType::F16,
            ubatch_split: UbatchSplit::Simple,
            n_kv_pad: 256,
            n_copies: 1,
            offload_policy: OffloadPolicy::Device,
            embeddings: false,
            pooling: None,
            swa_full: false,
        }
    }
}

/// Why a decode failed. The cache holds what it held before the ubatch
/// that failed (earlier ubatches of the batch stay decoded).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The batch has more than `n_batch` tokens, a token outside the
    /// vocabulary, inconsistent lengths, or positions that do not continue
    /// their sequences ([`sanitize`]).
    #[error("invalid batch: {0}")]
    InvalidBatch(Error),
    /// No free cells for a ubatch (llama.cpp's `llama_decode` returning 1):
    /// remove sequences, or make the context with a larger `n_ctx`.
    #[error("the KV cache is full: {needed} cells needed, {free} free")]
    CacheFull {
        /// Cells the ubatch needs, one per token.
        needed: usize,
        /// Cells not in use in the cache.
        free: usize,
    },
    /// A device ran out of memory for the ubatch's graph.
    #[error("allocation failed: {0}")]
    Alloc(Error),
    /// Building the graph, setting its inputs, computing or reading the
    /// logits back failed (or shifting the cache before the batch).
    #[error("compute failed: {0}")]
    Compute(Error),
    /// The scheduler's abort callback stopped the compute
    /// ([`Scheduler::set_abort_callback`]).
    #[error("aborted")]
    Aborted,
    /// The logits hold a NaN or an infinity: a weight, a norm's epsilon
    /// or an input of the model does (the batch is rolled back).
    #[error(
        "the logits of batch token {token} are not finite ({value}): a weight, a norm's epsilon \
         or an input of the model holds a NaN or an infinity"
    )]
    NotFinite {
        /// The batch index of the first output row with such a value.
        token: usize,
        /// The value.
        value: f32,
    },
    /// A device lost KV cache memory (a remote server that restarted), so
    /// every sequence lost its past: [`Context::recover`] empties the
    /// cache and makes the context usable again.
    #[error(
        "the KV cache lost its memory in {0} (the device restarted or dropped the connection): \
         Context::recover empties the cache, then decode the sequences again from their start"
    )]
    CacheLost(String),
}

/// What [`Context::recover`] brought back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Weight bytes uploaded again.
    pub weight_bytes: u64,
    /// Compute buffers allocated again.
    pub compute_buffers: usize,
    /// Whether the KV cache had lost memory and was emptied.
    pub cache_cleared: bool,
}

/// The shape a graph was built for; the same shape reuses the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GraphKey {
    n_tokens: usize,
    n_outputs: usize,
    /// Cells the graph reads in the main cache and in the
    /// sliding-window cache (0 without one).
    n_kv: (usize, usize),
    /// Sequences of the ubatch, for the recurrent layers (1 without).
    n_seqs: usize,
    embeddings: bool,
    /// Sequences pooled (0: not pooled).
    n_pooled: usize,
}

struct Built {
    key: GraphKey,
    inputs: GraphInputs,
    logits: Option<ggraph_core::ir::TensorId>,
    embeddings: ggraph_core::ir::TensorId,
}

/// How one ubatch's graph is split.
#[derive(Clone, Debug)]
pub struct SplitReport {
    /// Splits: runs of consecutive nodes on one backend.
    pub splits: usize,
    /// Split inputs copied from another backend, all splits together.
    pub copies: usize,
    /// Bytes moved between devices per run of the graph.
    pub bytes_copied: u64,
    /// The scheduled graph in Graphviz DOT: nodes coloured by backend, one
    /// cluster per split.
    pub dot: String,
    /// As text: each node's backend and why, each split's inputs and the
    /// bytes they copy.
    pub explain: String,
}

/// Counters of the decode loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextStats {
    /// Ubatches computed.
    pub ubatches: u64,
    /// Ubatches whose graph was built and allocated afresh (a new shape).
    pub graphs_built: u64,
    /// Ubatches that reused the previous ubatch's graph (the same shape).
    pub graphs_reused: u64,
    /// Tokens decoded (written to the cache).
    pub tokens: u64,
}

/// A model, a cache and a scheduler.
pub struct Context {
    model: Arc<Model>,
    /// The settings the context was made with; its caches and reserved
    /// compute memory were sized from them.
    pub params: ContextParams,
    /// The attention layers' caches and the recurrent layers' state.
    memory: Memory,
    sched: Scheduler,
    /// Runs the cache's own graphs (shifts, defragmentation) over the same
    /// devices, so that they do not disturb the decode graph's plan.
    side: Scheduler,
    built: Option<Built>,
    /// Logits of the last decode, one row of n_vocab per output token.
    logits: Vec<f32>,
    /// Embeddings of the last decode (with `params.embeddings`), one row
    /// of n_embd per output token.
    embeddings: Vec<f32>,
    /// Batch index of each logits (and embeddings) row.
    output_ids: Vec<usize>,
    /// Pooled embeddings of the last decode, per sequence.
    pooled: Vec<(SeqId, Vec<f32>)>,
    stats: ContextStats,
}

impl Context {
    /// A context over `model`: the cache on each layer's KV device, the
    /// scheduler over the model's devices then the CPU, and the compute
    /// memory reserved for the worst-case ubatch.
    pub fn new(model: Arc<Model>, mut params: ContextParams) -> Result<Context> {
        let c = &model.config;
        // a model without logits computes nothing else
        params.embeddings |= c.arch.embeddings_only;
        if params.n_ubatch == 0 || params.n_batch == 0 || params.n_ctx == 0 {
            return Err(Error::InvalidArgument(
                "n_ctx, n_batch and n_ubatch must be positive".into(),
            ));
        }
        let memory = Memory::new(
            c,
            KvMemoryParams {
                n_ctx: params.n_ctx,
                n_seq_max: params.n_seq_max,
                n_ubatch: params.n_ubatch,
                k_type: params.k_type,
                v_type: params.v_type,
                attention: params.attention,
                swa_full: params.swa_full,
            },
            &|il| model.kv_buffer_type(il),
        )?;
        let backends = |op_offload: bool| -> Vec<BackendSpec> {
            model
                .devices
                .iter()
                .chain([&model.cpu])
                .map(|d| BackendSpec::new(d.clone()).op_offload(op_offload))
                .collect()
        };
        let sched = Scheduler::new(
            backends(model.plan.op_offload),
            SchedConfig {
                n_copies: params.n_copies,
                offload_policy: params.offload_policy.clone(),
                dry_run: model.mode == LoadMode::DryRun,
                ..SchedConfig::default()
            },
        )?;
        let side = Scheduler::new(
            backends(true),
            SchedConfig {
                dry_run: model.mode == LoadMode::DryRun,
                ..SchedConfig::default()
            },
        )?;
        let mut ctx = Context {
            model,
            params,
            memory,
            sched,
            side,
            built: None,
            logits: Vec::new(),
            embeddings: Vec::new(),
            output_ids: Vec::new(),
            pooled: Vec::new(),
            stats: ContextStats::default(),
        };
        let n_worst = match ctx.memory.keeps_nothing() {
            true => ctx.params.n_ubatch,
            false => ctx.params.n_ubatch.min(ctx.params.n_ctx),
        };
        let pooled = ctx.pooling().pools();
        let worst = ctx.build(GraphKey {
            n_tokens: n_worst,
            n_outputs: n_worst,
            n_kv: ctx.memory.n_kv_max(),
            n_seqs: 1,
            embeddings: ctx.params.embeddings,
            n_pooled: if pooled {
                ctx.params.n_seq_max.min(n_worst)
            } else {
                0
            },
        })?;
        ctx.sched.reserve(worst.graph)?;
        Ok(ctx)
    }

    /// How the embeddings are pooled: the context's pooling or the
    /// model's, with `params.embeddings`; [`Pooling::None`] without.
    pub fn pooling(&self) -> Pooling {
        match self.params.embeddings {
            true => self.params.pooling.unwrap_or(self.model.config.pooling),
            false => Pooling::None,
        }
    }

    /// The model it decodes (shared: several contexts may use one model).
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The scheduler of the decode graphs: the last graph's splits and
    /// assignments, and the compute buffers.
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// The same, mutable: to set an abort callback, for instance.
    pub fn scheduler_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }

    /// Counters since the context was made.
    pub fn stats(&self) -> ContextStats {
        self.stats
    }

    /// Compute memory per backend of the scheduler (in its order: the
    /// model's devices, then the CPU).
    pub fn compute_bytes(&self) -> Vec<u64> {
        self.sched.compute_buffer_bytes()
    }

    /// The attention layers' caches and the recurrent layers' state.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Cells of the main cache that hold a token (what a server reports
    /// as its cache use, against `params.n_ctx`).
    pub fn cells_used(&self) -> usize {
        self.memory.cells_used()
    }

    /// Cells of the main cache in all: what [`Context::cells_used`] counts
    /// against (at least `params.n_ctx`).
    pub fn cells_total(&self) -> usize {
        self.memory.cells_total()
    }

    /// The lowest position of sequence `s` that every cache still holds,
    /// as llama.cpp's `llama_memory_seq_pos_min`: a sliding-window cache
    /// forgets a sequence's oldest tokens, so a sequence cut back to
    /// `n` tokens can go on only while this is at most `n - n_swa`.
    pub fn seq_pos_min(&self, s: SeqId) -> Option<i32> {
        self.memory.seq_pos_min(s)
    }

    /// The context of one sequence, as llama.cpp counts it for LongRoPE.
    fn n_ctx_seq(&self) -> usize {
        self.params.n_ctx / self.params.n_seq_max.max(1)
    }

    fn build(&mut self, key: GraphKey) -> Result<ModelGraph> {
        let shape = self
            .memory
            .shape(
                key.n_tokens,
                key.n_outputs,
                key.n_kv,
                key.n_seqs,
                self.params.attention,
            )
            .with_ctx_per_seq(self.n_ctx_seq());
        let shape = match key.n_pooled {
            0 => shape,
            n_seqs => shape.with_pooling(PoolShape {
                pooling: self.pooling(),
                n_seqs,
            }),
        };
        let model = self.model.clone();
        let mut source = self.memory.source();
        let mut lg = build_graph(&model.config, &shape, &mut &*model, &mut source)?;
        if key.embeddings && lg.logits.is_some() {
            // kept, not overwritten by later nodes, to be read back
            lg.graph.set_output(lg.embeddings)?;
        }
        Ok(lg)
    }

    /// How the scheduler splits the graph of a ubatch of `n_tokens` (all
    /// outputs) over `n_kv` cells: splits, copies and bytes moved per run,
    /// and the graph in DOT. Plans only; the next decode builds afresh.
    pub fn split_report(&mut self, n_tokens: usize, n_kv: usize) -> Result<SplitReport> {
        let key = GraphKey {
            n_tokens,
            n_outputs: n_tokens,
            n_kv: self.memory.n_kv_clamped(n_kv, n_tokens),
            n_seqs: 1,
            embeddings: self.params.embeddings,
            n_pooled: if self.pooling().pools() { 1 } else { 0 },
        };
        let lg = self.build(key)?;
        self.built = None;
        let splits = self.sched.split_graph(lg.graph)?;
        let report = SplitReport {
            splits: splits.len(),
            copies: splits.iter().map(|s| s.inputs.len()).sum(),
            bytes_copied: splits.iter().map(|s| s.bytes_copied()).sum(),
            dot: self.sched.to_dot(),
            explain: self.sched.explain(),
        };
        Ok(report)
    }

    /// Logits of the last decode's outputs, n_vocab per row.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The logits of batch token `i` (if it was an output).
    pub fn logits_of(&self, i: usize) -> Option<&[f32]> {
        let v = self.model.config.n_vocab;
        let row = self.output_ids.iter().position(|&x| x == i)?;
        self.logits.get(row * v..(row + 1) * v)
    }

    /// Embeddings of the last decode's outputs (with `params.embeddings`;
    /// empty otherwise), n_embd per row, in the order of `logits`.
    pub fn embeddings(&self) -> &[f32] {
        &self.embeddings
    }

    /// The embeddings of batch token `i` (if it was an output and
    /// `params.embeddings` is set).
    pub fn embeddings_of(&self, i: usize) -> Option<&[f32]> {
        let n = self.model.config.n_embd;
        let row = self.output_ids.iter().position(|&x| x == i)?;
        self.embeddings.get(row * n..(row + 1) * n)
    }

    /// The pooled embedding of sequence `s` in the last decode (with
    /// `params.embeddings` and a pooling): n_embd values, or a reranker's
    /// `n_cls_out` scores.
    pub fn embeddings_seq(&self, s: SeqId) -> Option<&[f32]> {
        self.pooled
            .iter()
            .find(|(id, _)| *id == s)
            .map(|(_, v)| v.as_slice())
    }

    /// Decodes a batch: the cache grows by its tokens and the logits (and
    /// with `params.embeddings` the embeddings) of its output tokens are
    /// kept. With pooling, every token counts as an output and each
    /// sequence's pooled embedding is kept instead of logits. A model that
    /// keeps no memory takes a batch of at most `n_ubatch` tokens, which
    /// is one ubatch, and keeps nothing of it.
    ///
    /// Memory a device lost since the last decode (a remote server that
    /// restarted) is restored first when only weights and compute memory
    /// were lost; a lost KV cache is [`DecodeError::CacheLost`] instead,
    /// until [`Context::recover`].
    pub fn decode(&mut self, batch: &Batch) -> std::result::Result<(), DecodeError> {
        if self.memory_lost() {
            if let Some(lost) = self.memory.lost() {
                return Err(DecodeError::CacheLost(lost.to_string()));
            }
            self.recover().map_err(DecodeError::Compute)?;
        }
        if batch.tokens.len() > self.params.n_batch {
            return Err(DecodeError::InvalidBatch(Error::InvalidArgument(format!(
                "batch of {} tokens; n_batch is {}",
                batch.tokens.len(),
                self.params.n_batch
            ))));
        }
        let sane = sanitize(batch, self.memory.cells(), self.model.config.n_vocab)
            .map_err(DecodeError::InvalidBatch)?;
        self.check_learned_positions(&sane)
            .map_err(DecodeError::InvalidBatch)?;
        self.memory
            .check_places(&sane.places)
            .map_err(DecodeError::InvalidBatch)?;
        // recurrent state is read per sequence: equal runs of one each
        let how = match self.params.ubatch_split {
            UbatchSplit::Simple if self.memory.needs_equal_split() => UbatchSplit::Equal,
            how => how,
        };
        if self.memory.keeps_nothing() && batch.tokens.len() > self.params.n_ubatch {
            return Err(DecodeError::InvalidBatch(Error::InvalidArgument(format!(
                "batch of {} tokens; a {} model sees a batch at once, in one ubatch of at most \
                 n_ubatch {} tokens",
                batch.tokens.len(),
                self.model.config.arch.name,
                self.params.n_ubatch
            ))));
        }
        let ubatches =
            split(&sane, self.params.n_ubatch, how).map_err(DecodeError::InvalidBatch)?;
        self.check_pooled_split(&sane, &ubatches)
            .map_err(DecodeError::InvalidBatch)?;
        self.logits.clear();
        self.embeddings.clear();
        self.output_ids.clear();
        self.pooled.clear();
        if self.memory.has_shift() {
            self.apply_shift().map_err(DecodeError::Compute)?;
        }
        for ub in ubatches {
            self.decode_ubatch(&sane, &ub)?;
        }
        self.outputs_in_batch_order();
        Ok(())
    }

    /// An encoder's positions index its learned position embeddings: each
    /// must be below the context it was trained for.
    fn check_learned_positions(&self, batch: &SaneBatch) -> Result<()> {
        let c = &self.model.config;
        if !c.arch.encoder {
            return Ok(());
        }
        match batch
            .places
            .iter()
            .position(|p| p.pos as usize >= c.n_ctx_train)
        {
            Some(i) => Err(Error::InvalidArgument(format!(
                "token {i} is at position {}; a {} model learned {} positions (its context_length)",
                batch.places[i].pos, c.arch.name, c.n_ctx_train
            ))),
            None => Ok(()),
        }
    }

    /// Pooling a sequence's mean or first token needs all of it in one
    /// ubatch (the last token's row may come from the last ubatch).
    fn check_pooled_split(&self, batch: &SaneBatch, ubatches: &[Vec<usize>]) -> Result<()> {
        let pooling = self.pooling();
        if !pooling.pools() || pooling == Pooling::Last || ubatches.len() < 2 {
            return Ok(());
        }
        let seqs_of = |ub: &Vec<usize>| ub.iter().fold(0u64, |a, &i| a | batch.places[i].seqs);
        let mut seen = 0u64;
        for ub in ubatches {
            let seqs = seqs_of(ub);
            if let Some(s) = (0..64).find(|s| (seen & seqs) >> s & 1 == 1) {
                return Err(Error::InvalidArgument(format!(
                    "sequence {s} spans several ubatches of at most n_ubatch {} tokens; {} \
                     pooling needs each sequence in one",
                    self.params.n_ubatch,
                    pooling.name()
                )));
            }
            seen |= seqs;
        }
        Ok(())
    }

    /// Puts the output rows in the order of their tokens in the batch
    /// (an equal split decodes sequences' tokens out of order), as
    /// llama.cpp orders its outputs.
    fn outputs_in_batch_order(&mut self) {
        if self.output_ids.is_sorted() {
            return;
        }
        let mut order: Vec<usize> = (0..self.output_ids.len()).collect();
        order.sort_by_key(|&r| self.output_ids[r]);
        let permute = |rows: &[f32], width: usize| -> Vec<f32> {
            order
                .iter()
                .flat_map(|&r| &rows[r * width..(r + 1) * width])
                .copied()
                .collect()
        };
        self.logits = permute(&self.logits, self.model.config.n_vocab);
        if !self.embeddings.is_empty() {
            self.embeddings = permute(&self.embeddings, self.model.config.n_embd);
        }
        self.output_ids = order.iter().map(|&r| self.output_ids[r]).collect();
    }

    /// The highest position sequence `s` holds in the cache, if any (as
    /// llama.cpp's `llama_memory_seq_pos_max`).
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        self.memory.seq_pos_max(s)
    }

    /// Whether a device lost memory of this context or its model
    /// ([`Buffer::lost`](ggraph_core::backend::Buffer::lost): a remote
    /// server that restarted, or whose connection dropped).
    pub fn memory_lost(&self) -> bool {
        self.memory.lost().is_some()
            || self.model.weights_lost()
            || self.sched.memory_lost()
            || self.side.memory_lost()
    }

    /// Brings the context back after a device lost its memory (a remote
    /// server that restarted, or whose connection dropped): allocates that
    /// memory again on the device, uploads the weights it held from the
    /// model's file, and, if KV cache memory was lost, empties the cache
    /// (every sequence then starts again from its first token). Errors
    /// while the device cannot be reached; the context stays lost, and a
    /// later call goes on where this one stopped.
    pub fn recover(&mut self) -> Result<Recovery> {
        let weight_bytes = self.model.restore_weights()?;
        let compute_buffers = self.sched.restore_memory()? + self.side.restore_memory()?;
        let cache_cleared = self.memory.restore()?;
        Ok(Recovery {
            weight_bytes,
            compute_buffers,
            cache_cleared,
        })
    }

    fn decode_ubatch(
        &mut self,
        batch: &SaneBatch,
        ub: &[usize],
    ) -> std::result::Result<(), DecodeError> {
        let places: Vec<TokenPlace> = ub.iter().map(|&i| batch.places[i]).collect();
        let placement = self.memory.place(&places).map_err(|e| match e {
            PlaceError::Full { needed, free } => DecodeError::CacheFull { needed, free },
            PlaceError::Invalid(e) => DecodeError::InvalidBatch(e),
        })?;
        match self.run_ubatch(batch, ub, &places, &placement) {
            Ok(()) => {
                self.memory.commit(placement);
                Ok(())
            }
            Err(e) => {
                self.memory.rollback(placement);
                Err(e)
            }
        }
    }

    fn run_ubatch(
        &mut self,
        batch: &SaneBatch,
        ub: &[usize],
        places: &[TokenPlace],
        placement: &MemoryPlacement,
    ) -> std::result::Result<(), DecodeError> {
        let pooling = self.pooling();
        let outputs: Vec<usize> = match pooling.pools() {
            true => ub.to_vec(),
            false => ub.iter().copied().filter(|&i| batch.outputs[i]).collect(),
        };
        // the ubatch's sequences, in pooling order (none without pooling)
        let seqs = match pooling.pools() {
            true => pooled_seqs(places),
            false => Vec::new(),
        };
        let key = GraphKey {
            n_tokens: ub.len(),
            n_outputs: outputs.len().max(1),
            n_kv: self.memory.n_kv(self.params.n_kv_pad, ub.len()),
            n_seqs: placement.n_seqs(),
            embeddings: self.params.embeddings,
            n_pooled: seqs.len(),
        };
        if self.built.as_ref().is_some_and(|b| b.key == key) {
            self.stats.graphs_reused += 1;
        } else {
            self.built = None;
            let lg = self.build(key).map_err(DecodeError::Compute)?;
            let inputs = lg.inputs.clone();
            let logits = lg.logits;
            let embeddings = lg.embeddings;
            self.sched.alloc_graph(lg.graph).map_err(|e| {
                if e.is_out_of_memory() {
                    DecodeError::Alloc(e)
                } else {
                    DecodeError::Compute(e)
                }
            })?;
            self.built = Some(Built {
                key,
                inputs,
                logits,
                embeddings,
            });
            self.stats.graphs_built += 1;
        }
        let built = self.built.as_ref().expect("set above");
        let g = self.sched.graph().expect("allocated");
        self.set_inputs(
            g,
            &built.inputs,
            batch,
            ub,
            places,
            placement,
            &outputs,
            key,
        )
        .map_err(DecodeError::Compute)?;
        match self.sched.compute() {
            Ok(()) => {}
            Err(Error::Aborted) => return Err(DecodeError::Aborted),
            Err(e) if e.is_out_of_memory() => return Err(DecodeError::Alloc(e)),
            Err(e) => return Err(DecodeError::Compute(e)),
        }
        let g = self.sched.graph().expect("allocated");
        let v = self.model.config.n_vocab;
        // a ubatch without outputs computed one row it does not keep
        let rows = if outputs.is_empty() { 0 } else { outputs.len() };
        if pooling.pools() {
            let e = g.read_f32(built.embeddings).map_err(DecodeError::Compute)?;
            let width = e.len() / seqs.len().max(1);
            for (k, &s) in seqs.iter().enumerate() {
                let row = e[k * width..(k + 1) * width].to_vec();
                match self.pooled.iter_mut().find(|(id, _)| *id == s) {
                    Some((_, v)) => *v = row,
                    None => self.pooled.push((s, row)),
                }
            }
            self.stats.ubatches += 1;
            self.stats.tokens += ub.len() as u64;
            return Ok(());
        }
        if let (Some(logits), true) = (built.logits, rows > 0) {
            // straight into the kept logits: their memory is reused from
            // token to token
            let start = self.logits.len();
            self.logits.resize(start + rows * v, 0.0);
            if let Err(e) = g.read_f32_into(logits, &mut self.logits[start..]) {
                self.logits.truncate(start);
                return Err(DecodeError::Compute(e));
            }
            if let Some(at) = self.logits[start..].iter().position(|x| !x.is_finite()) {
                let value = self.logits[start + at];
                self.logits.truncate(start);
                return Err(DecodeError::NotFinite {
                    token: outputs[at / v],
                    value,
                });
            }
        }
        if key.embeddings {
            let e = g.read_f32(built.embeddings).map_err(DecodeError::Compute)?;
            let n = self.model.config.n_embd;
            self.embeddings.extend_from_slice(&e[..rows * n]);
        }
        self.output_ids.extend(outputs);
        self.stats.ubatches += 1;
        self.stats.tokens += ub.len() as u64;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn set_inputs(
        &self,
        g: &Graph,
        inputs: &GraphInputs,
        batch: &SaneBatch,
        ub: &[usize],
        places: &[TokenPlace],
        placement: &MemoryPlacement,
        outputs: &[usize],
        key: GraphKey,
    ) -> Result<()> {
        let tokens: Vec<i32> = ub.iter().map(|&i| batch.tokens[i]).collect();
        g.write_i32(inputs.tokens, &tokens)?;
        // a model whose layers all convolve reads no positions: the
        // input then has no memory
        if g.get(inputs.positions)?.data.is_some() {
            let pos: Vec<i32> = places.iter().map(|p| p.pos).collect();
            g.write_i32(inputs.positions, &pos)?;
        }
        self.memory.set_inputs(
            g,
            inputs,
            places,
            placement,
            key.n_kv,
            self.model.config.n_swa,
        )?;
        if let Some(o) = inputs.out_ids {
            let rows: Vec<i32> = if outputs.is_empty() {
                vec![(ub.len() - 1) as i32]
            } else {
                outputs
                    .iter()
                    .map(|&i| ub.iter().position(|&x| x == i).expect("in ubatch") as i32)
                    .collect()
            };
            g.write_i32(o, &rows)?;
        }
        let pooling = &inputs.pooling;
        if pooling.mean.is_some() || pooling.rows.is_some() {
            let seqs = pooled_seqs(places);
            if let Some(m) = pooling.mean {
                g.write_f32(m, &mean_weights(places, &seqs))?;
            }
            if let Some(r) = pooling.rows {
                let causal = self.model.config.causal;
                g.write_i32(r, &picked_rows(places, &seqs, self.pooling(), causal))?;
            }
        }
        Ok(())
    }

    /// Rotates K by every cell's pending shift, in every cache.
    fn apply_shift(&mut self) -> Result<()> {
        let n_ctx_seq = self.n_ctx_seq();
        self.memory
            .apply_shift(&mut self.side, &self.model, n_ctx_seq)
    }

    /// Packs the used cells at the front of each cache: runs the moves
    /// on every layer's K and V through a scheduler, then updates the
    /// cells. Returns the number of cells moved.
    pub fn defragment(&mut self) -> Result<usize> {
        let moved = self.memory.defragment(&mut self.side)?;
        if moved > 0 {
            // the next graph sees new cells: shapes may change
            self.built = None;
        }
        Ok(moved)
    }

    /// Removes sequence `s` (every sequence for `None`) from positions
    /// [p0, p1) of every cache.
    pub fn seq_rm(&mut self, s: Option<SeqId>, p0: Option<i32>, p1: Option<i32>) -> Result<()> {
        self.memory.seq_rm(s, p0, p1)
    }

    /// Adds sequence `dst` to the cells of `src` in [p0, p1), in every
    /// cache.
    pub fn seq_cp(
        &mut self,
        src: SeqId,
        dst: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
    ) -> Result<()> {
        self.memory.seq_cp(src, dst, p0, p1)
    }

    /// Keeps only sequence `s`, in every cache.
    pub fn seq_keep(&mut self, s: SeqId) -> Result<()> {
        self.memory.seq_keep(s)
    }

    /// Shifts the positions of sequence `s` in [p0, p1) by `delta` in
    /// every cache (K is rotated before the next decode).
    pub fn seq_add(
        &mut self,
        s: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
        delta: i32,
    ) -> Result<()> {
        self.memory.seq_add(s, p0, p1, delta)
    }

    /// Divides the positions of sequence `s` in [p0, p1) by `d` in every
    /// cache.
    pub fn seq_div(&mut self, s: SeqId, p0: Option<i32>, p1: Option<i32>, d: i32) -> Result<()> {
        self.memory.seq_div(s, p0, p1, d)
    }

    /// Empties every cache.
    pub fn clear_cache(&mut self) {
        self.memory.clear();
    }

    /// Bytes of KV cache memory per buffer type, every cache together.
    pub fn kv_bytes_per_buffer_type(&self) -> Vec<(String, u64)> {
        self.memory.bytes_per_buffer_type()
    }

    /// The devices the context runs on, GPU-class first, then the CPU.
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        let mut d = self.model.devices.clone();
        d.push(self.model.cpu.clone());
        d
    }
}
