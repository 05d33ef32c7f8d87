//! LFM2's gated short convolution, a recurrent layer's block: the input
//! projected to B, C and x; B*x convolved per channel over the last
//! `l_cache` tokens (the state carries the `l_cache - 1` before the
//! ubatch); C times that, projected out.

use ggraph_core::error::Result;
use ggraph_core::ir::{GraphBuilder, TensorId};

use super::config::ModelConfig;
use super::recurrent::RecurrentBuild;
use super::weights::Tensors;

/// Layer `il`'s short convolution of `cur` `[n_embd, n_tokens]`, the
/// tokens being `shape.n_seqs` equal runs of one sequence each.
pub fn short_conv(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    st: &mut RecurrentBuild<'_>,
    il: usize,
    cur: TensorId,
) -> Result<TensorId> {
    let (e, n_tokens) = (c.n_embd, b.tensor(cur)?.ne[1]);
    let n_seq_tokens = st.seq_tokens(n_tokens)?;
    let n_seqs = st.shape.n_seqs;
    let d_conv = c.shortconv_l_cache - 1;
    let name = |s: &str| format!("blk.{il}.shortconv.{s}.weight");
    let in_proj = weights.req(b, &name("in_proj"))?;
    let kernel = weights.req(b, &name("conv"))?;
    let out_proj = weights.req(b, &name("out_proj"))?;

    let bcx = b.mul_mat(in_proj, cur)?;
    let bcx = b.reshape(bcx, &[3 * e, n_seq_tokens, n_seqs])?;
    // llama.cpp's names (literally with "{}"), so that a decode can be
    // compared with its tensor by tensor
    b.set_name(bcx, &format!("model.layers.{{}}.conv.in_proj-{il}"))?;
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

    // per channel: the carried inputs, then the ubatch's
    let sx = st.conv_input(b, c, il, bx, d_conv)?;

    let conv = b.ssm_conv(sx, kernel)?;
    b.set_name(conv, &format!("model.layers.{{}}.conv.conv-{il}"))?;
    let y = b.mul(gate_c, conv)?;
    let y = b.reshape(y, &[e, n_tokens])?;
    let out = b.mul_mat(out_proj, y)?;
    b.set_name(out, &format!("model.layers.{{}}.conv.out_proj-{il}"))?;
    Ok(out)
}
