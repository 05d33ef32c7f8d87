//! The KV cache: per-layer K and V memory on each layer's device, the cells
//! that say what each row holds, and the graphs that maintain it (position
//! shifts applied to K, defragmentation moves).

mod buffers;
mod cells;
mod layout;

use std::sync::Arc;

pub use buffers::{OwnedBuffers, bytes_per_buffer_type, sum_by_name};
pub use cells::{Cell, CellMove, Cells, MAX_SEQS, SeqId, Slot, TokenPlace};
pub use layout::{CacheSource, FreshCache, KvLayout, StatePart};

use ggraph_core::alloc::pack_weights;
use ggraph_core::backend::BufferType;
use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{Graph, GraphBuilder, RopeParams, TensorData, TensorId};

/// One layer's K and V memory.
#[derive(Clone, Debug)]
pub struct LayerKv {
    /// K: `kv_size` rows of `n_embd_kv` values of the layout's `k_type`,
    /// one row per cell.
    pub k: TensorData,
    /// V: the same for `v_type`; with `transposed_v`, one row per
    /// embedding element and one column per cell.
    pub v: TensorData,
    /// The buffer type both live in.
    pub buffer_type: String,
    /// Values per K (and V) row of this layer.
    pub n_embd_kv: usize,
}

/// A KV cache: cells plus K and V for every layer.
pub struct KvCache {
    /// What each cell holds (position, sequences, pending shift); the
    /// decode loop finds slots in it and records every ubatch it writes.
    pub cells: Cells,
    layout: KvLayout,
    /// V stored transposed (one row per embedding element, one column per
    /// cell), as standard attention reads it.
    transposed_v: bool,
    /// Per model layer: its K and V, for the layers this cache holds.
    layers: Vec<Option<LayerKv>>,
    buffers: OwnedBuffers,
}

impl KvCache {
    /// A cache of `layout.kv_size` cells for the layers `holds` picks of
    /// `n_layer`, layer `il`'s K and V rows of `n_embd_kv(il)` values, each layer in the
    /// buffer type `layer_buft` picks (one allocation per buffer type),
    /// zeroed. With a sliding window `n_swa` > 0 its cells hold only the
    /// sliding-window layers' keys: a cell out of the window of its
    /// sequence's next position is reused (`Cells::with_window`).
    pub fn new(
        n_layer: usize,
        holds: &dyn Fn(usize) -> bool,
        n_embd_kv: &dyn Fn(usize) -> usize,
        layout: KvLayout,
        transposed_v: bool,
        n_seq_max: usize,
        n_swa: usize,
        layer_buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<KvCache> {
        for (what, t) in [("K", layout.k_type), ("V", layout.v_type)] {
            if !matches!(
                t,
                DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0 | DType::Q4_0
            ) {
                return Err(Error::InvalidArgument(format!(
                    "{what} cache type {t} is not supported (F32, F16, BF16, Q8_0, Q4_0)"
                )));
            }
        }
        if transposed_v && layout.v_type.is_quantized() {
            return Err(Error::InvalidArgument(format!(
                "a {} V cache needs flash attention (standard attention stores V transposed, one value per row)",
                layout.v_type
            )));
        }
        // bytes of a layer's K and V
        let bytes = |il: usize| -> Result<(u64, u64)> {
            let width = n_embd_kv(il);
            let row = |what: &str, t: DType| {
                t.row_size(width).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "{what} rows of {width} values are not whole {t} blocks"
                    ))
                })
            };
            let (k_row, v_row) = (row("K", layout.k_type)?, row("V", layout.v_type)?);
            Ok((
                (k_row * layout.kv_size) as u64,
                (v_row * layout.kv_size) as u64,
            ))
        };
        // group the layers by buffer type, then one packing per type
        let mut groups: Vec<(Arc<dyn BufferType>, Vec<usize>)> = Vec::new();
        for il in (0..n_layer).filter(|&il| holds(il)) {
            let bt = layer_buft(il);
            match groups.iter_mut().find(|(b, _)| b.name() == bt.name()) {
                Some((_, v)) => v.push(il),
                None => groups.push((bt, vec![il])),
            }
        }
        let mut layers: Vec<Option<LayerKv>> = vec![None; n_layer];
        let mut buffers = OwnedBuffers::default();
        for (bt, ils) in groups {
            let mut sizes: Vec<(String, u64)> = Vec::with_capacity(2 * ils.len());
            for &il in &ils {
                let (k_bytes, v_bytes) = bytes(il)?;
                sizes.push((format!("cache_k_l{il}"), k_bytes));
                sizes.push((format!("cache_v_l{il}"), v_bytes));
            }
            let packed = pack_weights(&bt, &sizes)?;
            for (j, &il) in ils.iter().enumerate() {
                layers[il] = Some(LayerKv {
                    k: packed.placements[2 * j].clone(),
                    v: packed.placements[2 * j + 1].clone(),
                    buffer_type: bt.name().to_string(),
                    n_embd_kv: n_embd_kv(il),
                });
            }
            buffers.push_zeroed(packed.buffers)?;
        }
        Ok(KvCache {
            cells: Cells::new(layout.kv_size, n_seq_max)?.with_window(n_swa),
            layout,
            transposed_v,
            layers,
            buffers,
        })
    }

    /// Cells per layer and the K and V types the cache was made with.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Whether V is stored transposed (one row per embedding element, one
    /// column per cell), as standard attention reads it; false for flash
    /// attention.
    pub fn transposed_v(&self) -> bool {
        self.transposed_v
    }

    /// Layers of the model (held here or not).
    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// Layer `il`'s K and V, if this cache holds the layer.
    pub fn layer(&self, il: usize) -> Option<&LayerKv> {
        self.layers.get(il)?.as_ref()
    }

    /// How many layers this cache holds.
    pub fn n_layers_held(&self) -> usize {
        self.held().count()
    }

    /// Values in the widest K (and V) row of the layers held.
    fn widest(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|l| l.n_embd_kv)
            .max()
            .unwrap_or(0)
    }

    /// The layers this cache holds.
    fn held(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.layers.len()).filter(|&il| self.layers[il].is_some())
    }

    /// Bytes of cache memory per buffer type.
    pub fn bytes_per_buffer_type(&self) -> Vec<(String, u64)> {
        self.buffers.bytes_per_buffer_type()
    }

    /// The buffer type of memory of this cache that a device lost
    /// ([`Buffer::lost`](ggraph_core::backend::Buffer::lost): a remote server that restarted), if any.
    pub fn lost(&self) -> Option<&str> {
        self.buffers.lost()
    }

    /// Allocates lost memory again and empties the cache: every sequence
    /// had cells in every layer, so all of them lost their past. Returns
    /// whether anything was lost. Errors while a device cannot be
    /// reached, leaving the cache empty and marked for the next call.
    pub fn restore(&mut self) -> Result<bool> {
        let cells = &mut self.cells;
        self.buffers.restore(|| cells.clear())
    }

    /// Cells the attention of the next ubatch looks at: one past the
    /// highest used cell, rounded up to `pad` (so that graph shapes repeat)
    /// and at most the cache size.
    pub fn n_kv(&self, pad: usize) -> usize {
        let end = self.cells.used_end().max(1);
        (end.div_ceil(pad.max(1)) * pad.max(1)).min(self.layout.kv_size)
    }

    /// The attention mask of a ubatch over the first `n_kv` cells: 0 where
    /// the cell is used, shares a sequence with the token and is not after
    /// it (and, with a sliding window `n_swa` > 0, less than `n_swa`
    /// positions before it); -inf elsewhere. Row-major `[n_kv, tokens.len()]`.
    pub fn mask(&self, tokens: &[TokenPlace], n_kv: usize, n_swa: usize) -> Vec<f32> {
        let mut m = Vec::with_capacity(tokens.len() * n_kv);
        for t in tokens {
            for c in &self.cells.cells()[..n_kv] {
                let in_window = |p: i32| n_swa == 0 || ((t.pos - p) as usize) < n_swa;
                let visible =
                    c.pos.is_some_and(|p| p <= t.pos && in_window(p)) && c.seqs & t.seqs != 0;
                m.push(if visible { 0.0 } else { f32::NEG_INFINITY });
            }
        }
        m
    }

    /// The leaf of layer `il`'s K or V cache in a graph.
    fn leaf(&self, b: &mut GraphBuilder, il: usize, v: bool) -> Result<TensorId> {
        let l = self.layer(il).ok_or_else(|| {
            Error::InvalidArgument(format!("this KV cache does not hold layer {il}"))
        })?;
        let (name, dtype, data) = if v {
            (format!("cache_v_l{il}"), self.layout.v_type, l.v.clone())
        } else {
            (format!("cache_k_l{il}"), self.layout.k_type, l.k.clone())
        };
        b.bound_leaf(&name, dtype, &[l.n_embd_kv, self.layout.kv_size], data)
    }

    /// A graph that applies every pending shift to K: each cell's K rows
    /// are rotated by its shift (rope composes: rotating a row for
    /// position p by d more gives position p + d), with the same rope as
    /// the model's layer ([`KShift`] per layer) and the frequency factors
    /// `freq_factors` adds to the graph (e.g. the model's
    /// `rope_freqs.weight` through [`crate::arch::rope_freq_factors`];
    /// `None` for none). Run it, then `cells.clear_shifts()`. The graph's
    /// input `kv_shift` (I32, one per cell) is filled with `cells.shifts()`.
    pub fn shift_graph(
        &self,
        layer: &dyn Fn(usize) -> KShift,
        freq_factors: &mut dyn FnMut(&mut GraphBuilder) -> Result<Option<TensorId>>,
    ) -> Result<(Graph, TensorId)> {
        let mut b = GraphBuilder::new();
        let size = self.layout.kv_size;
        let shifts = b.input("kv_shift", DType::I32, &[size])?;
        let factors = freq_factors(&mut b)?;
        let kt = self.layout.k_type;
        for il in self.held() {
            let KShift {
                head_dim,
                n_head_kv,
                rope,
                freq_factors,
            } = layer(il);
            let es = kt.row_size(head_dim).ok_or_else(|| {
                Error::InvalidArgument(format!("layer {il}'s head_dim is not whole K blocks"))
            })?;
            let k = self.leaf(&mut b, il, false)?;
            let view = b.view_3d(k, [head_dim, n_head_kv, size], es, es * n_head_kv, 0)?;
            let src = if kt == DType::F32 || kt == DType::F16 {
                view
            } else {
                b.cast(view, DType::F32)?
            };
            let factors = if freq_factors { factors } else { None };
            let rotated = b.rope_ext(src, shifts, factors, rope)?;
            let back = b.cpy(rotated, view)?;
            b.expand(back)?;
        }
        Ok((b.build(), shifts))
    }

    /// A graph that performs a defragmentation plan on every layer's K
    /// and V: the moved rows are gathered first, then written to their
    /// new cells. Its inputs are filled by [`KvCache::fill_defrag_inputs`].
    pub fn defrag_graph(&self, moves: &[CellMove]) -> Result<(Graph, DefragInputs)> {
        let mut b = GraphBuilder::new();
        let m = moves.len();
        let from = b.input("defrag_from", DType::I32, &[m])?;
        let to = b.input("defrag_to", DType::I32, &[m])?;
        let from_planes = b.input("defrag_from_planes", DType::I32, &[m, self.widest()])?;
        let to_planes = b.input("defrag_to_planes", DType::I32, &[m, 1])?;
        let size = self.layout.kv_size;
        let mut uses_planes = false;
        for il in self.held() {
            let k = self.leaf(&mut b, il, false)?;
            let rows = b.get_rows(k, from)?;
            let w = b.set_rows(k, rows, to)?;
            b.expand(w)?;
            let v = self.leaf(&mut b, il, true)?;
            if self.transposed_v {
                // one value per (cell, element): the planes view
                uses_planes = true;
                let width = self.layer(il).map_or(0, |l| l.n_embd_kv);
                let planes = b.reshape(v, &[1, size, width])?;
                // every plane moves the same cells: the first `width`
                // planes of the widest layer's
                let from = b.view_2d(from_planes, m, width, m * 4, 0)?;
                let vals = b.get_rows(planes, from)?;
                let w = b.set_rows(planes, vals, to_planes)?;
                b.expand(w)?;
            } else {
                let rows = b.get_rows(v, from)?;
                let w = b.set_rows(v, rows, to)?;
                b.expand(w)?;
            }
        }
        let g = b.build();
        Ok((
            g,
            DefragInputs {
                from,
                to,
                from_planes: uses_planes.then_some(from_planes),
                to_planes: uses_planes.then_some(to_planes),
            },
        ))
    }

    /// Writes a defragmentation plan into its graph's inputs.
    pub fn fill_defrag_inputs(
        &self,
        g: &Graph,
        inputs: &DefragInputs,
        moves: &[CellMove],
    ) -> Result<()> {
        let from: Vec<i32> = moves.iter().map(|m| m.from as i32).collect();
        let to: Vec<i32> = moves.iter().map(|m| m.to as i32).collect();
        g.write_i32(inputs.from, &from)?;
        g.write_i32(inputs.to, &to)?;
        if let (Some(fp), Some(tp)) = (inputs.from_planes, inputs.to_planes) {
            let planes: Vec<i32> = (0..self.widest())
                .flat_map(|_| from.iter().copied())
                .collect();
            g.write_i32(fp, &planes)?;
            g.write_i32(tp, &to)?;
        }
        Ok(())
    }
}

/// How the shift graph rotates one layer's K: as the model's rope does.
#[derive(Clone, Copy, Debug)]
pub struct KShift {
    /// Per-head dimension of the layer's K.
    pub head_dim: usize,
    /// Its KV heads.
    pub n_head_kv: usize,
    /// Its rope.
    pub rope: RopeParams,
    /// Whether the model's frequency factors apply to it.
    pub freq_factors: bool,
}

/// The inputs of a defragmentation graph.
#[derive(Clone, Copy, Debug)]
pub struct DefragInputs {
    /// I32 `[n_moves]`: the cell each moved row is read from.
    pub from: TensorId,
    /// I32 `[n_moves]`: the cell it is written to.
    pub to: TensorId,
    /// I32 `[n_moves, n_embd_kv]`: the source cells once per embedding
    /// element, for a transposed V (None when V is not transposed).
    pub from_planes: Option<TensorId>,
    /// I32 `[n_moves, 1]`: the destination cells, for a transposed V (None
    /// when V is not transposed).
    pub to_planes: Option<TensorId>,
}

impl CacheSource for KvCache {
    fn layer_cache(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        kv: &KvLayout,
        n_embd_kv: usize,
    ) -> Result<(TensorId, TensorId)> {
        let width = self.layer(layer).map(|l| l.n_embd_kv);
        if *kv != self.layout || width != Some(n_embd_kv) {
            return Err(Error::InvalidArgument(format!(
                "the graph wants a cache of {kv:?} x {n_embd_kv} for layer {layer}; this cache is \
                 {:?} for layers {:?} ({width:?} values for that one)",
                self.layout,
                self.held().collect::<Vec<_>>()
            )));
        }
        Ok((self.leaf(b, layer, false)?, self.leaf(b, layer, true)?))
    }
}
