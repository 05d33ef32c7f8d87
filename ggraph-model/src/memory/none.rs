//! The memory of a model that keeps none between batches (llama.cpp's
//! memory "none": BERT's encoders and the other models it builds
//! without a cache). A batch is one ubatch that attends only to itself;
//! its mask lets a token see the tokens of its sequences in both
//! directions, as llama.cpp's `encode` does whatever the model's
//! `attention.causal` says.

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::Graph;

use crate::arch::{Attention, BuildShape, GraphInputs, ModelConfig};
use crate::kv::{Cells, TokenPlace};

/// No memory: what a batch's positions continue is always empty.
pub struct NoMemory {
    cells: Cells,
    /// The window reaches both ways (a symmetric sliding window).
    symmetric: bool,
    /// A key's entry is minus its distance from the query (ALiBi, whose
    /// slopes the attention applies), not 0.
    alibi: bool,
}

impl NoMemory {
    /// The memory "none" of `config`'s layers, for `n_seq_max`
    /// sequences a batch may hold.
    pub fn new(config: &ModelConfig, n_seq_max: usize) -> Result<NoMemory> {
        Ok(NoMemory {
            cells: Cells::new(0, n_seq_max)?,
            symmetric: config.arch.swa_symmetric,
            alibi: config.max_alibi_bias > 0.0,
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
    /// most `n_swa / 2` away; with ALiBi minus the distance instead of 0),
    /// -inf elsewhere (llama.cpp's `llm_graph_input_attn_no_cache`).
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
                m.push(match (seen, self.alibi) {
                    (false, _) => f32::NEG_INFINITY,
                    (true, false) => 0.0,
                    (true, true) => -(q.pos.abs_diff(k.pos) as f32),
                });
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{BERT, GEMMA_EMBEDDING};

    fn memory(arch: &'static crate::arch::ArchSpec, alibi: f32) -> NoMemory {
        let mut c = ModelConfig::new(arch, 10, 8, 1, 2, 2, 16);
        c.max_alibi_bias = alibi;
        NoMemory::new(&c, 2).expect("2 sequences are within MAX_SEQS")
    }

    #[test]
    fn tokens_see_their_sequences_both_ways() {
        let none = memory(&BERT, 0.0);
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
        let both_ways = memory(&GEMMA_EMBEDDING, 0.0);
        let sym = [0.0, 0.0, inf, 0.0, 0.0, 0.0, inf, 0.0, 0.0];
        assert_eq!(both_ways.mask(&line, 2), sym);
        // ALiBi: minus the distance where a key is seen
        let alibi = memory(&BERT, 8.0);
        let far = [0.0, -1.0, inf, -1.0, 0.0, inf, inf, inf, 0.0];
        assert_eq!(alibi.mask(&places, 0), far);
        assert_eq!(none.cells().size(), 0);
    }
}
