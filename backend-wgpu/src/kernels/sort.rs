//! argsort and top_k by ranking: each thread counts, for one element, the
//! elements of its row that sort before it (ties broken by position, so
//! the order is the stable one), and writes its index at that rank.
//! Quadratic in the row length, which is why `supports_op` caps it.

use ggraph_core::ir::{Graph, SortOrder, TensorId};
use ggraph_core::{DType, Result};

use super::args::{Params, WG, bind};
use super::pipeline::pipeline;
use super::recorder::Recorder;
use super::wgsl::{Access, Shader, entry};

/// Longest row argsort and top_k take.
pub(crate) const MAX_SORT_ROW: usize = 16384;

/// argsort (`order`) or top_k (`k`: the k largest, largest first).
pub fn argsort(
    rec: &mut Recorder,
    graph: &Graph,
    node: TensorId,
    order: Option<SortOrder>,
    k: Option<usize>,
) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[0])?;
    let n = a.nelements();
    if n == 0 || d.is_empty() {
        return Ok(());
    }
    let descending = order != Some(SortOrder::Ascending);
    let key = format!("argsort|{}|desc={descending}", a.dtype);
    let p = pipeline(gpu, &key, 2, || {
        let before = if descending { "kj > ki" } else { "kj < ki" };
        let code = format!(
            r#"    if (idx >= op_u(31u)) {{ return; }}
    let n = A_ne(0u);
    let i = idx % n;
    let r = idx / n;
    let i1 = r % A_ne(1u);
    let i2 = (r / A_ne(1u)) % A_ne(2u);
    let i3 = r / (A_ne(1u) * A_ne(2u));
    let row = A_row(i1, i2, i3);
    let ki = sort_key(A_at(row, i));
    var rank = 0u;
    for (var j = 0u; j < n; j++) {{
        let kj = sort_key(A_at(row, j));
        if ({before} || (kj == ki && j < i)) {{ rank++; }}
    }}
    if (rank < D_ne(0u)) {{
        D_setbits(D_row(i1, i2, i3) + rank * D_nb(0u), i);
    }}
"#
        );
        Shader::new()
            .tensor("D", 0, DType::I32, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .code(
                r#"
// an unsigned key in the order of f32::total_cmp
fn sort_key(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    return select(u | 0x80000000u, ~u, (u >> 31u) == 1u);
}
"#,
            )
            .code(&entry(WG, &code))
            .finish()
    })?;
    let _ = k;
    let mut params = Params::new();
    params.set(31, n as u32);
    rec.dispatch(p, &[&d, &a], params, n.div_ceil(WG as u64))
}
