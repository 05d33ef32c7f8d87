//! Data movement: get_rows, cpy / cont (with type conversion, quantising
//! on the device for block types), set_rows and concat.

use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{DType, Error, Result};

use super::args::{Params, TArg, WG, bind, bind_rows};
use super::pipeline::pipeline;
use super::quantize::quant_block;
use super::recorder::Recorder;
use super::wgsl::{Access, Shader, entry, unravel};

/// `get_rows`: one thread per result element. A source larger than one
/// binding is read window by window of rows; each window's dispatch writes
/// the results whose index falls inside it.
pub fn get_rows(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let (a_id, idx_id) = (t.src[0], t.src[1]);
    let ta = graph.tensor(a_id);
    let d = bind(gpu, graph, node)?;
    let idx = bind(gpu, graph, idx_id)?;
    let n = d.nelements();
    if n == 0 {
        return Ok(());
    }
    let rows = ta.ne[1];
    let windows: Vec<(usize, usize)> = if ta.nbytes() as u64 <= gpu.max_binding() {
        vec![(0, rows)]
    } else {
        let per = (gpu.max_binding() - gpu.storage_align()) as usize / ta.nb[1].max(1);
        (0..rows)
            .step_by(per.max(1))
            .map(|r0| (r0, (r0 + per.max(1)).min(rows)))
            .collect()
    };
    let raw = ta.dtype == DType::I32;
    let key = format!("get_rows|{}>{}", ta.dtype, d.dtype);
    let p = pipeline(gpu, &key, 4, || {
        let value = if raw {
            "D_setbits(D_row(i1, i2, i3) + i0 * D_nb(0u), A_bits(A_row(lr, i2, i3) + i0 * A_nb(0u)));"
        } else {
            "D_set(i0, i1, i2, i3, A_at(A_row(lr, i2, i3), i0));"
        };
        let code = format!(
            r#"    if (idx >= op_u(31u)) {{ return; }}
{}    let row = bitcast<i32>(B_bits(B_row(i2, i3, 0u) + i1 * B_nb(0u)));
    let r0 = i32(op_u(0u));
    let r1 = i32(op_u(1u));
    if (row < r0 || row >= r1) {{
        // an index outside the source reads as 0 (written by the first
        // window) and is reported by the next synchronize
        if (op_u(2u) == 1u && (row < 0 || row >= i32(op_u(3u)))) {{
            D_setbits(D_row(i1, i2, i3) + i0 * D_nb(0u), 0u);
            bad_index(1u, row, op_u(3u));
        }}
        return;
    }}
    let lr = u32(row - r0);
    {value}
"#,
            unravel("idx", "D", "i")
        );
        Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, ta.dtype, Access::Read)
            .tensor("B", 2, DType::I32, Access::Read)
            .status(3)
            .code(&entry(WG, &code))
            .finish()
    })?;
    let status = rec.status();
    for (w, &(r0, r1)) in windows.iter().enumerate() {
        let a = if windows.len() == 1 {
            bind(gpu, graph, a_id)?
        } else {
            bind_rows(gpu, graph, a_id, r0, r1)?
        };
        let mut params = Params::new();
        params
            .set(0, r0 as u32)
            .set(1, r1 as u32)
            .set(2, (w == 0) as u32)
            .set(3, rows as u32)
            .set(31, n as u32);
        rec.dispatch(
            p.clone(),
            &[&d, &a, &idx, &status],
            params,
            n.div_ceil(WG as u64),
        )?;
    }
    Ok(())
}

/// cpy and cont: the source's values in logical order into the result,
/// converting type.
pub fn copy(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[0])?;
    if d.is_empty() || a.is_empty() {
        return Ok(());
    }
    if d.dtype.is_quantized() {
        return quantized_rows(rec, &d, &a, None);
    }
    let n = d.nelements();
    let raw = d.dtype == a.dtype;
    let key = format!("copy|{}>{}", a.dtype, d.dtype);
    let p = pipeline(gpu, &key, 2, || {
        let value = if raw {
            "D_setbits(D_row(i1, i2, i3) + i0 * D_nb(0u), A_bits(A_row(s1, s2, s3) + s0 * A_nb(0u)));"
        } else {
            "D_set(i0, i1, i2, i3, A_get(s0, s1, s2, s3));"
        };
        let code = format!(
            "    if (idx >= op_u(31u)) {{ return; }}\n{}{}    {value}\n",
            unravel("idx", "D", "i"),
            unravel("idx", "A", "s")
        );
        Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .code(&entry(WG, &code))
            .finish()
    })?;
    let mut params = Params::new();
    params.set(31, n as u32);
    rec.dispatch(p, &[&d, &a], params, n.div_ceil(WG as u64))
}

/// Writes whole blocks of a quantised result, one thread per block: the
/// block's values are read from the source row (the same logical row for
/// a copy, the row named by the index for set_rows) and quantised.
fn quantized_rows(rec: &mut Recorder, d: &TArg, a: &TArg, idx: Option<&TArg>) -> Result<()> {
    let gpu = rec.gpu;
    let bs = d.dtype.block_size() as u32;
    let ts = d.dtype.type_size() as u32;
    let blocks_per_row = a.ne[0] / bs;
    let n = blocks_per_row as u64 * a.nrows();
    if n == 0 {
        return Ok(());
    }
    let same = a.dtype == d.dtype;
    let quantiser = match quant_block(d.dtype) {
        _ if same => None,
        Some(q) => Some(q),
        None => {
            return Err(Error::Unsupported {
                device: gpu.name.clone(),
                what: format!(
                    "writing {} values as {} (no quantiser on the device)",
                    a.dtype, d.dtype
                ),
            });
        }
    };
    let key = format!(
        "qrows|{}>{}|{}",
        a.dtype,
        d.dtype,
        if idx.is_some() { "set_rows" } else { "copy" }
    );
    let p = pipeline(gpu, &key, 2 + 2 * idx.is_some() as usize, || {
        let target = if idx.is_some() {
            SET_ROWS_TARGET
        } else {
            "    let dr = r;\n    let d1 = dr % D_ne(1u);\n    let d2 = (dr / D_ne(1u)) % D_ne(2u);\n    let d3 = dr / (D_ne(1u) * D_ne(2u));\n"
        };
        let fill = if same {
            format!(
                "    let sb = A_row(s1, s2, s3) + kb * {ts}u;\n    for (var b = 0u; b < {ts}u; b++) {{ bytes[b] = A_u8(sb + b); }}\n"
            )
        } else {
            format!(
                "    var x: array<f32, 256>;\n    let sr = A_row(s1, s2, s3);\n    for (var i = 0u; i < {bs}u; i++) {{ x[i] = A_at(sr, kb * {bs}u + i); }}\n    quant_block(&x, &bytes);\n"
            )
        };
        let code = format!(
            r#"    if (idx >= op_u(31u)) {{ return; }}
    let kb = idx % op_u(0u);
    let r = idx / op_u(0u);
    let s1 = r % A_ne(1u);
    let s2 = (r / A_ne(1u)) % A_ne(2u);
    let s3 = r / (A_ne(1u) * A_ne(2u));
{target}    var bytes: array<u32, 212>;
{fill}    D_put_bytes(D_row(d1, d2, d3) + kb * {ts}u, {ts}u, &bytes);
"#
        );
        let mut sh = Shader::new().tensor("D", 0, d.dtype, Access::Write).tensor(
            "A",
            1,
            a.dtype,
            Access::Read,
        );
        if idx.is_some() {
            sh = sh.tensor("B", 2, DType::I32, Access::Read).status(3);
        }
        if let Some(q) = quantiser {
            sh = sh.code(q);
        }
        sh.code(&entry(64, &code)).finish()
    })?;
    let mut params = Params::new();
    params.set(0, blocks_per_row).set(31, n as u32);
    let status = idx.map(|_| rec.status());
    let mut tensors = vec![d, a];
    if let (Some(i), Some(s)) = (idx, &status) {
        tensors.push(i);
        tensors.push(s);
    }
    rec.dispatch(p, &tensors, params, n.div_ceil(64))
}

/// The destination row of source row (s1, s2, s3) in set_rows, as
/// (d1, d2, d3); returns early when the index is outside the destination
/// or a later source row writes the same destination row (the last write
/// wins, as when the rows are written in order).
const SET_ROWS_TARGET: &str = r#"    let ib = B_row(s2 % B_ne(1u), s3 % B_ne(2u), 0u);
    let tgt = bitcast<i32>(B_bits(ib + s1 * B_nb(0u)));
    if (tgt < 0 || tgt >= i32(D_ne(1u))) { bad_index(2u, tgt, D_ne(1u)); return; }
    for (var later = s1 + 1u; later < A_ne(1u); later++) {
        if (bitcast<i32>(B_bits(ib + later * B_nb(0u))) == tgt) { return; }
    }
    let d1 = u32(tgt);
    let d2 = s2;
    let d3 = s3;
"#;

/// Elements per thread of set_rows into a plain type.
const SET_ROWS_CHUNK: u32 = 32;

/// `set_rows(dst, src, idx)`: row r of src into row idx[r] of dst.
pub fn set_rows(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[1])?;
    let idx = bind(gpu, graph, t.src[2])?;
    if a.is_empty() {
        return Ok(());
    }
    if d.dtype.is_quantized() {
        return quantized_rows(rec, &d, &a, Some(&idx));
    }
    let chunks = a.ne[0].div_ceil(SET_ROWS_CHUNK);
    let n = chunks as u64 * a.nrows();
    let key = format!("set_rows|{}>{}", a.dtype, d.dtype);
    let p = pipeline(gpu, &key, 4, || {
        let code = format!(
            r#"    if (idx >= op_u(31u)) {{ return; }}
    let c = idx % op_u(0u);
    let r = idx / op_u(0u);
    let s1 = r % A_ne(1u);
    let s2 = (r / A_ne(1u)) % A_ne(2u);
    let s3 = r / (A_ne(1u) * A_ne(2u));
{SET_ROWS_TARGET}    let sr = A_row(s1, s2, s3);
    let dr = D_row(d1, d2, d3);
    let end = min(A_ne(0u), (c + 1u) * {SET_ROWS_CHUNK}u);
    for (var i = c * {SET_ROWS_CHUNK}u; i < end; i++) {{
        D_setf(dr + i * D_nb(0u), A_at(sr, i));
    }}
"#
        );
        Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .tensor("B", 2, DType::I32, Access::Read)
            .status(3)
            .code(&entry(64, &code))
            .finish()
    })?;
    let mut params = Params::new();
    params.set(0, chunks).set(31, n as u32);
    let status = rec.status();
    rec.dispatch(p, &[&d, &a, &idx, &status], params, n.div_ceil(64))
}

/// `concat(a, b, dim)`: raw element copies from whichever source holds
/// each result element.
pub fn concat(rec: &mut Recorder, graph: &Graph, node: TensorId, dim: usize) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[0])?;
    let b = bind(gpu, graph, t.src[1])?;
    let n = d.nelements();
    if n == 0 {
        return Ok(());
    }
    let key = format!("concat|{}", d.dtype);
    let p = pipeline(gpu, &key, 3, || {
        let code = format!(
            r#"    if (idx >= op_u(31u)) {{ return; }}
{}    var c = array<u32, 4>(i0, i1, i2, i3);
    let dim = op_u(0u);
    let db = D_row(i1, i2, i3) + i0 * D_nb(0u);
    if (c[dim] < A_ne(dim)) {{
        D_setbits(db, A_bits(A_row(c[1], c[2], c[3]) + c[0] * A_nb(0u)));
    }} else {{
        c[dim] -= A_ne(dim);
        D_setbits(db, B_bits(B_row(c[1], c[2], c[3]) + c[0] * B_nb(0u)));
    }}
"#,
            unravel("idx", "D", "i")
        );
        Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .tensor("B", 2, b.dtype, Access::Read)
            .code(&entry(WG, &code))
            .finish()
    })?;
    let mut params = Params::new();
    params.set(0, dim as u32).set(31, n as u32);
    rec.dispatch(p, &[&d, &a, &b], params, n.div_ceil(WG as u64))
}
