//! The memory a context keeps for a model: the attention layers' caches,
//! and for a model with recurrent layers their state too (llama.cpp's
//! `llama_memory_hybrid`, and `llama_memory_hybrid_iswa` when the
//! attention layers slide). Each layer's kind comes from the model's
//! config. A ubatch is placed in both or in neither; a sequence operation
//! one part refuses changes neither.

use std::sync::Arc;

use ggraph_core::backend::BufferType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{Graph, GraphBuilder, TensorId};
use ggraph_core::sched::Scheduler;

use super::kv::{KvMemory, KvMemoryParams, KvPlacement, PlaceError};
use super::none::NoMemory;
use super::recurrent::{RecurrentMemory, RecurrentPlacement, pos_range};
use crate::arch::{Attention, BuildShape, GraphInputs, ModelConfig};
use crate::kv::{CacheSource, Cells, KvCache, KvLayout, SeqId, StatePart, TokenPlace, sum_by_name};
use crate::loaded::Model;

/// Where a ubatch went in each part of the memory.
#[derive(Debug)]
pub struct MemoryPlacement {
    kv: Option<KvPlacement>,
    recurrent: Option<RecurrentPlacement>,
}

impl MemoryPlacement {
    /// Sequences of the ubatch, as the recurrent layers see them (1
    /// without recurrent layers).
    pub fn n_seqs(&self) -> usize {
        self.recurrent
            .as_ref()
            .map_or(1, RecurrentPlacement::n_seqs)
    }
}

/// A context's memory (see the module's documentation).
pub struct Memory {
    attention: AttentionMemory,
    recurrent: Option<RecurrentMemory>,
}

/// What the attention layers keep: a KV cache, or nothing (an encoder).
enum AttentionMemory {
    Cache(Box<KvMemory>),
    None(NoMemory),
}

impl Memory {
    /// The memory of `config`'s layers: caches over its attention layers,
    /// state for its recurrent ones, each layer's in the buffer type
    /// `buffer_type(layer)` gives.
    pub fn new(
        config: &ModelConfig,
        p: KvMemoryParams,
        buffer_type: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<Memory> {
        let recurrent = if config.has_recurrent() {
            Some(RecurrentMemory::new(config, p.n_seq_max, buffer_type)?)
        } else {
            None
        };
        let attention = match config.arch.keeps_no_memory {
            true => AttentionMemory::None(NoMemory::new(config, p.n_seq_max)?),
            false => AttentionMemory::Cache(Box::new(KvMemory::new(config, p, buffer_type)?)),
        };
        Ok(Memory {
            attention,
            recurrent,
        })
    }

    /// The attention layers' caches (None for a model that keeps no
    /// memory).
    pub fn kv(&self) -> Option<&KvMemory> {
        match &self.attention {
            AttentionMemory::Cache(kv) => Some(kv),
            AttentionMemory::None(_) => None,
        }
    }

    /// Whether the model keeps nothing between batches: each batch is one
    /// ubatch that attends only to itself.
    pub fn keeps_nothing(&self) -> bool {
        matches!(self.attention, AttentionMemory::None(_))
    }

    /// The recurrent layers' state, for a model with such layers.
    pub fn recurrent(&self) -> Option<&RecurrentMemory> {
        self.recurrent.as_ref()
    }

    /// The cache of every attention layer, or of the full-attention ones
    /// when the sliding-window layers have their own.
    pub fn main(&self) -> Option<&KvCache> {
        self.kv().map(KvMemory::main)
    }

    /// The sliding-window layers' own cache, if they have one.
    pub fn swa(&self) -> Option<&KvCache> {
        self.kv().and_then(KvMemory::swa)
    }

    /// The main cache's cells: what a batch's positions continue (none
    /// without a cache).
    pub fn cells(&self) -> &Cells {
        match &self.attention {
            AttentionMemory::Cache(kv) => kv.cells(),
            AttentionMemory::None(none) => none.cells(),
        }
    }

    /// Cells of the main cache that hold a token.
    pub fn cells_used(&self) -> usize {
        self.kv().map_or(0, KvMemory::cells_used)
    }

    /// Cells of the main cache in all.
    pub fn cells_total(&self) -> usize {
        self.kv().map_or(0, KvMemory::cells_total)
    }

    /// Whether each ubatch must hold equal runs of one sequence each
    /// (recurrent state is read per sequence).
    pub fn needs_equal_split(&self) -> bool {
        self.recurrent.is_some()
    }

    /// Checks what every ubatch of a batch must be for this memory: with
    /// recurrent state, each token in one sequence.
    pub fn check_places(&self, places: &[TokenPlace]) -> Result<()> {
        if self.recurrent.is_some()
            && let Some(i) = places.iter().position(|p| p.seqs.count_ones() != 1)
        {
            return Err(Error::InvalidArgument(format!(
                "token {i} belongs to several sequences: the model's recurrent state is kept \
                 per sequence (decode shared tokens in one sequence, then seq_cp)"
            )));
        }
        Ok(())
    }

    /// The highest position of sequence `s` every part holds (llama.cpp's
    /// hybrid `seq_pos_max`: the smaller of the two).
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        let kv = self.kv()?.seq_pos_max(s);
        match &self.recurrent {
            Some(r) => kv.zip(r.seq_pos_max(s)).map(|(a, b)| a.min(b)),
            None => kv,
        }
    }

    /// The lowest position of sequence `s` every part still holds
    /// (llama.cpp's `llama_memory_seq_pos_min`: the larger of the two).
    pub fn seq_pos_min(&self, s: SeqId) -> Option<i32> {
        let kv = self.kv()?.seq_pos_min(s);
        match self.recurrent.as_ref().and_then(|r| r.seq_pos_min(s)) {
            Some(r) => Some(kv.map_or(r, |k| k.max(r))),
            None => kv,
        }
    }

    /// Places a ubatch's tokens in every part; nothing is placed when
    /// one part cannot take them.
    pub fn place(
        &mut self,
        places: &[TokenPlace],
    ) -> std::result::Result<MemoryPlacement, PlaceError> {
        let recurrent = match self.recurrent.as_mut() {
            Some(r) => Some(r.place(places)?),
            None => None,
        };
        let kv = match &mut self.attention {
            AttentionMemory::Cache(kv) => Some(kv.place(places)?),
            AttentionMemory::None(_) => None,
        };
        Ok(MemoryPlacement { kv, recurrent })
    }

    /// Keeps what a ubatch that succeeded wrote.
    pub fn commit(&mut self, p: MemoryPlacement) {
        if let (Some(r), Some(placed)) = (self.recurrent.as_mut(), p.recurrent) {
            r.commit(placed);
        }
    }

    /// Gives back what [`Memory::place`] took for a ubatch that failed.
    pub fn rollback(&mut self, p: MemoryPlacement) {
        if let (AttentionMemory::Cache(kv), Some(placed)) = (&mut self.attention, p.kv) {
            kv.rollback(placed);
        }
    }

    /// The cells a graph of `n_tokens` reads in each cache.
    pub fn n_kv(&self, pad: usize, n_tokens: usize) -> (usize, usize) {
        self.kv().map_or((n_tokens, 0), |kv| kv.n_kv(pad, n_tokens))
    }

    /// `n_kv` cells of `n_tokens` clamped to each cache's size.
    pub fn n_kv_clamped(&self, n_kv: usize, n_tokens: usize) -> (usize, usize) {
        self.kv()
            .map_or((n_tokens, 0), |kv| kv.n_kv_clamped(n_kv, n_tokens))
    }

    /// The largest cells a graph may read in each cache.
    pub fn n_kv_max(&self) -> (usize, usize) {
        self.kv().map_or((0, 0), KvMemory::n_kv_max)
    }

    /// The shape of a graph of `n_tokens` in `n_seqs` sequences reading
    /// `n_kv` cells of each cache.
    pub fn shape(
        &self,
        n_tokens: usize,
        n_outputs: usize,
        n_kv: (usize, usize),
        n_seqs: usize,
        attention: Attention,
    ) -> BuildShape {
        let shape = match &self.attention {
            AttentionMemory::Cache(kv) => kv.shape(n_tokens, n_outputs, n_kv, attention),
            AttentionMemory::None(none) => none.shape(n_tokens, n_outputs, attention),
        };
        match &self.recurrent {
            Some(r) => shape.with_recurrent(n_seqs, r.rows()),
            None => shape,
        }
    }

    /// The layers' cache and state tensors for a graph being built.
    pub fn source(&mut self) -> impl CacheSource + '_ {
        let kv = match &mut self.attention {
            AttentionMemory::Cache(kv) => Some(kv.source()),
            AttentionMemory::None(_) => None,
        };
        Sources {
            kv,
            recurrent: self.recurrent.as_ref(),
        }
    }

    /// Fills the memory's inputs of a graph.
    pub fn set_inputs(
        &self,
        g: &Graph,
        inputs: &GraphInputs,
        places: &[TokenPlace],
        placement: &MemoryPlacement,
        n_kv: (usize, usize),
        n_swa: usize,
    ) -> Result<()> {
        match (&self.attention, &placement.kv) {
            (AttentionMemory::Cache(kv), Some(p)) => {
                kv.set_inputs(g, inputs, places, p, n_kv, n_swa)?
            }
            (AttentionMemory::None(none), None) => none.set_inputs(g, inputs, places, n_swa)?,
            _ => {
                return Err(Error::InvalidArgument(
                    "the ubatch was placed in another memory".into(),
                ));
            }
        }
        match (&self.recurrent, &inputs.recurrent, &placement.recurrent) {
            (Some(r), Some(i), Some(p)) => r.set_inputs(g, i, p),
            (None, None, None) => Ok(()),
            _ => Err(Error::InvalidArgument(
                "the graph's recurrent inputs do not match the memory".into(),
            )),
        }
    }

    /// The buffer type of memory a device lost, if any.
    pub fn lost(&self) -> Option<&str> {
        (self.kv().and_then(KvMemory::lost))
            .or_else(|| self.recurrent.as_ref().and_then(RecurrentMemory::lost))
    }

    /// Allocates lost memory again; whether any was lost (every part is
    /// then emptied: a sequence's past lies in all of them).
    pub fn restore(&mut self) -> Result<bool> {
        let mut cleared = match &mut self.attention {
            AttentionMemory::Cache(kv) => kv.restore()?,
            AttentionMemory::None(_) => false,
        };
        if let Some(r) = self.recurrent.as_mut() {
            cleared |= r.restore()?;
        }
        if cleared {
            self.clear();
        }
        Ok(cleared)
    }

    /// Whether a cache has positions shifted and K not yet rotated.
    pub fn has_shift(&self) -> bool {
        self.kv().is_some_and(KvMemory::has_shift)
    }

    /// Rotates K by every cell's pending shift, on `side`.
    pub fn apply_shift(
        &mut self,
        side: &mut Scheduler,
        model: &Model,
        n_ctx_seq: usize,
    ) -> Result<()> {
        match &mut self.attention {
            AttentionMemory::Cache(kv) => kv.apply_shift(side, model, n_ctx_seq),
            AttentionMemory::None(_) => Ok(()),
        }
    }

    /// Packs the used cells at the front of each cache; the cells moved.
    pub fn defragment(&mut self, side: &mut Scheduler) -> Result<usize> {
        match &mut self.attention {
            AttentionMemory::Cache(kv) => kv.defragment(side),
            AttentionMemory::None(_) => Ok(0),
        }
    }

    /// Removes sequence `s` (every sequence for `None`) from positions
    /// [p0, p1); refused, changing nothing, when recurrent state would
    /// lose part of its past.
    pub fn seq_rm(&mut self, s: Option<SeqId>, p0: Option<i32>, p1: Option<i32>) -> Result<()> {
        if let Some(r) = &self.recurrent {
            r.check_rm(s, p0, p1)?;
        }
        if let Some(kv) = self.cache_mut() {
            kv.seq_rm(s, p0, p1)?;
        }
        if let Some(r) = self.recurrent.as_mut() {
            r.seq_rm(s, p0, p1)?;
        }
        Ok(())
    }

    /// Adds sequence `dst` to the cells of `src` in [p0, p1); with
    /// recurrent state the range must hold all of `src`'s past (a state
    /// is copied whole).
    pub fn seq_cp(
        &mut self,
        src: SeqId,
        dst: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
    ) -> Result<()> {
        if let Some(r) = &self.recurrent
            && let Some(last) = r.seq_pos_max(src)
        {
            let (lo, hi) = pos_range(p0, p1);
            if lo > 0 || hi <= last {
                return Err(Error::InvalidArgument(format!(
                    "seq_cp {src} -> {dst} of positions {lo}..{hi}: sequence {src}'s recurrent \
                     state is all of its past, 0..={last}, and is copied whole"
                )));
            }
        }
        if let Some(kv) = self.cache_mut() {
            kv.seq_cp(src, dst, p0, p1)?;
        }
        if let Some(r) = self.recurrent.as_mut() {
            r.seq_cp(src, dst)?;
        }
        Ok(())
    }

    /// Keeps only sequence `s`.
    pub fn seq_keep(&mut self, s: SeqId) -> Result<()> {
        if let Some(kv) = self.cache_mut() {
            kv.seq_keep(s)?;
        }
        if let Some(r) = self.recurrent.as_mut() {
            r.seq_keep(s);
        }
        Ok(())
    }

    /// Shifts the positions of sequence `s` in [p0, p1) by `delta`.
    pub fn seq_add(
        &mut self,
        s: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
        delta: i32,
    ) -> Result<()> {
        if let Some(kv) = self.cache_mut() {
            kv.seq_add(s, p0, p1, delta)?;
        }
        if let Some(r) = self.recurrent.as_mut() {
            r.seq_add(s, p0, p1, delta);
        }
        Ok(())
    }

    /// Divides the positions of sequence `s` in [p0, p1) by `d`.
    pub fn seq_div(&mut self, s: SeqId, p0: Option<i32>, p1: Option<i32>, d: i32) -> Result<()> {
        if let Some(kv) = self.cache_mut() {
            kv.seq_div(s, p0, p1, d)?;
        }
        if let Some(r) = self.recurrent.as_mut() {
            r.seq_div(s, p0, p1, d);
        }
        Ok(())
    }

    /// Empties every part.
    pub fn clear(&mut self) {
        if let Some(kv) = self.cache_mut() {
            kv.clear();
        }
        if let Some(r) = self.recurrent.as_mut() {
            r.clear();
        }
    }

    /// Bytes of memory per buffer type, every part together.
    pub fn bytes_per_buffer_type(&self) -> Vec<(String, u64)> {
        let state = self
            .recurrent
            .iter()
            .flat_map(|r| r.bytes_per_buffer_type());
        let kv = self.kv().map(KvMemory::bytes_per_buffer_type);
        sum_by_name(kv.into_iter().flatten().chain(state))
    }

    fn cache_mut(&mut self) -> Option<&mut KvMemory> {
        match &mut self.attention {
            AttentionMemory::Cache(kv) => Some(kv),
            AttentionMemory::None(_) => None,
        }
    }
}

/// The tensors a graph reads: each attention layer's cache and each
/// recurrent layer's state.
struct Sources<'a, K: CacheSource> {
    kv: Option<K>,
    recurrent: Option<&'a RecurrentMemory>,
}

impl<K: CacheSource> CacheSource for Sources<'_, K> {
    fn layer_cache(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        kv: &KvLayout,
        n_embd_kv: usize,
    ) -> Result<(TensorId, TensorId)> {
        match &mut self.kv {
            Some(caches) => caches.layer_cache(b, layer, kv, n_embd_kv),
            None => Err(Error::InvalidArgument(format!(
                "layer {layer} reads a KV cache, but the model keeps no memory"
            ))),
        }
    }

    fn layer_state(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        part: StatePart,
        n_embd_state: usize,
        rows: usize,
    ) -> Result<TensorId> {
        match self.recurrent {
            Some(r) => r.leaf(b, layer, part, n_embd_state, rows),
            None => Err(Error::InvalidArgument(format!(
                "layer {layer} keeps no recurrent state: the model has no recurrent layers"
            ))),
        }
    }
}
