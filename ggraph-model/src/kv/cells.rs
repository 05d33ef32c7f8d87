//! KV cache cells: which position and sequences each cell holds, sequence
//! operations, slot search, and the plan that compacts the cells.
//!
//! This is the bookkeeping only; the K and V memory lives in
//! [`super::KvCache`].

use ggraph_core::error::{Error, Result};

/// A sequence id (0..64).
pub type SeqId = u32;

/// Most sequences a cache tracks.
pub const MAX_SEQS: usize = 64;

/// One cell: empty, or a position shared by a set of sequences.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// Position, or `None` when empty.
    pub pos: Option<i32>,
    /// Bit s set: the cell belongs to sequence s.
    pub seqs: u64,
    /// Position change not yet applied to the cell's K (rope).
    pub shift: i32,
}

impl Cell {
    /// Whether the cell holds no token (no position, no sequence).
    pub fn is_empty(&self) -> bool {
        self.pos.is_none()
    }

    /// Whether the cell belongs to sequence `s` (`s` below [`MAX_SEQS`]).
    pub fn has_seq(&self, s: SeqId) -> bool {
        self.seqs & (1 << s) != 0
    }

    fn clear(&mut self) {
        *self = Cell::default();
    }
}

/// A token's place: its position and sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenPlace {
    /// Position in its sequences (what the rope rotates by), 0 or more.
    pub pos: i32,
    /// Bit s set: the token belongs to sequence s (at least one bit).
    pub seqs: u64,
}

/// Where a ubatch's tokens went, and what those cells held before, so
/// that a failed ubatch can be undone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The cell each token was written to, in the ubatch's token order.
    pub cells: Vec<usize>,
    previous: Vec<Cell>,
    previous_head: usize,
}

impl Slot {
    /// The cells form one contiguous run.
    pub fn is_contiguous(&self) -> bool {
        self.cells.windows(2).all(|w| w[1] == w[0] + 1)
    }
}

/// A move of one cell's contents in a defragmentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellMove {
    /// The cell whose position, sequences and K/V rows move.
    pub from: usize,
    /// The cell they move to.
    pub to: usize,
}

/// The cells of a KV cache.
#[derive(Clone, Debug, PartialEq)]
pub struct Cells {
    cells: Vec<Cell>,
    n_seq_max: usize,
    /// Where the next slot search starts.
    head: usize,
    used: usize,
    /// The sliding window of the layers these cells serve (0: none).
    n_swa: usize,
}

/// A position range [p0, p1); `None` ends are open.
fn in_range(pos: i32, p0: Option<i32>, p1: Option<i32>) -> bool {
    p0.is_none_or(|a| pos >= a) && p1.is_none_or(|b| pos < b)
}

impl Cells {
    /// `size` empty cells for sequences `0..n_seq_max` (llama.cpp's
    /// `n_seq_max`); an error unless `n_seq_max` is in `1..=MAX_SEQS`.
    pub fn new(size: usize, n_seq_max: usize) -> Result<Cells> {
        if n_seq_max == 0 || n_seq_max > MAX_SEQS {
            return Err(Error::InvalidArgument(format!(
                "a KV cache tracks 1 to {MAX_SEQS} sequences, not {n_seq_max}"
            )));
        }
        Ok(Cells {
            cells: vec![Cell::default(); size],
            n_seq_max,
            head: 0,
            used: 0,
            n_swa: 0,
        })
    }

    /// Cells of sliding-window layers with window `n_swa` (0: none): a
    /// cell of one sequence that no later token of it can see (`n_swa` or
    /// more positions before the sequence's next position) may be written
    /// over, as llama.cpp's SWA cache does.
    pub fn with_window(mut self, n_swa: usize) -> Cells {
        self.n_swa = n_swa;
        self
    }

    /// Cells in the cache, used or not (the cache's `kv_size`).
    pub fn size(&self) -> usize {
        self.cells.len()
    }

    /// Sequences the cells track: ids `0..n_seq_max`.
    pub fn n_seq_max(&self) -> usize {
        self.n_seq_max
    }

    /// Cells that hold something.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Cell `i`; panics when `i` is not below [`Cells::size`].
    pub fn cell(&self, i: usize) -> &Cell {
        &self.cells[i]
    }

    /// Every cell, by index.
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// One past the highest used cell.
    pub fn used_end(&self) -> usize {
        self.cells
            .iter()
            .rposition(|c| !c.is_empty())
            .map_or(0, |i| i + 1)
    }

    fn check_seq(&self, s: SeqId) -> Result<()> {
        if (s as usize) < self.n_seq_max {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "sequence {s} is out of range: the cache tracks {} sequences",
                self.n_seq_max
            )))
        }
    }

    fn recount(&mut self) {
        self.used = self.cells.iter().filter(|c| !c.is_empty()).count();
    }

    /// Lowest position of sequence `s`, if it has any cell.
    pub fn seq_pos_min(&self, s: SeqId) -> Option<i32> {
        self.cells
            .iter()
            .filter(|c| c.has_seq(s))
            .filter_map(|c| c.pos)
            .min()
    }

    /// Highest position of sequence `s`, if it has any cell.
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        self.cells
            .iter()
            .filter(|c| c.has_seq(s))
            .filter_map(|c| c.pos)
            .max()
    }

    /// Removes sequence `s` (every sequence when `None`) from the cells
    /// with positions in [p0, p1).
    pub fn seq_rm(&mut self, s: Option<SeqId>, p0: Option<i32>, p1: Option<i32>) -> Result<()> {
        if let Some(s) = s {
            self.check_seq(s)?;
        }
        for c in &mut self.cells {
            let Some(pos) = c.pos else { continue };
            if !in_range(pos, p0, p1) {
                continue;
            }
            match s {
                Some(s) => c.seqs &= !(1 << s),
                None => c.seqs = 0,
            }
            if c.seqs == 0 {
                c.clear();
            }
        }
        self.recount();
        self.head = 0;
        Ok(())
    }

    /// Adds sequence `dst` to the cells of `src` in [p0, p1) (they share
    /// the memory).
    pub fn seq_cp(
        &mut self,
        src: SeqId,
        dst: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
    ) -> Result<()> {
        self.check_seq(src)?;
        self.check_seq(dst)?;
        for c in &mut self.cells {
            if c.has_seq(src) && c.pos.is_some_and(|p| in_range(p, p0, p1)) {
                c.seqs |= 1 << dst;
            }
        }
        Ok(())
    }

    /// Keeps only sequence `s`: every other sequence leaves every cell.
    pub fn seq_keep(&mut self, s: SeqId) -> Result<()> {
        self.check_seq(s)?;
        for c in &mut self.cells {
            if c.has_seq(s) {
                c.seqs = 1 << s;
            } else {
                c.clear();
            }
        }
        self.recount();
        self.head = 0;
        Ok(())
    }

    /// The position of the first cell of sequence `s` in [p0, p1) that
    /// other sequences share (its position cannot change alone).
    fn shared_in_range(&self, s: SeqId, p0: Option<i32>, p1: Option<i32>) -> Option<i32> {
        self.cells
            .iter()
            .filter(|c| c.has_seq(s) && c.seqs != 1 << s)
            .filter_map(|c| c.pos)
            .find(|&pos| in_range(pos, p0, p1))
    }

    /// Adds `delta` to the positions of sequence `s` in [p0, p1); cells
    /// pushed below position 0 are removed. The change to K is pending
    /// until the cache applies its shift.
    pub fn seq_add(
        &mut self,
        s: SeqId,
        p0: Option<i32>,
        p1: Option<i32>,
        delta: i32,
    ) -> Result<()> {
        self.check_seq(s)?;
        if delta == 0 {
            return Ok(());
        }
        // all or nothing: refuse before changing any cell
        if let Some(pos) = self.shared_in_range(s, p0, p1) {
            return Err(Error::InvalidArgument(format!(
                "cannot shift sequence {s} at position {pos}: the cell is shared with other sequences"
            )));
        }
        for c in &mut self.cells {
            let Some(pos) = c.pos else { continue };
            if !c.has_seq(s) || !in_range(pos, p0, p1) {
                continue;
            }
            let new = pos.saturating_add(delta);
            if new < 0 {
                c.clear();
            } else {
                c.pos = Some(new);
                c.shift += delta;
            }
        }
        self.recount();
        self.head = 0;
        Ok(())
    }

    /// Divides the positions of sequence `s` in [p0, p1) by `d` (grouped
    /// attention); the change to K is pending like `seq_add`'s.
    pub fn seq_div(&mut self, s: SeqId, p0: Option<i32>, p1: Option<i32>, d: i32) -> Result<()> {
        self.check_seq(s)?;
        if d <= 0 {
            return Err(Error::InvalidArgument(format!(
                "seq_div needs a positive divisor, not {d}"
            )));
        }
        if d == 1 {
            return Ok(());
        }
        // all or nothing: refuse before changing any cell
        if let Some(pos) = self.shared_in_range(s, p0, p1) {
            return Err(Error::InvalidArgument(format!(
                "cannot divide sequence {s} at position {pos}: the cell is shared with other sequences"
            )));
        }
        for c in &mut self.cells {
            let Some(pos) = c.pos else { continue };
            if !c.has_seq(s) || !in_range(pos, p0, p1) {
                continue;
            }
            let new = pos / d;
            c.shift += new - pos;
            c.pos = Some(new);
        }
        Ok(())
    }

    /// Whether some cell has a pending shift.
    pub fn has_shift(&self) -> bool {
        self.cells.iter().any(|c| c.shift != 0)
    }

    /// Pending shifts per cell (0 for none), for the K-shift graph.
    pub fn shifts(&self) -> Vec<i32> {
        self.cells.iter().map(|c| c.shift).collect()
    }

    /// Marks every pending shift applied.
    pub fn clear_shifts(&mut self) {
        for c in &mut self.cells {
            c.shift = 0;
        }
    }

    /// With a window: each sequence's next position (one past its
    /// highest), in one pass over the cells; empty without a window.
    fn next_positions(&self) -> Vec<Option<i32>> {
        if self.n_swa == 0 {
            return Vec::new();
        }
        let mut next = vec![None; self.n_seq_max];
        for c in &self.cells {
            let Some(p) = c.pos else { continue };
            for (s, n) in next.iter_mut().enumerate() {
                if c.seqs >> s & 1 == 1 {
                    *n = Some(n.map_or(p + 1, |x: i32| x.max(p + 1)));
                }
            }
        }
        next
    }

    /// Whether a new token may take `c`: an empty cell, or with a window
    /// (`next` from [`Cells::next_positions`]) a cell of one sequence out
    /// of it (see [`Cells::with_window`]).
    fn is_free(&self, c: &Cell, next: &[Option<i32>]) -> bool {
        if c.is_empty() {
            return true;
        }
        if self.n_swa == 0 || c.seqs.count_ones() != 1 {
            return false;
        }
        let seq = c.seqs.trailing_zeros() as usize;
        match (c.pos, next.get(seq).copied().flatten()) {
            (Some(p), Some(n)) => (n - p) as i64 >= self.n_swa as i64,
            _ => false,
        }
    }

    /// Finds cells for `n` tokens: one contiguous run from the search head
    /// when there is one, any free cells otherwise; `None` when fewer than
    /// `n` cells are free. Changes nothing.
    pub fn find_slot(&self, n: usize) -> Option<Vec<usize>> {
        let size = self.cells.len();
        if n == 0 {
            return Some(Vec::new());
        }
        let next = self.next_positions();
        let free: Vec<bool> = self.cells.iter().map(|c| self.is_free(c, &next)).collect();
        let n_free = if self.n_swa == 0 {
            size - self.used
        } else {
            free.iter().filter(|&&f| f).count()
        };
        if n > n_free {
            return None;
        }
        // a contiguous run, searched from the head and wrapping once
        let mut start = if self.head + n > size { 0 } else { self.head };
        let mut tried = 0;
        while tried < size {
            if start + n > size {
                tried += size - start;
                start = 0;
                continue;
            }
            match (start..start + n).find(|&i| !free[i]) {
                None => return Some((start..start + n).collect()),
                Some(busy) => {
                    tried += busy + 1 - start;
                    start = busy + 1;
                }
            }
        }
        // scattered
        Some((0..size).filter(|&i| free[i]).take(n).collect())
    }

    /// Writes `tokens` into `cells` and returns the slot (with what the
    /// cells held) for `rollback`.
    pub fn apply(&mut self, cells: Vec<usize>, tokens: &[TokenPlace]) -> Result<Slot> {
        if cells.len() != tokens.len() {
            return Err(Error::InvalidArgument(format!(
                "{} cells for {} tokens",
                cells.len(),
                tokens.len()
            )));
        }
        for t in tokens {
            if t.seqs == 0 || t.seqs >> self.n_seq_max != 0 || t.pos < 0 {
                return Err(Error::InvalidArgument(format!(
                    "token at position {} with sequence set {:#x} does not fit a cache of {} sequences",
                    t.pos, t.seqs, self.n_seq_max
                )));
            }
        }
        let next = self.next_positions();
        if let Some(&c) = cells
            .iter()
            .find(|&&c| c >= self.cells.len() || !self.is_free(&self.cells[c], &next))
        {
            return Err(Error::InvalidArgument(format!("cell {c} is not free")));
        }
        let previous = cells.iter().map(|&c| self.cells[c]).collect();
        let slot = Slot {
            previous_head: self.head,
            cells,
            previous,
        };
        for (&c, t) in slot.cells.iter().zip(tokens) {
            self.cells[c] = Cell {
                pos: Some(t.pos),
                seqs: t.seqs,
                shift: 0,
            };
        }
        self.head = slot
            .cells
            .last()
            .map_or(self.head, |&c| (c + 1) % self.cells.len());
        self.recount();
        Ok(slot)
    }

    /// Undoes `apply`: the cells hold what they held before.
    pub fn rollback(&mut self, slot: Slot) {
        for (c, prev) in slot.cells.into_iter().zip(slot.previous) {
            self.cells[c] = prev;
        }
        self.head = slot.previous_head;
        self.recount();
    }

    /// Moves that pack the used cells at the front, in the order to apply
    /// them (every destination is empty when its move runs, and no source
    /// is overwritten before it is read). Changes nothing.
    pub fn defrag_plan(&self) -> Vec<CellMove> {
        let mut moves = Vec::new();
        let mut dst = 0;
        let mut src = self.cells.len();
        loop {
            while dst < self.cells.len() && !self.cells[dst].is_empty() {
                dst += 1;
            }
            while src > 0 && self.cells[src - 1].is_empty() {
                src -= 1;
            }
            if src == 0 || dst >= src - 1 {
                break;
            }
            src -= 1;
            moves.push(CellMove { from: src, to: dst });
            dst += 1;
        }
        moves
    }

    /// Applies a defragmentation plan to the bookkeeping.
    pub fn apply_moves(&mut self, moves: &[CellMove]) {
        for m in moves {
            self.cells[m.to] = self.cells[m.from];
            self.cells[m.from].clear();
        }
        self.head = self.used_end() % self.cells.len().max(1);
    }

    /// Empties every cell.
    pub fn clear(&mut self) {
        for c in &mut self.cells {
            c.clear();
        }
        self.used = 0;
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(cells: &mut Cells, seq: SeqId, positions: std::ops::Range<i32>) -> Slot {
        let tokens: Vec<TokenPlace> = positions
            .map(|p| TokenPlace {
                pos: p,
                seqs: 1 << seq,
            })
            .collect();
        let at = cells.find_slot(tokens.len()).expect("room");
        cells.apply(at, &tokens).unwrap()
    }

    #[test]
    fn a_window_lets_cells_out_of_it_be_reused_and_rolled_back() {
        // window 3: after positions 0..6 of sequence 0, the next position
        // 6 sees 4 and 5 only; cells of 0..3 (and, for sequence 0, not a
        // cell shared with sequence 1) are free
        let mut c = Cells::new(6, 2).unwrap().with_window(3);
        place(&mut c, 0, 0..6);
        c.seq_cp(0, 1, Some(2), Some(3)).unwrap();
        assert_eq!(c.used(), 6);
        assert_eq!(c.find_slot(3), Some(vec![0, 1, 3]));
        assert_eq!(c.find_slot(4), None, "the shared cell and 4, 5 stay");
        let slot = place(&mut c, 0, 6..9);
        assert_eq!(slot.cells, vec![0, 1, 3]);
        assert_eq!(c.cell(3).pos, Some(8));
        c.rollback(slot);
        assert_eq!(c.cell(3).pos, Some(3), "rolled back to what it held");
        // without a window nothing in use is free
        let mut plain = Cells::new(6, 2).unwrap();
        place(&mut plain, 0, 0..6);
        assert_eq!(plain.find_slot(1), None);
    }

    #[test]
    fn slots_are_contiguous_when_they_can_be() {
        let mut c = Cells::new(8, 2).unwrap();
        let a = place(&mut c, 0, 0..3);
        assert_eq!(a.cells, vec![0, 1, 2]);
        let b = place(&mut c, 1, 0..2);
        assert_eq!(b.cells, vec![3, 4]);
        assert_eq!(c.used(), 5);
    }

    #[test]
    fn a_fragmented_cache_gives_scattered_slots_and_then_none() {
        let mut c = Cells::new(6, 2).unwrap();
        place(&mut c, 0, 0..6);
        // free cells 1 and 4: no run of two exists
        c.seq_rm(Some(0), Some(1), Some(2)).unwrap();
        c.seq_rm(Some(0), Some(4), Some(5)).unwrap();
        let s = c.find_slot(2).unwrap();
        assert_eq!(s, vec![1, 4]);
        assert!(c.find_slot(3).is_none(), "only two cells are free");
    }

    #[test]
    fn rollback_restores_the_cells() {
        let mut c = Cells::new(8, 2).unwrap();
        place(&mut c, 0, 0..4);
        let before = c.clone();
        let s = place(&mut c, 1, 0..3);
        assert_ne!(c, before);
        c.rollback(s);
        assert_eq!(c, before);
    }

    #[test]
    fn sequence_operations() {
        let mut c = Cells::new(10, 3).unwrap();
        place(&mut c, 0, 0..5);
        // cp: sequence 1 shares positions 0..3 of sequence 0
        c.seq_cp(0, 1, None, Some(3)).unwrap();
        assert_eq!(c.seq_pos_max(1), Some(2));
        assert!(c.cell(0).has_seq(0) && c.cell(0).has_seq(1));
        // rm sequence 0 from 0..2: the shared cells stay for sequence 1
        c.seq_rm(Some(0), None, Some(2)).unwrap();
        assert_eq!(c.used(), 5);
        assert_eq!(c.seq_pos_min(0), Some(2));
        // keep 1: sequence 0 leaves, cells only it held empty
        c.seq_keep(1).unwrap();
        assert_eq!(c.used(), 3);
        assert_eq!(c.seq_pos_max(0), None);
        // add: shift sequence 1 by +10 (pending shift recorded)
        c.seq_add(1, None, None, 10).unwrap();
        assert_eq!((c.seq_pos_min(1), c.seq_pos_max(1)), (Some(10), Some(12)));
        assert!(c.has_shift());
        assert_eq!(c.shifts()[0], 10);
        // div by 4: 10, 11, 12 -> 2, 2, 3
        c.seq_div(1, None, None, 4).unwrap();
        assert_eq!((c.seq_pos_min(1), c.seq_pos_max(1)), (Some(2), Some(3)));
        assert_eq!(c.shifts()[0], 2);
        // add below zero removes
        c.seq_add(1, None, None, -3).unwrap();
        assert_eq!(c.used(), 1);
        // out-of-range sequences are errors
        assert!(c.seq_rm(Some(3), None, None).is_err());
        assert!(c.seq_cp(0, 7, None, None).is_err());
    }

    #[test]
    fn shifting_a_shared_cell_is_an_error() {
        let mut c = Cells::new(4, 2).unwrap();
        place(&mut c, 0, 0..2);
        c.seq_cp(0, 1, None, None).unwrap();
        assert!(c.seq_add(0, None, None, 1).is_err());
    }

    #[test]
    fn a_refused_shift_or_division_changes_no_cell() {
        // sequence 0 at positions 0..4; sequence 1 shares only position 3,
        // so cells 0..3 are sequence 0's alone and come before the shared one
        let mut c = Cells::new(6, 2).unwrap();
        place(&mut c, 0, 0..4);
        c.seq_cp(0, 1, Some(3), Some(4)).unwrap();
        let before = c.clone();
        // a shift that would push the first cells below 0 (clearing them)
        // and move the others, then meets the shared cell
        assert!(c.seq_add(0, None, None, -2).is_err());
        assert_eq!(c, before, "seq_add left the cells as they were");
        assert!(c.seq_add(0, Some(1), None, 5).is_err());
        assert_eq!(c, before);
        assert!(c.seq_div(0, None, None, 2).is_err());
        assert_eq!(c, before, "seq_div left the cells as they were");
        assert!(!c.has_shift());
        // outside the shared cell the same operations go through
        c.seq_add(0, None, Some(3), 1).unwrap();
        assert_eq!(c.shifts()[..4], [1, 1, 1, 0]);
    }

    #[test]
    fn defrag_packs_the_used_cells_at_the_front() {
        let mut c = Cells::new(10, 1).unwrap();
        place(&mut c, 0, 0..10);
        for p in [1, 3, 4, 8] {
            c.seq_rm(Some(0), Some(p), Some(p + 1)).unwrap();
        }
        let moves = c.defrag_plan();
        let positions_before: Vec<i32> = {
            let mut v: Vec<i32> = c.cells().iter().filter_map(|x| x.pos).collect();
            v.sort();
            v
        };
        c.apply_moves(&moves);
        assert_eq!(c.used_end(), 6, "six cells, packed");
        let mut after: Vec<i32> = c.cells().iter().filter_map(|x| x.pos).collect();
        after.sort();
        assert_eq!(after, positions_before);
        assert!(c.defrag_plan().is_empty(), "nothing left to move");
        let s = c.find_slot(4).unwrap();
        assert_eq!(s, vec![6, 7, 8, 9]);
    }
}
