//! mul_mat and mul_mat_id: weights of any type (dequantised in the
//! kernel) times float activations, f32 results.

use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{DType, Result};

use super::wgsl::{Access, Shader, entry};
use super::{Params, Recorder, TArg, WG, bind, bind_rows, pipeline};

/// Windows of weight rows, each within one binding.
fn row_windows(rec: &Recorder, graph: &Graph, a: TensorId) -> Vec<(usize, usize)> {
    let t = graph.tensor(a);
    let rows = t.ne[1];
    if t.nbytes() as u64 <= rec.gpu.max_binding() || rows == 0 {
        return vec![(0, rows)];
    }
    let per = ((rec.gpu.max_binding() - rec.gpu.storage_align()) as usize / t.nb[1].max(1)).max(1);
    (0..rows)
        .step_by(per)
        .map(|r0| (r0, (r0 + per).min(rows)))
        .collect()
}

pub fn mul_mat(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let (a_id, b_id) = (t.src[0], t.src[1]);
    let d = bind(gpu, graph, node)?;
    let b = bind(gpu, graph, b_id)?;
    if d.is_empty() {
        return Ok(());
    }
    let windows = row_windows(rec, graph, a_id);
    for &(r0, r1) in &windows {
        let a = if windows.len() == 1 {
            bind(gpu, graph, a_id)?
        } else {
            bind_rows(gpu, graph, a_id, r0, r1)?
        };
        generic(rec, &d, &a, &b, r0 as u32)?;
    }
    Ok(())
}

/// One thread per result element; any types and layouts.
fn generic(rec: &mut Recorder, d: &TArg, a: &TArg, b: &TArg, row0: u32) -> Result<()> {
    let gpu = rec.gpu;
    let n = a.ne[1] as u64 * d.ne[1] as u64 * d.ne[2] as u64 * d.ne[3] as u64;
    if n == 0 {
        return Ok(());
    }
    let key = format!("mul_mat_generic|{}x{}", a.dtype, b.dtype);
    let p = pipeline(gpu, &key, 3, || {
        let code = r#"    if (idx >= op_u(31u)) { return; }
    let m = A_ne(1u);
    let i = idx % m;
    let r = idx / m;
    let j = r % D_ne(1u);
    let i2 = (r / D_ne(1u)) % D_ne(2u);
    let i3 = r / (D_ne(1u) * D_ne(2u));
    let ar = A_row(i, i2 / op_u(1u), i3 / op_u(2u));
    let br = B_row(j, i2, i3);
    let k = A_ne(0u);
    var s = 0.0;
    for (var kk = 0u; kk < k; kk++) { s += A_at(ar, kk) * B_at(br, kk); }
    D_set(i + op_u(0u), j, i2, i3, s);
"#;
        Shader::new()
            .tensor("D", 0, DType::F32, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .tensor("B", 2, b.dtype, Access::Read)
            .code(&entry(WG, code))
            .finish()
    })?;
    let mut params = Params::new();
    params
        .set(0, row0)
        .set(1, (b.ne[2] / a.ne[2].max(1)).max(1))
        .set(2, (b.ne[3] / a.ne[3].max(1)).max(1))
        .set(31, n as u32);
    rec.dispatch(p, &[d, a, b], params, n.div_ceil(WG as u64))
}

/// `mul_mat_id(as, b, ids)`: one thread per result element.
pub fn mul_mat_id(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[0])?;
    let b = bind(gpu, graph, t.src[1])?;
    let ids = bind(gpu, graph, t.src[2])?;
    let n = d.nelements();
    if n == 0 {
        return Ok(());
    }
    let key = format!("mul_mat_id_generic|{}x{}", a.dtype, b.dtype);
    let p = pipeline(gpu, &key, 4, || {
        let code = r#"    if (idx >= op_u(31u)) { return; }
    let i = idx % D_ne(0u);
    let r = idx / D_ne(0u);
    let e = r % D_ne(1u);
    let tok = r / D_ne(1u);
    let expert = bitcast<i32>(C_bits(C_row(tok, 0u, 0u) + e * C_nb(0u)));
    if (expert < 0 || expert >= i32(A_ne(2u))) { D_set(i, e, tok, 0u, 0.0); return; }
    let ar = A_row(i, u32(expert), 0u);
    let br = B_row(e % B_ne(1u), tok, 0u);
    let k = A_ne(0u);
    var s = 0.0;
    for (var kk = 0u; kk < k; kk++) { s += A_at(ar, kk) * B_at(br, kk); }
    D_set(i, e, tok, 0u, s);
"#;
        Shader::new()
            .tensor("D", 0, DType::F32, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .tensor("B", 2, b.dtype, Access::Read)
            .tensor("C", 3, DType::I32, Access::Read)
            .code(&entry(WG, code))
            .finish()
    })?;
    let mut params = Params::new();
    params.set(31, n as u32);
    rec.dispatch(p, &[&d, &a, &b, &ids], params, n.div_ceil(WG as u64))
}
