//! Rotary position embedding (normal and NeoX layouts, frequency factors,
//! frequency scaling, YaRN), one thread per rotated pair.

use ggraph_core::ir::{Graph, RopeMode, RopeParams, TensorId};
use ggraph_core::{DType, Result};

use super::args::{Params, WG, bind};
use super::pipeline::pipeline;
use super::recorder::Recorder;
use super::wgsl::{Access, Shader, entry};

pub fn rope(rec: &mut Recorder, graph: &Graph, node: TensorId, p: &RopeParams) -> Result<()> {
    let gpu = rec.gpu;
    let t = graph.tensor(node);
    let d = bind(gpu, graph, node)?;
    let a = bind(gpu, graph, t.src[0])?;
    let pos = bind(gpu, graph, t.src[1])?;
    let ff = t.src.get(2).map(|&f| bind(gpu, graph, f)).transpose()?;
    let pairs = d.ne[0].div_ceil(2);
    let n = pairs as u64 * d.nrows();
    if n == 0 {
        return Ok(());
    }
    let key = format!(
        "rope|{}>{}|ff={}|{:?}",
        a.dtype,
        d.dtype,
        ff.is_some(),
        p.mode
    );
    let neox = p.mode == RopeMode::Neox;
    let pipe = pipeline(gpu, &key, 3 + ff.is_some() as usize, || {
        let ff_term = if ff.is_some() {
            "C_get(pi, 0u, 0u, 0u)"
        } else {
            "1.0"
        };
        let pair = if neox {
            "let j0 = pi; let j1 = pi + nd / 2u;"
        } else {
            "let j0 = 2u * pi; let j1 = 2u * pi + 1u;"
        };
        let code = format!(
            r#"    if (idx >= op_u(31u)) {{ return; }}
    let pairs = op_u(30u);
    let pi = idx % pairs;
    let r = idx / pairs;
    let i1 = r % A_ne(1u);
    let i2 = (r / A_ne(1u)) % A_ne(2u);
    let i3 = r / (A_ne(1u) * A_ne(2u));
    let nd = op_u(0u);
    if (2u * pi >= nd) {{
        // past the rotated dimensions: copied
        D_set(2u * pi, i1, i2, i3, A_get(2u * pi, i1, i2, i3));
        if (2u * pi + 1u < A_ne(0u)) {{ D_set(2u * pi + 1u, i1, i2, i3, A_get(2u * pi + 1u, i1, i2, i3)); }}
        return;
    }}
    let position = f32(bitcast<i32>(B_bits(B_row(0u, 0u, 0u) + i2 * B_nb(0u))));
    let theta_extrap = position * pow(op_f(1u), f32(pi)) / {ff_term};
    let theta_interp = op_f(2u) * theta_extrap;
    var theta = theta_interp;
    var mscale = op_f(4u);
    if (op_f(3u) != 0.0) {{
        let y = (f32(pi) - op_f(5u)) / max(0.001, op_f(6u) - op_f(5u));
        let ramp = (1.0 - clamp(y, 0.0, 1.0)) * op_f(3u);
        theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
        mscale *= 1.0 + 0.1 * log(1.0 / op_f(2u));
    }}
    let c = cos(theta) * mscale;
    let s = sin(theta) * mscale;
    {pair}
    let x0 = A_get(j0, i1, i2, i3);
    let x1 = A_get(j1, i1, i2, i3);
    D_set(j0, i1, i2, i3, x0 * c - x1 * s);
    D_set(j1, i1, i2, i3, x0 * s + x1 * c);
"#
        );
        let mut sh = Shader::new()
            .tensor("D", 0, d.dtype, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .tensor("B", 2, DType::I32, Access::Read);
        if let Some(f) = &ff {
            sh = sh.tensor("C", 3, f.dtype, Access::Read);
        }
        sh.code(&entry(WG, &code)).finish()
    })?;
    let theta_scale = (p.freq_base as f64).powf(-2.0 / p.n_dims as f64) as f32;
    let [low, high] = p.yarn_corr_dims();
    let mut params = Params::new();
    params
        .set(0, p.n_dims as u32)
        .setf(1, theta_scale)
        .setf(2, p.freq_scale)
        .setf(3, p.ext_factor)
        .setf(4, p.attn_factor)
        .setf(5, low)
        .setf(6, high)
        .set(30, pairs)
        .set(31, n as u32);
    let mut tensors = vec![&d, &a, &pos];
    if let Some(f) = &ff {
        tensors.push(f);
    }
    rec.dispatch(pipe, &tensors, params, n.div_ceil(WG as u64))
}
