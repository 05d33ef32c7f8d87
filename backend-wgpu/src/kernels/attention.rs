//! Fused attention (flash_attn_ext): one workgroup per (head, query,
//! sequence) row. Keys are taken 64 at a time; an online softmax keeps the
//! running maximum and sum, so the score matrix never exists in memory.
//! K and V may be f32, f16, bf16, Q8_0 or Q4_0 (dequantised in the kernel).

use ggraph_core::Result;
use ggraph_core::ir::{AlibiBases, Graph, TensorId};

use super::args::{Params, bind};
use super::norm::REDUCE;
use super::pipeline::pipeline;
use super::recorder::Recorder;
use super::wgsl::{Access, Shader, entry};

/// Largest value dimension: each of the 64 threads keeps 8 accumulators.
pub(crate) const MAX_DV: usize = 512;

pub fn flash_attn_ext(
    rec: &mut Recorder,
    graph: &Graph,
    node: TensorId,
    scale: f32,
    max_bias: f32,
    softcap: f32,
) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let q = bind(gpu, graph, t.src[0])?;
    let k = bind(gpu, graph, t.src[1])?;
    let v = bind(gpu, graph, t.src[2])?;
    let (mask, sinks) = t.mask_and_sinks();
    let mask = mask.map(|m| bind(gpu, graph, m)).transpose()?;
    let sinks = sinks.map(|s| bind(gpu, graph, s)).transpose()?;
    let rows = d.nrows();
    if rows == 0 || d.is_empty() {
        return Ok(());
    }
    let key = format!(
        "flash_attn|q={},k={},v={},mask={:?},sinks={}",
        q.dtype,
        k.dtype,
        v.dtype,
        mask.as_ref().map(|m| m.dtype),
        sinks.is_some()
    );
    let bindings = 4 + mask.is_some() as usize + sinks.is_some() as usize;
    let p = pipeline(gpu, &key, bindings, || {
        let mask_value = if mask.is_some() {
            "E_get(j, iq, h % E_ne(2u), is % E_ne(3u))"
        } else {
            "0.0"
        };
        // the head's sink joins the maximum and the sum, and adds no value
        let sink = if sinks.is_some() {
            r#"    let sk = F_get(h, 0u, 0u, 0u);
    let sink_max = max(run_max, sk);
    var sink_corr = 0.0;
    if (!is_neg_inf(run_max)) { sink_corr = exp(run_max - sink_max); }
    run_sum = run_sum * sink_corr + exp(sk - sink_max);
    for (var qq = 0u; qq < 8u; qq++) { acc[qq] = acc[qq] * sink_corr; }
"#
        } else {
            ""
        };
        let code = format!(
            r#"    if (gi >= op_u(31u)) {{ return; }}
    let h = gi % D_ne(1u);
    let iq = (gi / D_ne(1u)) % D_ne(2u);
    let is = gi / (D_ne(1u) * D_ne(2u));
    let dk = A_ne(0u);
    let dv = C_ne(0u);
    let n_kv = B_ne(1u);
    let group = max(1u, A_ne(2u) / max(1u, B_ne(2u)));
    let hk = h / group;
    var slope = 1.0;
    if (op_f(1u) > 0.0) {{
        let nl = op_u(4u);
        if (h < nl) {{ slope = pow(op_f(2u), f32(h + 1u)); }}
        else {{ slope = pow(op_f(3u), f32(2u * (h - nl) + 1u)); }}
    }}
    let qrow = A_row(iq, h, is);
    var acc: array<f32, 8>;
    var run_max = neg_inf();
    var run_sum = 0.0;
    for (var j0 = 0u; j0 < n_kv; j0 += 64u) {{
        let j = j0 + lid;
        var s = neg_inf();
        if (j < n_kv) {{
            let mv = {mask_value};
            if (!is_neg_inf(mv)) {{
                let kr = B_row(j, hk, is);
                var dot = 0.0;
                for (var c = 0u; c < dk; c++) {{ dot += A_at(qrow, c) * B_at(kr, c); }}
                s = dot * op_f(0u);
                if (op_f(5u) != 0.0) {{ s = op_f(5u) * tanh(clamp(s / op_f(5u), -15.0, 15.0)); }}
                s += slope * mv;
            }}
        }}
        let new_max = max(run_max, reduce_max(s, lid));
        var corr = 0.0;
        if (!is_neg_inf(run_max)) {{ corr = exp(run_max - new_max); }}
        var pj = 0.0;
        if (!is_neg_inf(s)) {{ pj = exp(s - new_max); }}
        run_sum = run_sum * corr + reduce_sum(pj, lid);
        probs[lid] = pj;
        workgroupBarrier();
        let nj = min(64u, n_kv - j0);
        for (var qq = 0u; qq < 8u; qq++) {{
            let c = lid + 64u * qq;
            if (c < dv) {{
                var a = acc[qq] * corr;
                for (var jj = 0u; jj < nj; jj++) {{
                    let w = probs[jj];
                    if (w != 0.0) {{ a += w * C_at(C_row(j0 + jj, hk, is), c); }}
                }}
                acc[qq] = a;
            }}
        }}
        workgroupBarrier();
        run_max = new_max;
    }}
{sink}    for (var qq = 0u; qq < 8u; qq++) {{
        let c = lid + 64u * qq;
        if (c < dv) {{
            var o = 0.0;
            if (run_sum > 0.0) {{ o = acc[qq] / run_sum; }}
            D_set(c, h, iq, is, o);
        }}
    }}
"#
        );
        let mut sh = Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, q.dtype, Access::Read)
            .tensor("B", 2, k.dtype, Access::Read)
            .tensor("C", 3, v.dtype, Access::Read);
        if let Some(m) = &mask {
            sh = sh.tensor("E", 4, m.dtype, Access::Read);
        }
        if let Some(s) = &sinks {
            sh = sh.tensor("F", 4 + mask.is_some() as usize, s.dtype, Access::Read);
        }
        sh.code(REDUCE)
            .code("var<workgroup> probs: array<f32, 64>;\n")
            .code(&entry(64, &code))
            .finish()
    })?;
    let alibi = AlibiBases::new(max_bias, q.ne[2] as usize);
    let mut params = Params::new();
    params
        .setf(0, scale)
        .setf(1, max_bias)
        .setf(2, alibi.m0)
        .setf(3, alibi.m1)
        .set(4, alibi.n_head_log2)
        .setf(5, softcap)
        .set(31, rows as u32);
    let mut tensors = vec![&d, &q, &k, &v];
    tensors.extend(mask.as_ref());
    tensors.extend(sinks.as_ref());
    rec.dispatch(p, &tensors, params, rows)
}
