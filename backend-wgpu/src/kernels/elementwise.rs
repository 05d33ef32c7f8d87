//! Elementwise ops, one thread per result element: binary ops with
//! broadcasting, scale, the unary ops and the gated linear units.

use ggraph_core::ir::{BinaryOp, GluOp, Graph, TensorId, UnaryOp};
use ggraph_core::{DType, Result};

use super::args::{Params, WG, bind};
use super::pipeline::pipeline;
use super::recorder::Recorder;
use super::wgsl::{Access, Shader, entry, unravel};

/// Runs `body` for every element of the result, with its coordinates in
/// `i0..i3`; `srcs` are the source tensors in slots 1.. as A, B, ...
pub(crate) fn run(
    rec: &mut Recorder,
    graph: &Graph,
    node: TensorId,
    key: &str,
    srcs: &[TensorId],
    body: &str,
    params: Params,
) -> Result<()> {
    let gpu = rec.gpu;
    let d = bind(gpu, graph, node)?;
    let args: Vec<_> = srcs
        .iter()
        .map(|&s| bind(gpu, graph, s))
        .collect::<Result<_>>()?;
    let n = d.nelements();
    if n == 0 {
        return Ok(());
    }
    let mut full_key = format!("{key}|D{}", d.dtype);
    for a in &args {
        full_key += &format!(",{}", a.dtype);
    }
    let p = pipeline(gpu, &full_key, 1 + args.len(), || {
        let mut sh = Shader::new().tensor("D", 0, d.dtype, Access::Write);
        for (i, a) in args.iter().enumerate() {
            sh = sh.tensor(NAMES[i], i + 1, a.dtype, Access::Read);
        }
        let code = format!(
            "    if (idx >= op_u(31u)) {{ return; }}\n{}{body}",
            unravel("idx", "D", "i")
        );
        sh.code(&entry(WG, &code)).finish()
    })?;
    let mut params = params;
    params.set(31, n as u32);
    let mut tensors = vec![&d];
    tensors.extend(args.iter());
    rec.dispatch(p, &tensors, params, n.div_ceil(WG as u64))
}

/// Runs `code` on `n` threads, the thread's index in `idx` (the code
/// returns for `idx >= op_u(31u)`); every source of the node is bound in
/// slots 1.. under `names`, the result in slot 0 as `D`.
pub(crate) fn run_threads(
    rec: &mut Recorder,
    graph: &Graph,
    node: TensorId,
    key: &str,
    names: &[&str],
    n: u64,
    code: &str,
) -> Result<()> {
    let gpu = rec.gpu;
    let d = bind(gpu, graph, node)?;
    let srcs: Vec<_> = (graph.tensor(node).src.iter())
        .map(|&s| bind(gpu, graph, s))
        .collect::<Result<_>>()?;
    if n == 0 {
        return Ok(());
    }
    let mut full_key = key.to_string();
    for s in &srcs {
        full_key += &format!(",{}", s.dtype);
    }
    let p = pipeline(gpu, &full_key, 1 + srcs.len(), || {
        let mut sh = Shader::new().tensor("D", 0, d.dtype, Access::Write);
        for (i, s) in srcs.iter().enumerate() {
            sh = sh.tensor(names[i], i + 1, s.dtype, Access::Read);
        }
        sh.code(&entry(WG, code)).finish()
    })?;
    let mut params = Params::new();
    params.set(31, n as u32);
    let mut tensors = vec![&d];
    tensors.extend(srcs.iter());
    rec.dispatch(p, &tensors, params, n.div_ceil(WG as u64))
}

/// Names of the source tensors in slots 1, 2, ...
pub(crate) const NAMES: [&str; 4] = ["A", "B", "C", "E"];

pub fn binary(rec: &mut Recorder, graph: &Graph, node: TensorId, op: BinaryOp) -> Result<()> {
    let t = graph.tensor(node);
    let sym = match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
    };
    let body = format!(
        "    let x = A_get(i0, i1, i2, i3);
    let y = B_get(i0 % B_ne(0u), i1 % B_ne(1u), i2 % B_ne(2u), i3 % B_ne(3u));
    D_set(i0, i1, i2, i3, x {sym} y);
"
    );
    run(
        rec,
        graph,
        node,
        &format!("binary{sym}"),
        &[t.src[0], t.src[1]],
        &body,
        Params::new(),
    )
}

pub fn scale(rec: &mut Recorder, graph: &Graph, node: TensorId, s: f32, bias: f32) -> Result<()> {
    let t = graph.tensor(node);
    let mut p = Params::new();
    p.setf(0, s).setf(1, bias);
    run(
        rec,
        graph,
        node,
        "scale",
        &[t.src[0]],
        "    D_set(i0, i1, i2, i3, A_get(i0, i1, i2, i3) * op_f(0u) + op_f(1u));\n",
        p,
    )
}

/// The WGSL expression of a unary op on `x`.
pub(crate) fn unary_expr(u: UnaryOp) -> &'static str {
    match u {
        UnaryOp::Silu => "x / (1.0 + exp(-x))",
        UnaryOp::Gelu => {
            "0.5 * x * (1.0 + tanh(clamp(0.7978845608028654 * x * (1.0 + 0.044715 * x * x), -15.0, 15.0)))"
        }
        UnaryOp::Relu => "max(x, 0.0)",
        UnaryOp::Neg => "-x",
        UnaryOp::Exp => "exp(x)",
        UnaryOp::Sigmoid => "1.0 / (1.0 + exp(-x))",
        UnaryOp::Tanh => "tanh(clamp(x, -15.0, 15.0))",
        UnaryOp::Sqr => "x * x",
        UnaryOp::Sqrt => "sqrt(x)",
        UnaryOp::Softplus => "select(log(1.0 + exp(x)), x, x > 20.0)",
    }
}

pub fn unary(rec: &mut Recorder, graph: &Graph, node: TensorId, u: UnaryOp) -> Result<()> {
    let t = graph.tensor(node);
    let body = format!(
        "    let x = A_get(i0, i1, i2, i3);\n    D_set(i0, i1, i2, i3, {});\n",
        unary_expr(u)
    );
    run(
        rec,
        graph,
        node,
        &format!("unary:{u:?}"),
        &[t.src[0]],
        &body,
        Params::new(),
    )
}

pub fn glu(
    rec: &mut Recorder,
    graph: &Graph,
    node: TensorId,
    op: GluOp,
    swapped: bool,
) -> Result<()> {
    let t = graph.tensor(node);
    // the unit of gate x and value g
    let unit = match op {
        GluOp::Swiglu => format!("({}) * g", unary_expr(UnaryOp::Silu)),
        GluOp::Geglu => format!("({}) * g", unary_expr(UnaryOp::Gelu)),
        GluOp::SwigluOai { alpha, limit } => format!(
            "min(x, {limit:?}) / (1.0 + exp({alpha:?} * -min(x, {limit:?}))) * (clamp(g, -{limit:?}, {limit:?}) + 1.0)"
        ),
    };
    if t.src.len() == 2 {
        let body = format!(
            "    let x = A_get(i0, i1, i2, i3);\n    let g = B_get(i0, i1, i2, i3);\n    D_set(i0, i1, i2, i3, {unit});\n"
        );
        return run(
            rec,
            graph,
            node,
            &format!("glu2:{op:?}"),
            &[t.src[0], t.src[1]],
            &body,
            Params::new(),
        );
    }
    // one source: the activation's half and the gate's half of each row
    let n = t.ne[0] as u32;
    let (xo, go) = if swapped { (n, 0) } else { (0, n) };
    let mut p = Params::new();
    p.set(0, xo).set(1, go);
    let body = format!(
        "    let x = A_get(i0 + op_u(0u), i1, i2, i3);\n    let g = A_get(i0 + op_u(1u), i1, i2, i3);\n    D_set(i0, i1, i2, i3, {unit});\n"
    );
    run(
        rec,
        graph,
        node,
        &format!("glu1:{op:?}"),
        &[t.src[0]],
        &body,
        p,
    )
}

/// `a[:, e, t] + b[:, ids[e, t]]` (ggml's `add_id`); an id outside b's
/// rows writes 0 and is reported by the next synchronize.
pub fn add_id(rec: &mut Recorder, graph: &Graph, node: TensorId) -> Result<()> {
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
    let key = format!("add_id|{}+{}", a.dtype, b.dtype);
    let p = pipeline(gpu, &key, 5, || {
        let code = format!(
            r#"    if (idx >= op_u(31u)) {{ return; }}
{}    let e = bitcast<i32>(C_bits(C_row(i2, 0u, 0u) + i1 * C_nb(0u)));
    if (e < 0 || e >= i32(B_ne(1u))) {{
        D_set(i0, i1, i2, i3, 0.0);
        bad_index(8u, e, B_ne(1u));
        return;
    }}
    D_set(i0, i1, i2, i3, A_get(i0, i1, i2, i3) + B_get(i0, u32(e), 0u, 0u));
"#,
            unravel("idx", "D", "i")
        );
        Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .tensor("B", 2, b.dtype, Access::Read)
            .tensor("C", 3, DType::I32, Access::Read)
            .status(4)
            .code(&entry(WG, &code))
            .finish()
    })?;
    let status = rec.status();
    let mut params = Params::new();
    params.set(31, n as u32);
    rec.dispatch(
        p,
        &[&d, &a, &b, &ids, &status],
        params,
        n.div_ceil(WG as u64),
    )
}
