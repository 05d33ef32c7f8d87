//! The memory of a model that keeps none between batches (llama.cpp's
//! memory "none": BERT's encoders and the other models it builds
//! without a cache). A batch is one ubatch that attends only to itself;
//! its mask lets a token see the tokens of its sequences in both
//! directions, as llama.cpp's `encode` does whatever the model's
//! `attention.causal` says.

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::Graph;

use crate::arch::{Attention, BuildShape, GraphInputs};
use crate::kv::{Cells, TokenPlace};

/// No memory: what a batch's positions continue is always empty.
pub struct NoMemory {
    cells: Cells,
    /// The window reaches both ways (a symmetric sliding window).
    symmetric: bool,
}

impl NoMemory {
    /// The memory "none", for `n_seq_max` sequences a batch may hold; a
    /// sliding window reaches both ways where `symmetric`.
    pub fn new(n_seq_max: usize, symmetric: bool) -> Result<NoMemory> {
        Ok(NoMemory {
            cells: Cells::new(0, n_seq_max)?,
            symmetric,
        })
    }

    /// No cells: every batch starts its sequences afresh.
    pub fn cells(&self) -> &Cells {
        &self.cells
    }

    /// The shape of a ubatch's graph: its tokens attend to themselves.
    pub fn shape(&self, n_tokens: usize, n_outputs: usize, attention: Attention) -> BuildShape {
        let mut shape = BuildShape::prompt(n_tokens, attention);
        shape.n_outputs = n_outputs;
        // as ggml builds it: F32 unless flash attention reads it
        shape.mask_type = match attention {
            Attention::Flash => DType::F16,
            Attention::Standard => DType::F32,
        };
        shape
    }

    /// Fills the graph's masks.
    pub fn set_inputs(
        &self,
        g: &Graph,
        inputs: &GraphInputs,
        places: &[TokenPlace],
        n_swa: usize,
    ) -> Result<()> {
        if let Some(m) = inputs.kq_mask {
            g.write_f32(m, &self.mask(places, 0))?;
        }
        if let Some(m) = inputs.kq_mask_swa {
            g.write_f32(m, &self.mask(places, n_swa))?;
        }
        Ok(())
    }

    /// `[n_tokens, n_tokens]`, a row per token: 0 where the other token
    /// shares a sequence with it (with a window `n_swa` > 0, and is less
    /// than `n_swa` positions before it, or with a symmetric window at
    /// most `n_swa / 2` away), -inf elsewhere (llama.cpp's
    /// `llm_graph_input_attn_no_cache`).
    pub fn mask(&self, places: &[TokenPlace], n_swa: usize) -> Vec<f32> {
        let mut m = Vec::with_capacity(places.len() * places.len());
        let in_window = |d: i64| match (n_swa, self.symmetric) {
            (0, _) => true,
            (w, true) => d.abs() <= (w / 2) as i64,
            (w, false) => d < w as i64,
        };
        for q in places {
            for k in places {
                let seen = q.seqs & k.seqs != 0 && in_window(i64::from(q.pos) - i64::from(k.pos));
                m.push(if seen { 0.0 } else { f32::NEG_INFINITY });
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_see_their_sequences_both_ways() {
        let none = NoMemory::new(2, false).unwrap();
        let places = [
            TokenPlace { pos: 0, seqs: 1 },
            TokenPlace { pos: 1, seqs: 1 },
            TokenPlace { pos: 0, seqs: 2 },
        ];
        let inf = f32::NEG_INFINITY;
        let both = [0.0, 0.0, inf, 0.0, 0.0, inf, inf, inf, 0.0];
        assert_eq!(none.mask(&places, 0), both);
        // a window of 2 masks what is 2 or more positions back (never
        // ahead); a symmetric one what is more than one away either way
        let row = |p: i32| TokenPlace { pos: p, seqs: 1 };
        let line = [row(0), row(1), row(2)];
        let back = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, inf, 0.0, 0.0];
        assert_eq!(none.mask(&line, 2), back);
        let both_ways = NoMemory::new(2, true).unwrap();
        let sym = [0.0, 0.0, inf, 0.0, 0.0, 0.0, inf, 0.0, 0.0];
        assert_eq!(both_ways.mask(&line, 2), sym);
        assert_eq!(none.cells().size(), 0);
    }
}
