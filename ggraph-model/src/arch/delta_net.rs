//! Gated DeltaNet's block, Qwen3.5's linear attention (a recurrent
//! layer's): `attn_qkv` gives q, k and v, convolved per channel over the
//! last `d_conv` tokens (the state carries the `d_conv - 1` before the
//! ubatch) through SiLU; q and k L2-normed; beta = sigmoid(`ssm_beta` x),
//! the gate softplus(`ssm_alpha` x + dt bias) times A; the delta rule's
//! recurrence (`gated_delta_net`, its state matrix per head the second
//! state kept); RMS-normed per head and gated by SiLU(`attn_gate` x);
//! projected out. As llama.cpp's qwen35 `build_layer_attn_linear`.

use ggraph_core::error::Result;
use ggraph_core::ir::{GraphBuilder, TensorId, UnaryOp};

use super::config::ModelConfig;
use super::recurrent::RecurrentBuild;
use super::weights::Tensors;

/// `x` L2-normalised along its rows as llama.cpp's `build_gdn_l2_norm`
/// computes it: an RMS norm with `eps / n`, scaled by `1 / sqrt(n)`.
fn l2_norm(b: &mut GraphBuilder, x: TensorId, eps: f32) -> Result<TensorId> {
    let n = b.tensor(x)?.ne[0] as f32;
    let r = b.rms_norm(x, eps / n)?;
    b.scale(r, 1.0 / n.sqrt())
}

/// Layer `il`'s Gated DeltaNet block on `cur` `[n_embd, n_tokens]`, the
/// tokens being `shape.n_seqs` equal runs of one sequence each.
pub fn gated_delta_net(
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
    // key heads (groups) and value heads, each of the state size
    let (s, n_k, n_v) = (c.ssm_d_state, c.ssm_n_group, c.ssm_n_head);
    let channels = c.ssm_conv_channels();
    let d_conv = c.ssm_d_conv;
    let f = std::mem::size_of::<f32>();
    let name = |x: &str| format!("blk.{il}.{x}");
    let w_qkv = weights.req(b, &name("attn_qkv.weight"))?;
    let w_gate = weights.req(b, &name("attn_gate.weight"))?;
    let kernel = weights.req(b, &name("ssm_conv1d.weight"))?;
    let dt_bias = weights.req(b, &name("ssm_dt.bias"))?;
    let a = weights.req(b, &name("ssm_a"))?;
    let w_beta = weights.req(b, &name("ssm_beta.weight"))?;
    let w_alpha = weights.req(b, &name("ssm_alpha.weight"))?;
    let norm = weights.req(b, &name("ssm_norm.weight"))?;
    let w_out = weights.req(b, &name("ssm_out.weight"))?;

    // llama.cpp's names, so that a decode can be compared with its tensor
    // by tensor
    let named = |b: &mut GraphBuilder, t: TensorId, what: &str| -> Result<TensorId> {
        b.set_name(t, &format!("{what}-{il}"))?;
        Ok(t)
    };
    let qkv = b.mul_mat(w_qkv, cur)?;
    named(b, qkv, "linear_attn_qkv_mixed")?;
    let qkv = b.reshape(qkv, &[channels, nst, n_seqs])?;
    let z = b.mul_mat(w_gate, cur)?;
    named(b, z, "z")?;
    let beta = b.mul_mat(w_beta, cur)?;
    named(b, beta, "beta")?;
    let beta = b.unary(UnaryOp::Sigmoid, beta)?;
    named(b, beta, "beta_sigmoid")?;
    let beta = b.reshape(beta, &[1, n_v, nst, n_seqs])?;
    let alpha = b.mul_mat(w_alpha, cur)?;
    named(b, alpha, "alpha")?;
    let alpha = b.add(alpha, dt_bias)?;
    let alpha = b.unary(UnaryOp::Softplus, alpha)?;
    named(b, alpha, "a_softplus")?;
    let gate = b.mul(alpha, a)?;
    named(b, gate, "gate")?;
    let gate = b.reshape(gate, &[1, n_v, nst, n_seqs])?;

    // the convolution over the carried inputs and the ubatch's
    let qkv_t = b.transpose(qkv)?;
    let conv_x = st.conv_input(b, c, il, qkv_t, d_conv - 1)?;
    let conv = b.ssm_conv(conv_x, kernel)?;
    let conv = b.silu(conv)?;
    b.set_name(conv, &format!("conv_output_silu-{il}"))?;

    // q, k and v out of the convolved channels
    let (row, plane) = (channels * f, channels * nst * f);
    let q = b.view_4d(conv, [s, n_k, nst, n_seqs], [s * f, row, plane], 0)?;
    let k = b.view_4d(
        conv,
        [s, n_k, nst, n_seqs],
        [s * f, row, plane],
        s * n_k * f,
    )?;
    let v = b.view_4d(
        conv,
        [s, n_v, nst, n_seqs],
        [s * f, row, plane],
        2 * s * n_k * f,
    )?;
    let q = l2_norm(b, q, c.rms_eps)?;
    named(b, q, "q_conv_predelta")?;
    let k = l2_norm(b, k, c.rms_eps)?;
    named(b, k, "k_conv_predelta")?;

    // the recurrence from each sequence's state
    let scan_rows = st.scan_rows(b, c, il)?;
    let s0 = b.get_rows(scan_rows, st.inputs.read)?;
    let s0 = b.reshape(s0, &[s, s, n_v, n_seqs])?;
    let out = b.gated_delta_net(q, k, v, gate, beta, s0)?;
    let n_out = s * n_v * nst * n_seqs;
    st.write_scan_state(b, c, scan_rows, out, n_out)?;
    let o = b.view_4d(
        out,
        [s, n_v, nst, n_seqs],
        [s * f, s * n_v * f, s * n_v * nst * f],
        0,
    )?;
    named(b, o, "attn_output")?;

    // RMS norm per head, gated by SiLU(z)
    let o = b.rms_norm(o, c.rms_eps)?;
    let o = b.mul(o, norm)?;
    let z = b.reshape(z, &[s, n_v, nst, n_seqs])?;
    let z = b.silu(z)?;
    let o = b.mul(o, z)?;
    let o = b.reshape(o, &[s * n_v, n_tokens])?;
    named(b, o, "final_output")?;
    let out = b.mul_mat(w_out, o)?;
    named(b, out, "linear_attn_out")
}
