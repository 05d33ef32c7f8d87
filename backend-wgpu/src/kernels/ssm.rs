//! State-space model ops: ssm_conv, one thread per result element, and
//! ssm_scan, one thread per state row.

use ggraph_core::Result;
use ggraph_core::ir::{Graph, TensorId, UnaryOp};

use super::args::Params;
use super::elementwise::{run, run_threads, unary_expr};
use super::recorder::Recorder;

/// `dst[i, t, s] = sum over k < d_conv of sx[t + k, i, s] * c[k, i]`, in
/// `k` order.
pub fn ssm_conv(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let t = graph.tensor(node);
    let body = "    var sum = 0.0;
    for (var k = 0u; k < B_ne(0u); k = k + 1u) {
        sum = sum + A_get(i1 + k, i0, i2, 0u) * B_get(k, i0, 0u, 0u);
    }
    D_set(i0, i1, i2, i3, sum);
";
    run(
        rec,
        graph,
        node,
        "ssm_conv",
        &[t.src[0], t.src[1]],
        body,
        Params::new(),
    )
}

/// Largest d_state ssm_scan takes: a thread keeps its state row in a
/// private array of this size.
pub(crate) const MAX_SSM_STATE: usize = 256;

/// ssm_scan: one thread per (i1, h, j), its state row in private memory;
/// y first in the result, then the final states. A sequence id outside
/// the states leaves its rows unwritten (the CPU and CUDA paths say so).
pub fn ssm_scan(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let x = graph.tensor(graph.tensor(node).src[1]);
    let n = (x.ne[0] * x.ne[1] * x.ne[3]) as u64;
    const NAMES: [&str; 7] = ["S", "X", "T", "A", "B", "C", "I"];
    let code = format!(
        r#"    if (idx >= op_u(31u)) {{ return; }}
    let d_state = S_ne(0u);
    let head_dim = X_ne(0u);
    let n_head = X_ne(1u);
    let n_t = X_ne(2u);
    let n_s = X_ne(3u);
    let i1 = idx % head_dim;
    let h = (idx / head_dim) % n_head;
    let j = idx / (head_dim * n_head);
    let grp = h / (n_head / B_ne(1u));
    let id = bitcast<i32>(I_bits(I_row(0u, 0u, 0u) + j * I_nb(0u)));
    if (id < 0 || u32(id) >= S_ne(3u)) {{ return; }}
    var st: array<f32, {MAX_SSM_STATE}>;
    for (var i0 = 0u; i0 < d_state; i0 = i0 + 1u) {{ st[i0] = S_get(i0, i1, h, u32(id)); }}
    for (var t = 0u; t < n_t; t = t + 1u) {{
        let x = T_get(h, t, j, 0u);
        let dd = {softplus};
        let x_dt = X_get(i1, h, t, j) * dd;
        var sum = 0.0;
        for (var i0 = 0u; i0 < d_state; i0 = i0 + 1u) {{
            let decay = exp(dd * A_get(select(i0, 0u, A_ne(0u) == 1u), h, 0u, 0u));
            let w = st[i0] * decay + B_get(i0, grp, t, j) * x_dt;
            sum = sum + w * C_get(i0, grp, t, j);
            st[i0] = w;
        }}
        D_set(((j * n_t + t) * n_head + h) * head_dim + i1, 0u, 0u, 0u, sum);
    }}
    let at = head_dim * n_head * n_t * n_s + ((j * n_head + h) * head_dim + i1) * d_state;
    for (var i0 = 0u; i0 < d_state; i0 = i0 + 1u) {{ D_set(at + i0, 0u, 0u, 0u, st[i0]); }}
"#,
        softplus = unary_expr(UnaryOp::Softplus)
    );
    run_threads(rec, graph, node, "ssm_scan", &NAMES, n, &code)
}
