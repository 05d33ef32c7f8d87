//! What every recurrent layer's block shares: the graph inputs that name
//! each sequence's state rows, the ubatch's equal runs of tokens, the
//! convolution input joined to the carried state (whose last columns are
//! written back), and the final state written after a scan. The state of
//! each sequence is read from one row of the layer's state tensor and
//! written to another (the memory picks both: a failed ubatch leaves the
//! state it read).

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GraphBuilder, TensorId};

use super::config::ModelConfig;
use super::shape::RecurrentShape;
use crate::kv::{CacheSource, StatePart};

/// The graph inputs of the recurrent layers: for each sequence of the
/// ubatch, in order, the state row it reads and the row it writes.
#[derive(Clone, Copy, Debug)]
pub struct RecurrentInputs {
    /// I32 `[n_seqs]`: rows of each layer's state read.
    pub read: TensorId,
    /// I32 `[n_seqs]`: rows written with the state after the ubatch.
    pub write: TensorId,
}

impl RecurrentInputs {
    /// The two inputs of a ubatch of `n_seqs` sequences.
    pub fn new(b: &mut GraphBuilder, n_seqs: usize) -> Result<RecurrentInputs> {
        Ok(RecurrentInputs {
            read: b.input("rs_read", DType::I32, &[n_seqs])?,
            write: b.input("rs_write", DType::I32, &[n_seqs])?,
        })
    }
}

/// A recurrent layer's view of one graph build: the state tensors, the
/// ubatch's sequences and the rows they read and write.
pub struct RecurrentBuild<'a> {
    pub state: &'a mut dyn CacheSource,
    pub shape: &'a RecurrentShape,
    pub inputs: &'a RecurrentInputs,
}

impl RecurrentBuild<'_> {
    /// Tokens per sequence of a ubatch of `n_tokens`: its sequences are
    /// equal runs.
    pub fn seq_tokens(&self, n_tokens: usize) -> Result<usize> {
        let n_seqs = self.shape.n_seqs;
        if n_seqs == 0 || n_tokens % n_seqs != 0 {
            return Err(Error::InvalidArgument(format!(
                "{n_tokens} tokens are not {n_seqs} equal sequences"
            )));
        }
        Ok(n_tokens / n_seqs)
    }

    /// The input of layer `il`'s convolution: per channel the `cols`
    /// inputs the state carries, then the ubatch's `x_t` `[n_seq_tokens,
    /// channels, n_seqs]`. The last `cols` of each channel are written
    /// back as the state after the ubatch.
    pub fn conv_input(
        &mut self,
        b: &mut GraphBuilder,
        c: &ModelConfig,
        il: usize,
        x_t: TensorId,
        cols: usize,
    ) -> Result<TensorId> {
        let (channels, n_seqs) = (b.tensor(x_t)?.ne[1], self.shape.n_seqs);
        let rows = self
            .state
            .layer_state(b, il, StatePart::Conv, c.n_embd_r(), self.shape.rows)?;
        let carried = b.get_rows(rows, self.inputs.read)?;
        let carried = b.reshape(carried, &[cols, channels, n_seqs])?;
        let sx = b.concat(carried, x_t, 0)?;
        let (len, nb1, nb2) = {
            let t = b.tensor(sx)?;
            (t.ne[0], t.nb[1], t.nb[2])
        };
        let f = std::mem::size_of::<f32>();
        let last = b.view_3d(sx, [cols, channels, n_seqs], nb1, nb2, (len - cols) * f)?;
        let last = b.cont(last)?;
        let last = b.reshape(last, &[cols * channels, n_seqs])?;
        let written = b.set_rows(rows, last, self.inputs.write)?;
        b.expand(written)?;
        Ok(sx)
    }

    /// Layer `il`'s scan state tensor `[n_embd_s, rows]`.
    pub fn scan_rows(
        &mut self,
        b: &mut GraphBuilder,
        c: &ModelConfig,
        il: usize,
    ) -> Result<TensorId> {
        (self.state).layer_state(b, il, StatePart::Scan, c.n_embd_s(), self.shape.rows)
    }

    /// Writes the final states a scan's result `out` holds after its
    /// first `outputs` values (one `n_embd_s` row per sequence) to the
    /// rows the sequences write.
    pub fn write_scan_state(
        &self,
        b: &mut GraphBuilder,
        c: &ModelConfig,
        rows: TensorId,
        out: TensorId,
        outputs: usize,
    ) -> Result<()> {
        let (n, f) = (c.n_embd_s(), std::mem::size_of::<f32>());
        let states = b.view_2d(out, n, self.shape.n_seqs, n * f, outputs * f)?;
        let written = b.set_rows(rows, states, self.inputs.write)?;
        b.expand(written)
    }
}
