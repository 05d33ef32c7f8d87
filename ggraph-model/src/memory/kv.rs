//! The attention layers' memory: a KV cache over every attention layer,
//! or over the full-attention layers with the sliding-window layers in a cache of
//! their own (sized to their window). Every sequence operation, slot
//! search and rollback goes to both caches together.

use std::sync::Arc;

use ggraph_core::backend::BufferType;
use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{Graph, GraphBuilder, TensorId};
use ggraph_core::sched::Scheduler;

use crate::arch::{Attention, BuildShape, GraphInputs, ModelConfig, rope_freq_factors};
use crate::kv::{
    CacheSource, Cells, KShift, KvCache, KvLayout, SeqId, Slot, TokenPlace, sum_by_name,
};
use crate::loaded::Model;

/// What sizes the attention memory.
#[derive(Clone, Copy, Debug)]
pub struct KvMemoryParams {
    /// Cells of the main cache (all sequences together).
    pub n_ctx: usize,
    /// Sequences it tracks.
    pub n_seq_max: usize,
    /// Most tokens a ubatch places (the sliding-window cache holds a
    /// ubatch beyond every sequence's window).
    pub n_ubatch: usize,
    /// K and V element types.
    pub k_type: DType,
    /// V element type.
    pub v_type: DType,
    /// How attention reads the cache (standard attention reads V
    /// transposed).
    pub attention: Attention,
    /// Sliding-window layers in the main cache with every cell (no cache
    /// of their own).
    pub swa_full: bool,
}

/// The cells a ubatch took in each cache, to roll back if it fails.
#[derive(Debug)]
pub struct KvPlacement {
    main: Slot,
    swa: Option<Slot>,
}

/// Why a ubatch found no place.
#[derive(Debug)]
pub enum PlaceError {
    /// Fewer free cells than tokens.
    Full {
        /// Cells the ubatch needs.
        needed: usize,
        /// Cells free.
        free: usize,
    },
    /// Tokens the cache cannot hold (sequence ids, positions).
    Invalid(Error),
}

/// The attention layers' memory (see the module's documentation).
pub struct KvMemory {
    main: KvCache,
    swa: Option<KvCache>,
}

impl KvMemory {
    /// The caches of `config`'s layers, each layer's K and V in the buffer
    /// type `buffer_type(layer)` gives.
    pub fn new(
        config: &ModelConfig,
        p: KvMemoryParams,
        buffer_type: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<KvMemory> {
        let layout = KvLayout {
            kv_size: p.n_ctx,
            k_type: p.k_type,
            v_type: p.v_type,
        };
        let separate_swa = config.has_swa() && !p.swa_full;
        let transposed_v = p.attention == Attention::Standard;
        let main = KvCache::new(
            config.n_layer,
            &|il| config.has_kv(il) && !(separate_swa && config.is_swa(il)),
            &|il| config.n_embd_kv_of(il),
            layout,
            transposed_v,
            p.n_seq_max,
            0,
            buffer_type,
        )?;
        let swa = if separate_swa {
            let swa_layout = KvLayout {
                kv_size: swa_cache_size(config.n_swa, &p),
                ..layout
            };
            Some(KvCache::new(
                config.n_layer,
                &|il| config.has_kv(il) && config.is_swa(il),
                &|il| config.n_embd_kv_of(il),
                swa_layout,
                transposed_v,
                p.n_seq_max,
                config.n_swa,
                buffer_type,
            )?)
        } else {
            None
        };
        Ok(KvMemory { main, swa })
    }

    /// The cache of every layer, or of the full-attention layers when the
    /// sliding-window layers have their own.
    pub fn main(&self) -> &KvCache {
        &self.main
    }

    /// The sliding-window layers' own cache, if they have one.
    pub fn swa(&self) -> Option<&KvCache> {
        self.swa.as_ref()
    }

    /// Both caches, the main one first.
    fn caches(&self) -> impl Iterator<Item = &KvCache> {
        std::iter::once(&self.main).chain(self.swa.as_ref())
    }

    fn caches_mut(&mut self) -> impl Iterator<Item = &mut KvCache> {
        std::iter::once(&mut self.main).chain(self.swa.as_mut())
    }

    /// The main cache's cells: what a batch's positions continue.
    pub fn cells(&self) -> &Cells {
        &self.main.cells
    }

    /// Cells of the main cache that hold a token.
    pub fn cells_used(&self) -> usize {
        self.main.cells.used()
    }

    /// Cells of the main cache in all.
    pub fn cells_total(&self) -> usize {
        self.main.cells.size()
    }

    /// The highest position of sequence `s`, if any.
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        self.main.cells.seq_pos_max(s)
    }

    /// The lowest position of sequence `s` that every cache still holds
    /// (llama.cpp's `llama_memory_seq_pos_min`).
    pub fn seq_pos_min(&self, s: SeqId) -> Option<i32> {
        let main = self.main.cells.seq_pos_min(s)?;
        match &self.swa {
            Some(swa) => Some(main.max(swa.cells.seq_pos_min(s).unwrap_or(i32::MAX))),
            None => Some(main),
        }
    }

    /// Claims cells for a ubatch's tokens in every cache; nothing is
    /// claimed when one cache has no room.
    pub fn place(&mut self, places: &[TokenPlace]) -> std::result::Result<KvPlacement, PlaceError> {
        let main = claim(&mut self.main.cells, places)?;
        let swa = match self.swa.as_mut().map(|s| claim(&mut s.cells, places)) {
            Some(Err(e)) => {
                self.main.cells.rollback(main);
                return Err(e);
            }
            Some(Ok(s)) => Some(s),
            None => None,
        };
        Ok(KvPlacement { main, swa })
    }

    /// Gives back what [`KvMemory::place`] claimed.
    pub fn rollback(&mut self, p: KvPlacement) {
        self.main.cells.rollback(p.main);
        if let (Some(swa), Some(s)) = (self.swa.as_mut(), p.swa) {
            swa.cells.rollback(s);
        }
    }

    /// The cells a graph of `n_tokens` reads in each cache (the main
    /// one's, the sliding-window one's or 0), padded to `pad`.
    pub fn n_kv(&self, pad: usize, n_tokens: usize) -> (usize, usize) {
        (
            self.main.n_kv(pad).max(n_tokens),
            self.swa.as_ref().map_or(0, |s| s.n_kv(pad).max(n_tokens)),
        )
    }

    /// `n_kv` cells of `n_tokens` clamped to each cache's size (for
    /// plans of a given size).
    pub fn n_kv_clamped(&self, n_kv: usize, n_tokens: usize) -> (usize, usize) {
        (
            n_kv.clamp(n_tokens, self.main.layout().kv_size),
            self.swa
                .as_ref()
                .map_or(0, |s| n_kv.clamp(n_tokens, s.layout().kv_size)),
        )
    }

    /// The largest cells a graph may read in each cache.
    pub fn n_kv_max(&self) -> (usize, usize) {
        (
            self.main.layout().kv_size,
            self.swa.as_ref().map_or(0, |s| s.layout().kv_size),
        )
    }

    /// The shape of a graph reading `n_kv` (main) and `n_kv_swa` cells.
    pub fn shape(
        &self,
        n_tokens: usize,
        n_outputs: usize,
        (n_kv, n_kv_swa): (usize, usize),
        attention: Attention,
    ) -> BuildShape {
        let shape = BuildShape::cached(n_tokens, n_outputs, n_kv, attention, self.main.layout());
        match &self.swa {
            Some(swa) => shape.with_swa_cache(n_kv_swa, swa.layout()),
            None => shape,
        }
    }

    /// The layers' cache tensors for a graph being built.
    pub fn source(&mut self) -> impl CacheSource + '_ {
        Caches {
            main: &mut self.main,
            swa: self.swa.as_mut(),
        }
    }

    /// Fills the memory's inputs of a graph: the masks and the cells each
    /// cache writes.
    pub fn set_inputs(
        &self,
        g: &Graph,
        inputs: &GraphInputs,
        places: &[TokenPlace],
        placement: &KvPlacement,
        (n_kv, n_kv_swa): (usize, usize),
        n_swa: usize,
    ) -> Result<()> {
        if let Some(m) = inputs.kq_mask {
            g.write_f32(m, &self.main.mask(places, n_kv, 0))?;
        }
        if let Some(m) = inputs.kq_mask_swa {
            let mask = match &self.swa {
                Some(swa) => swa.mask(places, n_kv_swa, n_swa),
                None => self.main.mask(places, n_kv, n_swa),
            };
            g.write_f32(m, &mask)?;
        }
        if let Some(s) = &placement.swa {
            let cells: Vec<i32> = s.cells.iter().map(|&c| c as i32).collect();
            for idx in [inputs.k_idx_swa, inputs.v_idx_swa].into_iter().flatten() {
                g.write_i32(idx, &cells)?;
            }
        }
        let cells: Vec<i32> = placement.main.cells.iter().map(|&c| c as i32).collect();
        for idx in [inputs.k_idx, inputs.v_idx].into_iter().flatten() {
            g.write_i32(idx, &cells)?;
        }
        Ok(())
    }

    /// The buffer type of cache memory a device lost, if any.
    pub fn lost(&self) -> Option<&str> {
        self.caches().find_map(KvCache::lost)
    }

    /// Allocates lost cache memory again; whether any was lost (the
    /// caches are then emptied: a sequence's past lies in both).
    pub fn restore(&mut self) -> Result<bool> {
        let mut cleared = false;
        for c in self.caches_mut() {
            cleared |= c.restore()?;
        }
        if cleared {
            self.clear();
        }
        Ok(cleared)
    }

    /// Whether a cache has positions shifted and K not yet rotated.
    pub fn has_shift(&self) -> bool {
        self.caches().any(|c| c.cells.has_shift())
    }

    /// Rotates K by every cell's pending shift, in every cache, on `side`.
    pub fn apply_shift(
        &mut self,
        side: &mut Scheduler,
        model: &Model,
        n_ctx_seq: usize,
    ) -> Result<()> {
        let c = &model.config;
        for cache in self.caches_mut() {
            if cache.cells.has_shift() && cache.n_layers_held() > 0 {
                // the rope of the model's K, frequency factors included
                let layer = |il: usize| KShift {
                    head_dim: c.heads(il).head_dim,
                    n_head_kv: c.heads(il).n_head_kv,
                    rope: c.rope(il),
                    freq_factors: !(c.arch.freq_factors_full_only && c.is_swa(il)),
                };
                let (graph, shifts) = cache.shift_graph(&layer, &mut |b| {
                    rope_freq_factors(b, c, n_ctx_seq, &mut &*model)
                })?;
                side.alloc_graph(graph)?;
                // alloc_graph succeeded: the scheduler holds the graph
                side.graph()
                    .expect("allocated")
                    .write_i32(shifts, &cache.cells.shifts())?;
                side.compute()?;
            }
            cache.cells.clear_shifts();
        }
        Ok(())
    }

    /// Packs the used cells at the front of each cache, moving K and V on
    /// `side`; the cells moved.
    pub fn defragment(&mut self, side: &mut Scheduler) -> Result<usize> {
        let mut moved = 0;
        for cache in self.caches_mut() {
            let moves = cache.cells.defrag_plan();
            if moves.is_empty() {
                continue;
            }
            if cache.n_layers_held() > 0 {
                let (graph, inputs) = cache.defrag_graph(&moves)?;
                side.alloc_graph(graph)?;
                // alloc_graph succeeded: the scheduler holds the graph
                cache.fill_defrag_inputs(side.graph().expect("allocated"), &inputs, &moves)?;
                side.compute()?;
            }
            cache.cells.apply_moves(&moves);
            moved += moves.len();
        }
        Ok(moved)
    }

    /// Removes sequence `s` (every sequence for `None`) from positions
    /// [p0, p1).
    pub fn seq_rm(&mut self, s: Option<SeqId>, p0: Option<i32>, p1: Option<i32>) -> Result<()> {
        self.caches_mut()
            .try_for_each(|c| c.cells.seq_rm(s, p0, p1))
    }

    /// Adds sequence `dst` to the cells of `src` in [p0, p1).
    pub fn seq_cp(
        &mut self,
        src: SeqId,
        dst: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
    ) -> Result<()> {
        self.caches_mut()
            .try_for_each(|c| c.cells.seq_cp(src, dst, p0, p1))
    }

    /// Keeps only sequence `s`.
    pub fn seq_keep(&mut self, s: SeqId) -> Result<()> {
        self.caches_mut().try_for_each(|c| c.cells.seq_keep(s))
    }

    /// Shifts the positions of sequence `s` in [p0, p1) by `delta` (K is
    /// rotated before the next decode).
    pub fn seq_add(
        &mut self,
        s: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
        delta: i32,
    ) -> Result<()> {
        self.caches_mut()
            .try_for_each(|c| c.cells.seq_add(s, p0, p1, delta))
    }

    /// Divides the positions of sequence `s` in [p0, p1) by `d`.
    pub fn seq_div(&mut self, s: SeqId, p0: Option<i32>, p1: Option<i32>, d: i32) -> Result<()> {
        self.caches_mut()
            .try_for_each(|c| c.cells.seq_div(s, p0, p1, d))
    }

    /// Empties every cache.
    pub fn clear(&mut self) {
        self.caches_mut().for_each(|c| c.cells.clear());
    }

    /// Bytes of cache memory per buffer type, both caches together.
    pub fn bytes_per_buffer_type(&self) -> Vec<(String, u64)> {
        sum_by_name(self.caches().flat_map(|c| c.bytes_per_buffer_type()))
    }
}

/// Finds cells for a ubatch's tokens in `cells` and claims them.
fn claim(cells: &mut Cells, places: &[TokenPlace]) -> std::result::Result<Slot, PlaceError> {
    let free = cells.size() - cells.used();
    let found = cells.find_slot(places.len()).ok_or(PlaceError::Full {
        needed: places.len(),
        free,
    })?;
    cells.apply(found, places).map_err(PlaceError::Invalid)
}

/// Cells of the sliding-window layers' own cache, as llama.cpp sizes it:
/// the window of every sequence plus a ubatch, rounded up to 256, at most
/// the context.
fn swa_cache_size(n_swa: usize, p: &KvMemoryParams) -> usize {
    let want = n_swa.saturating_mul(p.n_seq_max).saturating_add(p.n_ubatch);
    want.div_ceil(256).saturating_mul(256).min(p.n_ctx)
}

/// The caches a graph reads: each layer's from the cache that holds it.
struct Caches<'a> {
    main: &'a mut KvCache,
    swa: Option<&'a mut KvCache>,
}

impl CacheSource for Caches<'_> {
    fn layer_cache(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        kv: &KvLayout,
        n_embd_kv: usize,
    ) -> Result<(TensorId, TensorId)> {
        match self.swa.as_deref_mut() {
            Some(swa) if swa.layer(layer).is_some() => swa.layer_cache(b, layer, kv, n_embd_kv),
            _ => self.main.layer_cache(b, layer, kv, n_embd_kv),
        }
    }
}
