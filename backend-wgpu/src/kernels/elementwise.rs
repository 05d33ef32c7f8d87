//! Elementwise ops, one thread per result element: binary ops with
//! broadcasting, scale, the unary ops and the gated linear units.

use ggraph_core::Result;
use ggraph_core::ir::{BinaryOp, GluOp, Graph, TensorId, UnaryOp};

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
    let act = match op {
        GluOp::Swiglu => unary_expr(UnaryOp::Silu),
        GluOp::Geglu => unary_expr(UnaryOp::Gelu),
    };
    if t.src.len() == 2 {
        let body = format!(
            "    let x = A_get(i0, i1, i2, i3);\n    D_set(i0, i1, i2, i3, ({act}) * B_get(i0, i1, i2, i3));\n"
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
        "    let x = A_get(i0 + op_u(0u), i1, i2, i3);\n    D_set(i0, i1, i2, i3, ({act}) * A_get(i0 + op_u(1u), i1, i2, i3));\n"
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
