//! LFM2's gated short convolution, a recurrent layer's block: the input
//! projected to B, C and x; B*x convolved per channel over the last
//! `l_cache` tokens (the state carries the `l_cache - 1` before the
//! ubatch); C times that, projected out. The state of each sequence is
//! read from one row of the layer's state tensor and written to another
//! (the memory picks both: a failed ubatch leaves the state it read).

use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GraphBuilder, TensorId};

use super::config::ModelConfig;
use super::shape::RecurrentShape;
use super::weights::Tensors;
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
            read: b.input("rs_read", ggraph_core::dtype::DType::I32, &[n_seqs])?,
            write: b.input("rs_write", ggraph_core::dtype::DType::I32, &[n_seqs])?,
        })
    }
}

/// Layer `il`'s short convolution of `cur` `[n_embd, n_tokens]`, the
/// tokens being `shape.n_seqs` equal runs of one sequence each.
pub fn short_conv(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    state: &mut dyn CacheSource,
    shape: &RecurrentShape,
    inputs: &RecurrentInputs,
    il: usize,
    cur: TensorId,
) -> Result<TensorId> {
    let (e, n_tokens) = (c.n_embd, b.tensor(cur)?.ne[1]);
    let n_seqs = shape.n_seqs;
    if n_seqs == 0 || n_tokens % n_seqs != 0 {
        return Err(Error::InvalidArgument(format!(
            "{n_tokens} tokens are not {n_seqs} equal sequences"
        )));
    }
    let n_seq_tokens = n_tokens / n_seqs;
    let d_conv = c.shortconv_l_cache - 1;
    let name = |s: &str| format!("blk.{il}.shortconv.{s}.weight");
    let in_proj = weights.req(b, &name("in_proj"))?;
    let kernel = weights.req(b, &name("conv"))?;
    let out_proj = weights.req(b, &name("out_proj"))?;

    let bcx = b.mul_mat(in_proj, cur)?;
    let bcx = b.reshape(bcx, &[3 * e, n_seq_tokens, n_seqs])?;
    b.set_name(bcx, &format!("conv_in_proj-{il}"))?;
    let (nb1, nb2) = {
        let t = b.tensor(bcx)?;
        (t.nb[1], t.nb[2])
    };
    let chunk = |b: &mut GraphBuilder, k: usize| {
        b.view_3d(bcx, [e, n_seq_tokens, n_seqs], nb1, nb2, k * e * 4)
    };
    let (gate_b, gate_c, x) = (chunk(b, 0)?, chunk(b, 1)?, chunk(b, 2)?);
    let bx = b.mul(gate_b, x)?;
    let bx = b.transpose(bx)?;

    let rows = state.layer_state(b, il, StatePart::Conv, c.n_embd_r(), shape.rows)?;
    let carried = b.get_rows(rows, inputs.read)?;
    let carried = b.reshape(carried, &[d_conv, e, n_seqs])?;
    // per channel: the carried inputs, then the ubatch's
    let sx = b.concat(carried, bx, 0)?;

    // the last d_conv inputs of each channel are the state after the ubatch
    let (sx_len, sx_nb1, sx_nb2) = {
        let t = b.tensor(sx)?;
        (t.ne[0], t.nb[1], t.nb[2])
    };
    let last = b.view_3d(
        sx,
        [d_conv, e, n_seqs],
        sx_nb1,
        sx_nb2,
        (sx_len - d_conv) * 4,
    )?;
    let last = b.cont(last)?;
    let last = b.reshape(last, &[d_conv * e, n_seqs])?;
    let written = b.set_rows(rows, last, inputs.write)?;
    b.expand(written)?;

    let conv = b.ssm_conv(sx, kernel)?;
    b.set_name(conv, &format!("conv-{il}"))?;
    let y = b.mul(gate_c, conv)?;
    let y = b.reshape(y, &[e, n_tokens])?;
    b.mul_mat(out_proj, y)
}
