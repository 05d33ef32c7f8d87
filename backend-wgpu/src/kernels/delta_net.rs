//! Gated DeltaNet's recurrence: one thread per column of a head's state
//! matrix (the delta rule updates each column on its own), the column
//! in private memory; the outputs first in the result, then the final
//! states.

use ggraph_core::Result;
use ggraph_core::ir::{Graph, TensorId};

use super::elementwise::run_threads;
use super::recorder::Recorder;

/// Largest state size (S) gated_delta_net takes: a thread keeps a column
/// of S values in a private array of this size.
pub(crate) const MAX_DELTA_STATE: usize = 256;

/// gated_delta_net: one thread per (column j, head, sequence).
pub fn gated_delta_net(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let v = graph.tensor(graph.tensor(node).src[2]);
    let n = (v.ne[0] * v.ne[1] * v.ne[3]) as u64;
    const NAMES: [&str; 6] = ["Q", "K", "V", "G", "E", "M"];
    let code = format!(
        r#"    if (idx >= op_u(31u)) {{ return; }}
    let s = V_ne(0u);
    let n_head = V_ne(1u);
    let n_t = V_ne(2u);
    let n_s = V_ne(3u);
    let j = idx % s;
    let head = (idx / s) % n_head;
    let seq = idx / (s * n_head);
    let hk = head % Q_ne(1u);
    let sk = seq / (n_s / Q_ne(3u));
    let per_channel = G_ne(0u) == s;
    let scale = 1.0 / sqrt(f32(s));
    var m: array<f32, {MAX_DELTA_STATE}>;
    for (var i = 0u; i < s; i = i + 1u) {{ m[i] = M_get(i, j, head, seq); }}
    for (var t = 0u; t < n_t; t = t + 1u) {{
        let e = exp(G_get(0u, head, t, seq));
        var mk = 0.0;
        for (var i = 0u; i < s; i = i + 1u) {{
            var w = m[i] * e;
            if (per_channel) {{ w = m[i] * exp(G_get(i, head, t, seq)); }}
            m[i] = w;
            mk = mk + w * K_get(i, hk, t, sk);
        }}
        let delta = (V_get(j, head, t, seq) - mk) * E_get(0u, head, t, seq);
        var mq = 0.0;
        for (var i = 0u; i < s; i = i + 1u) {{
            let w = m[i] + K_get(i, hk, t, sk) * delta;
            m[i] = w;
            mq = mq + w * Q_get(i, hk, t, sk);
        }}
        D_set(((seq * n_t + t) * n_head + head) * s + j, 0u, 0u, 0u, mq * scale);
    }}
    let at = s * n_head * n_t * n_s + ((seq * n_head + head) * s + j) * s;
    for (var i = 0u; i < s; i = i + 1u) {{ D_set(at + i, 0u, 0u, 0u, m[i]); }}
"#
    );
    run_threads(rec, graph, node, "gated_delta_net", &NAMES, n, &code)
}
