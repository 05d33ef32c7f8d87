//! The recurrent layers' memory, as llama.cpp's `llama_memory_recurrent`
//! keeps it for Mamba, RWKV and the hybrids: per layer, one state per
//! sequence (the last inputs of a convolution, a scan's state), which a
//! ubatch reads and replaces. A sequence's past cannot be cut back: the
//! state holds no earlier positions, so a partial removal is refused.
//!
//! Each sequence has two rows per layer. A ubatch reads the current one
//! and writes the other, which becomes current only once the ubatch has
//! succeeded: a failed ubatch leaves the state it read, as the KV cache
//! leaves its cells. A sequence starting afresh has its current row
//! zeroed before it is read.

use std::sync::Arc;

use ggraph_core::alloc::pack_weights;
use ggraph_core::backend::BufferType;
use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{Graph, GraphBuilder, TensorData, TensorId};

use super::PlaceError;
use crate::arch::{ModelConfig, RecurrentInputs};
use crate::kv::{OwnedBuffers, SeqId, StatePart, TokenPlace};

/// One sequence's state: the position it has read up to (None: no
/// past), and which of its two rows is current.
#[derive(Clone, Copy, Debug, Default)]
struct SeqState {
    pos: Option<i32>,
    second_row: bool,
}

/// The sequences a ubatch brings, in the order of its runs of tokens.
#[derive(Debug)]
pub struct RecurrentPlacement {
    /// Each run's sequence and the position of its last token.
    runs: Vec<(SeqId, i32)>,
}

impl RecurrentPlacement {
    /// Sequences in the ubatch.
    pub fn n_seqs(&self) -> usize {
        self.runs.len()
    }
}

/// A recurrent layer's state tensors, `[n_embd, 2 * n_seq_max]` F32
/// each: the convolution's, and the scan's where the block has one.
#[derive(Clone, Debug)]
struct LayerState {
    conv: TensorData,
    scan: Option<TensorData>,
}

impl LayerState {
    fn parts(&self) -> impl Iterator<Item = (StatePart, &TensorData)> {
        std::iter::once((StatePart::Conv, &self.conv))
            .chain(self.scan.as_ref().map(|s| (StatePart::Scan, s)))
    }
}

/// The recurrent layers' memory (see the module's documentation).
pub struct RecurrentMemory {
    n_embd_r: usize,
    n_embd_s: usize,
    n_seq_max: usize,
    /// Per model layer: its state, for the recurrent layers.
    layers: Vec<Option<LayerState>>,
    buffers: OwnedBuffers,
    seqs: Vec<SeqState>,
}

impl RecurrentMemory {
    /// The state of `config`'s recurrent layers for `n_seq_max` sequences,
    /// each layer in the buffer type `buffer_type(layer)` gives, zeroed.
    pub fn new(
        config: &ModelConfig,
        n_seq_max: usize,
        buffer_type: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<RecurrentMemory> {
        let n_seq_max = n_seq_max.max(1);
        let (n_embd_r, n_embd_s) = (config.n_embd_r(), config.n_embd_s());
        if n_embd_r == 0 {
            return Err(Error::InvalidArgument(format!(
                "a {} model's recurrent layers keep no state",
                config.arch.name
            )));
        }
        let bytes = |n: usize| (n * std::mem::size_of::<f32>() * 2 * n_seq_max) as u64;
        let mut groups: Vec<(Arc<dyn BufferType>, Vec<usize>)> = Vec::new();
        for il in (0..config.n_layer).filter(|&il| config.is_recurrent(il)) {
            let bt = buffer_type(il);
            match groups.iter_mut().find(|(b, _)| b.name() == bt.name()) {
                Some((_, v)) => v.push(il),
                None => groups.push((bt, vec![il])),
            }
        }
        let per_layer = if n_embd_s > 0 { 2 } else { 1 };
        let mut layers = vec![None; config.n_layer];
        let mut buffers = OwnedBuffers::default();
        for (bt, ils) in groups {
            let mut sizes: Vec<(String, u64)> = Vec::new();
            for &il in &ils {
                sizes.push((StatePart::Conv.name(il), bytes(n_embd_r)));
                if n_embd_s > 0 {
                    sizes.push((StatePart::Scan.name(il), bytes(n_embd_s)));
                }
            }
            let packed = pack_weights(&bt, &sizes)?;
            for (j, &il) in ils.iter().enumerate() {
                let at = |k: usize| packed.placements[per_layer * j + k].clone();
                layers[il] = Some(LayerState {
                    conv: at(0),
                    scan: (n_embd_s > 0).then(|| at(1)),
                });
            }
            buffers.push_zeroed(packed.buffers)?;
        }
        Ok(RecurrentMemory {
            n_embd_r,
            n_embd_s,
            n_seq_max,
            layers,
            buffers,
            seqs: vec![SeqState::default(); n_seq_max],
        })
    }

    /// Rows of each layer's state tensor: two per sequence.
    pub fn rows(&self) -> usize {
        2 * self.n_seq_max
    }

    /// The highest position sequence `s` has read, if any.
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        self.seqs.get(s as usize)?.pos
    }

    /// The lowest position whose past the state holds: the same as the
    /// highest (llama.cpp's recurrent `seq_pos_min`).
    pub fn seq_pos_min(&self, s: SeqId) -> Option<i32> {
        self.seq_pos_max(s)
    }

    /// Sequences with state.
    pub fn seqs_used(&self) -> usize {
        self.seqs.iter().filter(|s| s.pos.is_some()).count()
    }

    fn row(&self, s: SeqId, second: bool) -> usize {
        s as usize + if second { self.n_seq_max } else { 0 }
    }

    fn row_bytes(&self, part: StatePart) -> u64 {
        let n = match part {
            StatePart::Conv => self.n_embd_r,
            StatePart::Scan => self.n_embd_s,
        };
        (n * std::mem::size_of::<f32>()) as u64
    }

    /// Checks that a ubatch's tokens are runs of equal length, one
    /// sequence each, continuing each sequence's state; zeroes the state
    /// of the sequences that start afresh.
    pub fn place(
        &mut self,
        places: &[TokenPlace],
    ) -> std::result::Result<RecurrentPlacement, PlaceError> {
        let invalid = |m: String| PlaceError::Invalid(Error::InvalidArgument(m));
        let mut runs: Vec<(SeqId, i32, usize)> = Vec::new();
        for (i, p) in places.iter().enumerate() {
            if p.seqs.count_ones() != 1 {
                return Err(invalid(format!(
                    "token {i} belongs to several sequences: recurrent state is kept per \
                     sequence (decode the shared tokens in one sequence, then seq_cp)"
                )));
            }
            let s = p.seqs.trailing_zeros() as SeqId;
            match runs.last_mut() {
                Some((rs, last, n)) if *rs == s => {
                    if p.pos != *last + 1 {
                        return Err(invalid(format!(
                            "sequence {s}: position {} after {last}; recurrent state reads \
                             positions in order",
                            p.pos
                        )));
                    }
                    *last = p.pos;
                    *n += 1;
                }
                _ => {
                    if runs.iter().any(|r| r.0 == s) {
                        return Err(invalid(format!(
                            "sequence {s} has two runs of tokens in one ubatch; recurrent \
                             memory takes equal splits (UbatchSplit::Equal)"
                        )));
                    }
                    let state = self.seqs.get(s as usize).ok_or_else(|| {
                        invalid(format!(
                            "sequence {s} is beyond the {} the state keeps",
                            self.n_seq_max
                        ))
                    })?;
                    if let Some(held) = state.pos
                        && p.pos != held + 1
                    {
                        return Err(invalid(format!(
                            "sequence {s} continues at position {}; its recurrent state is \
                             at {held}",
                            p.pos
                        )));
                    }
                    runs.push((s, p.pos, 1));
                }
            }
        }
        if runs.iter().any(|r| r.2 != runs[0].2) {
            return Err(invalid(
                "the ubatch's sequences have runs of different lengths; recurrent memory \
                 takes equal splits (UbatchSplit::Equal)"
                    .into(),
            ));
        }
        for &(s, _, _) in &runs {
            let state = self.seqs[s as usize];
            if state.pos.is_none() {
                self.zero(s, state.second_row)
                    .map_err(PlaceError::Invalid)?;
            }
        }
        Ok(RecurrentPlacement {
            runs: runs.into_iter().map(|(s, last, _)| (s, last)).collect(),
        })
    }

    /// Zeroes the row of sequence `s` in every layer.
    fn zero(&self, s: SeqId, second: bool) -> Result<()> {
        let row = self.row(s, second) as u64;
        for (part, t) in self.layers.iter().flatten().flat_map(LayerState::parts) {
            let n = self.row_bytes(part);
            t.buffer.fill(t.offset + row * n, n, 0)?;
        }
        Ok(())
    }

    /// Makes the rows a succeeded ubatch wrote current.
    pub fn commit(&mut self, p: RecurrentPlacement) {
        for (s, last) in p.runs {
            let state = &mut self.seqs[s as usize];
            state.pos = Some(last);
            state.second_row = !state.second_row;
        }
    }

    /// Fills a graph's recurrent inputs: the rows each sequence reads and
    /// writes.
    pub fn set_inputs(
        &self,
        g: &Graph,
        inputs: &RecurrentInputs,
        p: &RecurrentPlacement,
    ) -> Result<()> {
        let rows = |write: bool| -> Vec<i32> {
            (p.runs.iter())
                .map(|&(s, _)| {
                    let second = self.seqs[s as usize].second_row;
                    self.row(s, second != write) as i32
                })
                .collect()
        };
        g.write_i32(inputs.read, &rows(false))?;
        g.write_i32(inputs.write, &rows(true))
    }

    /// Layer `il`'s state tensor as a leaf of a graph being built.
    pub fn leaf(
        &self,
        b: &mut GraphBuilder,
        il: usize,
        part: StatePart,
        n_embd: usize,
        rows: usize,
    ) -> Result<TensorId> {
        let state = self.layers.get(il).and_then(Option::as_ref);
        let data = state
            .and_then(|l| l.parts().find(|(p, _)| *p == part))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("layer {il} keeps no recurrent state {part:?}"))
            })?
            .1;
        let held = self.row_bytes(part) as usize / std::mem::size_of::<f32>();
        if n_embd != held || rows != self.rows() {
            return Err(Error::InvalidArgument(format!(
                "the graph wants a {part:?} state of {n_embd} x {rows} for layer {il}; it is \
                 {held} x {}",
                self.rows()
            )));
        }
        b.bound_leaf(&part.name(il), DType::F32, &[n_embd, rows], data.clone())
    }

    /// Checks that removing positions [p0, p1) of sequence `s` (every
    /// sequence for `None`) is possible: a state can lose all its past or
    /// none of it.
    pub fn check_rm(&self, s: Option<SeqId>, p0: Option<i32>, p1: Option<i32>) -> Result<()> {
        let (p0, p1) = pos_range(p0, p1);
        let partial = |pos: Option<i32>| pos.is_some_and(|q| 0 < p0 && p0 <= q && q < p1);
        let refused = match s {
            Some(s) => {
                let state = self.seqs.get(s as usize).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "sequence {s} is beyond the {} the state keeps",
                        self.n_seq_max
                    ))
                })?;
                partial(state.pos)
            }
            None => p0 != p1 && (p0 != 0 || p1 != i32::MAX),
        };
        if refused {
            return Err(Error::InvalidArgument(format!(
                "positions {p0}.. of {} cannot be removed: recurrent state keeps no earlier \
                 positions, so a sequence loses all its past or none",
                s.map_or("every sequence".to_string(), |s| format!("sequence {s}"))
            )));
        }
        Ok(())
    }

    /// Removes positions [p0, p1) of sequence `s` (every sequence for
    /// `None`): the state goes when its position is in the range; a
    /// partial removal is refused and changes nothing.
    pub fn seq_rm(&mut self, s: Option<SeqId>, p0: Option<i32>, p1: Option<i32>) -> Result<()> {
        self.check_rm(s, p0, p1)?;
        let (lo, hi) = pos_range(p0, p1);
        for (i, state) in self.seqs.iter_mut().enumerate() {
            if s.is_none_or(|s| s as usize == i) && state.pos.is_some_and(|q| lo <= q && q < hi) {
                state.pos = None;
            }
        }
        Ok(())
    }

    /// Gives sequence `dst` the state of `src` (the range is not used: a
    /// state is all of its past).
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId) -> Result<()> {
        let n = self.n_seq_max;
        let bad = |s: SeqId| (s as usize) >= n;
        if bad(src) || bad(dst) {
            return Err(Error::InvalidArgument(format!(
                "seq_cp {src} -> {dst}: the state keeps sequences 0..{n}"
            )));
        }
        if src == dst {
            return Ok(());
        }
        let from = self.seqs[src as usize];
        if from.pos.is_some() {
            let to_second = self.seqs[dst as usize].second_row;
            let (from_row, to_row) = (
                self.row(src, from.second_row) as u64,
                self.row(dst, to_second) as u64,
            );
            for (part, t) in self.layers.iter().flatten().flat_map(LayerState::parts) {
                let n = self.row_bytes(part);
                let mut bytes = vec![0u8; n as usize];
                t.buffer.read(t.offset + from_row * n, &mut bytes)?;
                t.buffer.write(t.offset + to_row * n, &bytes)?;
            }
        }
        self.seqs[dst as usize].pos = from.pos;
        Ok(())
    }

    /// Keeps only sequence `s`'s state.
    pub fn seq_keep(&mut self, s: SeqId) {
        for (i, state) in self.seqs.iter_mut().enumerate() {
            if i != s as usize {
                state.pos = None;
            }
        }
    }

    /// Moves sequence `s`'s position by `delta` when it is in [p0, p1); a
    /// state moved before position 0 is removed.
    pub fn seq_add(&mut self, s: SeqId, p0: Option<i32>, p1: Option<i32>, delta: i32) {
        self.move_pos(s, p0, p1, |q| q.checked_add(delta).filter(|&q| q >= 0));
    }

    /// Divides sequence `s`'s position by `d` when it is in [p0, p1).
    pub fn seq_div(&mut self, s: SeqId, p0: Option<i32>, p1: Option<i32>, d: i32) {
        if d > 0 {
            self.move_pos(s, p0, p1, |q| Some(q / d));
        }
    }

    fn move_pos(
        &mut self,
        s: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
        f: impl Fn(i32) -> Option<i32>,
    ) {
        let (lo, hi) = pos_range(p0, p1);
        if let Some(state) = self.seqs.get_mut(s as usize)
            && let Some(q) = state.pos
            && lo <= q
            && q < hi
        {
            state.pos = f(q);
        }
    }

    /// Forgets every sequence's state.
    pub fn clear(&mut self) {
        self.seqs.iter_mut().for_each(|s| s.pos = None);
    }

    /// The buffer type of state memory a device lost, if any.
    pub fn lost(&self) -> Option<&str> {
        self.buffers.lost()
    }

    /// Allocates lost memory again, zeroed, and forgets every state;
    /// whether anything was lost.
    pub fn restore(&mut self) -> Result<bool> {
        let seqs = &mut self.seqs;
        self.buffers
            .restore(|| seqs.iter_mut().for_each(|s| s.pos = None))
    }

    /// Bytes of state memory per buffer type.
    pub fn bytes_per_buffer_type(&self) -> Vec<(String, u64)> {
        self.buffers.bytes_per_buffer_type()
    }
}

/// Positions [p0, p1) as the sequence operations take them: no start (or a
/// negative one) is 0, no end (or a negative one) is the last position.
pub(super) fn pos_range(p0: Option<i32>, p1: Option<i32>) -> (i32, i32) {
    (
        p0.unwrap_or(0).max(0),
        p1.filter(|&p| p >= 0).unwrap_or(i32::MAX),
    )
}
