//! Row reductions, one workgroup per row: rms_norm, norm, sum_rows and
//! soft_max (with mask broadcasting and ALiBi slopes).

use ggraph_core::Result;
use ggraph_core::ir::{AlibiBases, Graph, TensorId};

use super::args::{Params, bind};
use super::pipeline::pipeline;
use super::recorder::Recorder;
use super::wgsl::{Access, Shader, entry};

/// Threads per row.
const RW: u32 = 64;

/// Shared reductions over the workgroup (call from uniform control flow).
pub(crate) const REDUCE: &str = r#"
var<workgroup> red: array<f32, 64>;
fn reduce_sum(v: f32, lid: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lid < s) { red[lid] += red[lid + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
fn reduce_max(v: f32, lid: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
"#;

/// The row (i1, i2, i3) of workgroup `gi`, and the row length `n`.
const ROW: &str = r#"    if (gi >= op_u(31u)) { return; }
    let n = A_ne(0u);
    let i1 = gi % A_ne(1u);
    let i2 = (gi / A_ne(1u)) % A_ne(2u);
    let i3 = gi / (A_ne(1u) * A_ne(2u));
"#;

pub(crate) enum RowOp {
    RmsNorm(f32),
    Norm(f32),
    SumRows,
}

pub fn rows(rec: &mut Recorder, graph: &Graph, node: TensorId, op: RowOp) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[0])?;
    let rows = a.nrows();
    if rows == 0 || d.is_empty() {
        return Ok(());
    }
    let (name, eps, body) = match op {
        RowOp::RmsNorm(eps) => (
            "rms_norm",
            eps,
            r#"    var s = 0.0;
    for (var i = lid; i < n; i += 64u) { let x = A_get(i, i1, i2, i3); s += x * x; }
    let sc = 1.0 / sqrt(reduce_sum(s, lid) / f32(n) + op_f(0u));
    for (var i = lid; i < n; i += 64u) { D_set(i, i1, i2, i3, A_get(i, i1, i2, i3) * sc); }
"#,
        ),
        RowOp::Norm(eps) => (
            "norm",
            eps,
            r#"    var s = 0.0;
    for (var i = lid; i < n; i += 64u) { s += A_get(i, i1, i2, i3); }
    let mean = reduce_sum(s, lid) / f32(n);
    var v = 0.0;
    for (var i = lid; i < n; i += 64u) { let x = A_get(i, i1, i2, i3) - mean; v += x * x; }
    let sc = 1.0 / sqrt(reduce_sum(v, lid) / f32(n) + op_f(0u));
    for (var i = lid; i < n; i += 64u) { D_set(i, i1, i2, i3, (A_get(i, i1, i2, i3) - mean) * sc); }
"#,
        ),
        RowOp::SumRows => (
            "sum_rows",
            0.0,
            r#"    var s = 0.0;
    for (var i = lid; i < n; i += 64u) { s += A_get(i, i1, i2, i3); }
    let total = reduce_sum(s, lid);
    if (lid == 0u) { D_set(0u, i1, i2, i3, total); }
"#,
        ),
    };
    let key = format!("{name}|{}>{}", a.dtype, d.dtype);
    let p = pipeline(gpu, &key, 2, || {
        Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .code(REDUCE)
            .code(&entry(RW, &format!("{ROW}{body}")))
            .finish()
    })?;
    let mut params = Params::new();
    params.setf(0, eps).set(31, rows as u32);
    rec.dispatch(p, &[&d, &a], params, rows)
}

/// softmax(a * scale + mask * slope) along rows.
pub fn soft_max(
    rec: &mut Recorder,
    graph: &Graph,
    node: TensorId,
    scale: f32,
    max_bias: f32,
) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[0])?;
    let (mask, sinks) = t.mask_and_sinks();
    let mask = mask.map(|m| bind(gpu, graph, m)).transpose()?;
    let sinks = sinks.map(|s| bind(gpu, graph, s)).transpose()?;
    let rows = a.nrows();
    if rows == 0 || d.is_empty() {
        return Ok(());
    }
    let mask_type = mask.as_ref().map(|m| m.dtype);
    let key = format!(
        "soft_max|{}>{}|mask={mask_type:?}|sinks={}",
        a.dtype,
        d.dtype,
        sinks.is_some()
    );
    let bindings = 2 + mask.is_some() as usize + sinks.is_some() as usize;
    let p = pipeline(gpu, &key, bindings, || {
        let mask_term = if mask.is_some() {
            " + slope * B_get(i, i1, i2 % B_ne(2u), i3 % B_ne(3u))"
        } else {
            ""
        };
        // the head's sink joins the maximum and the sum
        let (sink_max, sink_sum) = if sinks.is_some() {
            (
                "    let mx = max(row_max, S_get(i2, 0u, 0u, 0u));\n",
                " + exp(S_get(i2, 0u, 0u, 0u) - mx)",
            )
        } else {
            ("    let mx = row_max;\n", "")
        };
        let body = format!(
            r#"    var slope = 1.0;
    if (op_f(1u) > 0.0) {{
        let nl = op_u(4u);
        if (i2 < nl) {{ slope = pow(op_f(2u), f32(i2 + 1u)); }}
        else {{ slope = pow(op_f(3u), f32(2u * (i2 - nl) + 1u)); }}
    }}
    var m = neg_inf();
    for (var i = lid; i < n; i += 64u) {{ m = max(m, A_get(i, i1, i2, i3) * op_f(0u){mask_term}); }}
    let row_max = reduce_max(m, lid);
{sink_max}    var s = 0.0;
    for (var i = lid; i < n; i += 64u) {{
        let v = A_get(i, i1, i2, i3) * op_f(0u){mask_term};
        s += select(exp(v - mx), 0.0, is_neg_inf(v));
    }}
    let total = reduce_sum(s, lid){sink_sum};
    for (var i = lid; i < n; i += 64u) {{
        let v = A_get(i, i1, i2, i3) * op_f(0u){mask_term};
        var p = 0.0;
        if (!is_neg_inf(mx) && !is_neg_inf(v)) {{ p = exp(v - mx) / total; }}
        D_set(i, i1, i2, i3, p);
    }}
"#
        );
        let mut sh = Shader::new().tensor("D", 0, d.dtype, Access::Write).tensor(
            "A",
            1,
            a.dtype,
            Access::Read,
        );
        if let Some(m) = &mask {
            sh = sh.tensor("B", 2, m.dtype, Access::Read);
        }
        if let Some(s) = &sinks {
            sh = sh.tensor("S", 2 + mask.is_some() as usize, s.dtype, Access::Read);
        }
        sh.code(REDUCE)
            .code(&entry(RW, &format!("{ROW}{body}")))
            .finish()
    })?;
    let alibi = AlibiBases::new(max_bias, a.ne[2] as usize);
    let mut params = Params::new();
    params
        .setf(0, scale)
        .setf(1, max_bias)
        .setf(2, alibi.m0)
        .setf(3, alibi.m1)
        .set(4, alibi.n_head_log2)
        .set(31, rows as u32);
    let mut tensors = vec![&d, &a];
    tensors.extend(mask.as_ref());
    tensors.extend(sinks.as_ref());
    rec.dispatch(p, &tensors, params, rows)
}
