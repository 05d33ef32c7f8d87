//! Mamba-2's block, a recurrent layer's: the input projected to z, x, B,
//! C and dt; x, B and C convolved per channel over the last `d_conv`
//! tokens (the state carries the `d_conv - 1` before the ubatch), through
//! SiLU; the selective scan of x over the heads with B, C, dt, A (its
//! state the second one kept), plus D times x; gated by SiLU(z),
//! RMS-normed per group of heads, projected out. As llama.cpp's
//! `build_mamba2_layer`, whose tensor names it reads.

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::{GluOp, GraphBuilder, TensorId};

use super::config::ModelConfig;
use super::recurrent::RecurrentBuild;
use super::weights::Tensors;

/// Layer `il`'s Mamba-2 block on `cur` `[n_embd, n_tokens]`, the tokens
/// being `shape.n_seqs` equal runs of one sequence each.
pub fn mamba2(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    st: &mut RecurrentBuild<'_>,
    il: usize,
    cur: TensorId,
) -> Result<TensorId> {
    let n_tokens = b.tensor(cur)?.ne[1];
    let nst = st.seq_tokens(n_tokens)?;
    let n_seqs = st.shape.n_seqs;
    let (inner, heads, groups, d_state) =
        (c.ssm_d_inner, c.ssm_n_head, c.ssm_n_group, c.ssm_d_state);
    let head_dim = inner / heads;
    let channels = c.ssm_conv_channels();
    let d_conv = c.ssm_d_conv;
    let d_in_proj = inner + channels + heads;
    let f = std::mem::size_of::<f32>();
    let name = |s: &str| format!("blk.{il}.{s}");
    let ssm_in = weights.req(b, &name("ssm_in.weight"))?;
    let kernel = weights.req(b, &name("ssm_conv1d.weight"))?;
    let conv_bias = weights.opt(b, &name("ssm_conv1d.bias"))?;
    let dt_bias = weights.req(b, &name("ssm_dt.bias"))?;
    let a = weights.req(b, &name("ssm_a"))?;
    let d = weights.req(b, &name("ssm_d"))?;
    let norm = weights.req(b, &name("ssm_norm.weight"))?;
    let ssm_out = weights.req(b, &name("ssm_out.weight"))?;

    let zx = b.mul_mat(ssm_in, cur)?;
    let zx = b.reshape(zx, &[d_in_proj, nst, n_seqs])?;
    let (nb1, nb2) = {
        let t = b.tensor(zx)?;
        (t.nb[1], t.nb[2])
    };
    let z = b.view_4d(
        zx,
        [head_dim, heads, nst, n_seqs],
        [head_dim * f, nb1, nb2],
        0,
    )?;
    let xbc = b.view_3d(zx, [channels, nst, n_seqs], nb1, nb2, inner * f)?;
    let dt = b.view_3d(zx, [heads, nst, n_seqs], nb1, nb2, (inner + channels) * f)?;

    // the convolution over the carried inputs and the ubatch's
    let xbc_t = b.transpose(xbc)?;
    let conv_x = st.conv_input(b, c, il, xbc_t, d_conv - 1)?;
    let mut xbc = b.ssm_conv(conv_x, kernel)?;
    if let Some(bias) = conv_bias {
        xbc = b.add(xbc, bias)?;
    }
    let xbc = b.silu(xbc)?;
    b.set_name(xbc, &format!("ssm_conv-{il}"))?;

    // the scan
    let (xb1, xb2) = {
        let t = b.tensor(xbc)?;
        (t.nb[1], t.nb[2])
    };
    let x = b.view_4d(
        xbc,
        [head_dim, heads, nst, n_seqs],
        [head_dim * f, xb1, xb2],
        0,
    )?;
    let bc = |b: &mut GraphBuilder, at: usize| {
        b.view_4d(
            xbc,
            [d_state, groups, nst, n_seqs],
            [d_state * f, xb1, xb2],
            at * f,
        )
    };
    let (gate_b, gate_c) = (bc(b, inner)?, bc(b, inner + groups * d_state)?);
    let dt = b.cont(dt)?;
    let dt = b.add(dt, dt_bias)?;
    let scan_rows = st.scan_rows(b, c, il)?;
    let scan4 = b.reshape(scan_rows, &[d_state, head_dim, heads, st.shape.rows])?;
    let scanned = b.ssm_scan(scan4, x, dt, a, gate_b, gate_c, st.inputs.read)?;
    let n_y = head_dim * heads * nst * n_seqs;
    st.write_scan_state(b, c, scan_rows, scanned, n_y)?;
    let row = head_dim * f;
    let y = b.view_4d(
        scanned,
        [head_dim, heads, nst, n_seqs],
        [row, heads * row, nst * heads * row],
        0,
    )?;
    let skip = b.mul(x, d)?;
    let y = b.add(y, skip)?;
    b.set_name(y, &format!("mamba2_y_add_d-{il}"))?;
    let z = b.cont(z)?;
    let y = b.glu_split(GluOp::Swiglu, z, y)?;

    // RMS norm per group of heads
    let y = b.reshape(y, &[inner / groups, groups, nst, n_seqs])?;
    let y = b.rms_norm(y, c.rms_eps)?;
    let y = b.mul(y, norm)?;
    let y = b.reshape(y, &[inner, n_tokens])?;
    debug_assert_eq!(b.tensor(y)?.dtype, DType::F32);
    let out = b.mul_mat(ssm_out, y)?;
    b.set_name(out, &format!("mamba_out-{il}"))?;
    Ok(out)
}
