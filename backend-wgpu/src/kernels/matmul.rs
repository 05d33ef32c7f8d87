//! mul_mat and mul_mat_id: weights of any type (dequantised in the
//! kernel, never on the host) times float activations, f32 results.
//!
//! Three kernels, chosen per call:
//!
//! - **subgroup** (adapters with subgroups of exactly 8 lanes: lavapipe and
//!   llvmpipe on AVX2). On a CPU driver every lane's memory load is a
//!   scalar loop, so the kernel loads each value once and shares it:
//!   a subgroup owns 8·TM weight rows (TM per lane) and NC result columns;
//!   for every 32 values of k, each lane loads one vec4 of each column
//!   and the subgroup broadcasts them, while each lane decodes its own
//!   rows straight from their storage (vec4 loads for f32/f16/bf16, whole
//!   words for the block types). Register blocking TM × NC.
//! - **tiled** (everything else with n > 1): 64×64 result tiles, 16×16
//!   threads each with a 4×4 register block, 16-deep k slices staged in
//!   workgroup memory as vec4 (any weight type is dequantised on the way
//!   in).
//! - **generic**: one thread per result element, for the cases the others
//!   do not take (n = 1 off subgroup adapters, huge batches).
//!
//! mul_mat_id runs on the subgroup kernel with one column per (slot,
//! token) pair, the expert read from `ids` on the device, or on a generic
//! kernel. Weights larger than one storage binding are processed in
//! windows of rows (one dispatch per window).

use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{DType, Result};

use super::args::{Params, TArg, WG, bind, bind_rows};
use super::pipeline::pipeline;
use super::recorder::Recorder;
use super::wgsl::{Access, Shader, entry};
use crate::options::MatmulKernel as Kernel;

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

fn aligned(t: &TArg, to: u32) -> bool {
    t.rem % to == 0 && (1..4).all(|d| t.ne[d] <= 1 || t.nb[d] % to == 0)
}

/// Whether the subgroup kernel takes this product.
fn subgroup_fits(rec: &Recorder, d: &TArg, a: &TArg, b: &TArg) -> bool {
    let rows_aligned = match a.dtype {
        DType::F32 | DType::F16 | DType::BF16 => aligned(a, 16),
        DType::Q4_1 | DType::Q5_1 | DType::Q2_K | DType::Q4_K | DType::Q5_K | DType::IQ4_XS => {
            aligned(a, 4)
        }
        DType::Q8_0 | DType::Q4_0 | DType::Q5_0 | DType::Q3_K | DType::Q6_K | DType::IQ4_NL => {
            aligned(a, 2)
        }
        // blocks of 17 bytes at any byte: the loads shift them into place
        DType::MXFP4 => true,
        DType::I32 => false,
    };
    rec.gpu.subgroups_of_8()
        && rows_aligned
        && a.nb[0] as usize == a.dtype.type_size()
        && a.ne[0] % 32 == 0
        && b.dtype == DType::F32
        && b.nb[0] == 4
        && aligned(b, 16)
        && d.ne[2] as u64 * d.ne[3] as u64 <= 65535
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
        let batch_ok = d.ne[2] as u64 * d.ne[3] as u64 <= 65535;
        let auto = if subgroup_fits(rec, &d, &a, &b) {
            Kernel::Subgroup
        } else if d.ne[1] > 1 && batch_ok {
            Kernel::Tiled
        } else {
            Kernel::Generic
        };
        let kernel = match gpu.options.matmul_kernel {
            Some(Kernel::Subgroup) if subgroup_fits(rec, &d, &a, &b) => Kernel::Subgroup,
            Some(Kernel::Tiled) if batch_ok => Kernel::Tiled,
            Some(Kernel::Generic) => Kernel::Generic,
            _ => auto,
        };
        match kernel {
            Kernel::Subgroup => subgroup(rec, &d, &a, &b, r0 as u32, None)?,
            Kernel::Tiled => tiled(rec, &d, &a, &b, r0 as u32)?,
            Kernel::Generic => generic(rec, &d, &a, &b, r0 as u32)?,
        }
    }
    Ok(())
}

/// Parameters shared by the mul_mat kernels: the first result row (of a
/// window) and the broadcast ratios of the weights over dims 2 and 3.
fn mm_params(a: &TArg, b: &TArg, row0: u32) -> Params {
    let mut p = Params::new();
    p.set(0, row0)
        .set(1, (b.ne[2] / a.ne[2].max(1)).max(1))
        .set(2, (b.ne[3] / a.ne[3].max(1)).max(1));
    p
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
    let mut params = mm_params(a, b, row0);
    params.set(31, n as u32);
    rec.dispatch(p, &[d, a, b], params, n.div_ceil(WG as u64))
}

/// The portable tiled kernel: 64×64 tiles, 4×4 per thread, k in slices
/// of 16 staged in workgroup memory.
fn tiled(rec: &mut Recorder, d: &TArg, a: &TArg, b: &TArg, row0: u32) -> Result<()> {
    let gpu = rec.gpu;
    let (m, n) = (a.ne[1], d.ne[1]);
    if m == 0 || n == 0 {
        return Ok(());
    }
    let key = format!("mul_mat_tiled|{}x{}", a.dtype, b.dtype);
    let p = pipeline(gpu, &key, 3, || {
        let mut acc = String::new();
        let mut fma = String::new();
        let mut store = String::new();
        for r in 0..4 {
            for c in 0..4 {
                acc += &format!("    var acc{r}{c} = 0.0;\n");
                fma += &format!("            acc{r}{c} += a[{r}] * b[{c}];\n");
                store += &format!(
                    "    if (i0 + {r}u < m && j0 + {c}u < n) {{ D_set(row0 + i0 + {r}u, j0 + {c}u, i2, i3, acc{r}{c}); }}\n"
                );
            }
        }
        let code = format!(
            r#"
var<workgroup> As: array<vec4<f32>, 256>;
var<workgroup> Bs: array<vec4<f32>, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let m = A_ne(1u);
    let n = D_ne(1u);
    let k = A_ne(0u);
    let row0 = op_u(0u);
    let i2 = wid.z % D_ne(2u);
    let i3 = wid.z / D_ne(2u);
    let tx = lid % 16u;
    let ty = lid / 16u;
    // the rows and columns this thread loads into the tiles
    let lk = lid / 16u;
    let lg = lid % 16u;
    var arow: array<u32, 4>;
    var brow: array<u32, 4>;
    for (var r = 0u; r < 4u; r++) {{
        arow[r] = A_row(min(wid.x * 64u + 4u * lg + r, m - 1u), i2 / op_u(1u), i3 / op_u(2u));
        brow[r] = B_row(min(wid.y * 64u + 4u * lg + r, n - 1u), i2, i3);
    }}
{acc}    for (var k0 = 0u; k0 < k; k0 += 16u) {{
        let kk = k0 + lk;
        var av = vec4<f32>(0.0);
        var bv = vec4<f32>(0.0);
        if (kk < k) {{
            for (var r = 0u; r < 4u; r++) {{
                if (wid.x * 64u + 4u * lg + r < m) {{ av[r] = A_at(arow[r], kk); }}
                if (wid.y * 64u + 4u * lg + r < n) {{ bv[r] = B_at(brow[r], kk); }}
            }}
        }}
        As[lk * 16u + lg] = av;
        Bs[lk * 16u + lg] = bv;
        workgroupBarrier();
        for (var q = 0u; q < 16u; q++) {{
            let a = As[q * 16u + tx];
            let b = Bs[q * 16u + ty];
{fma}        }}
        workgroupBarrier();
    }}
    let i0 = wid.x * 64u + 4u * tx;
    let j0 = wid.y * 64u + 4u * ty;
{store}}}
"#
        );
        Shader::new()
            .tensor("D", 0, DType::F32, Access::Write)
            .tensor("A", 1, a.dtype, Access::Read)
            .tensor("B", 2, b.dtype, Access::Read)
            .code(&code)
            .finish()
    })?;
    let groups = [m.div_ceil(64), n.div_ceil(64), d.ne[2] * d.ne[3]];
    rec.dispatch_grid(p, &[d, a, b], mm_params(a, b, row0), groups)
}

/// WGSL helpers of the subgroup kernel.
const SG_HELPERS: &str = r#"
fn i8x4(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(bitcast<i32>(w << 24u) >> 24u), f32(bitcast<i32>(w << 16u) >> 24u),
                     f32(bitcast<i32>(w << 8u) >> 24u), f32(bitcast<i32>(w) >> 24u));
}
fn u4x4(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(w & 15u), f32((w >> 8u) & 15u), f32((w >> 16u) & 15u), f32((w >> 24u) & 15u));
}
fn bf16x4(x: u32, y: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(x << 16u), bitcast<f32>(x & 0xffff0000u), bitcast<f32>(y << 16u), bitcast<f32>(y & 0xffff0000u));
}
// bytes b..b+4 as a word, for b even: w0 and w1 are the words at b >> 2 and the next
fn join2(w0: u32, w1: u32, b: u32) -> u32 {
    return select((w0 >> 16u) | (w1 << 16u), w0, (b & 2u) == 0u);
}
fn byte_of3(s0: u32, s1: u32, s2: u32, k: u32) -> u32 {
    let w = select(select(s2, s1, k < 8u), s0, k < 4u);
    return (w >> ((k & 3u) * 8u)) & 0xffu;
}
fn u8x4(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(w & 255u), f32((w >> 8u) & 255u), f32((w >> 16u) & 255u), f32(w >> 24u));
}
// bits 0..4 of h moved to bit 0 of bytes 0..4
fn spread4(h: u32) -> u32 {
    return (h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u);
}
// Q4_K: the 6-bit scale and min of sub-block j from the 12 packed bytes
fn q4k_scale_min(s0: u32, s1: u32, s2: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(byte_of3(s0, s1, s2, j) & 63u), f32(byte_of3(s0, s1, s2, j + 4u) & 63u));
    }
    let a = byte_of3(s0, s1, s2, j + 4u);
    return vec2<f32>(f32((a & 15u) | ((byte_of3(s0, s1, s2, j - 4u) >> 6u) << 4u)),
                     f32((a >> 4u) | ((byte_of3(s0, s1, s2, j) >> 6u) << 4u)));
}
"#;

/// The IQ4 table lookup of four nibbles (`A_iq4` comes with the weights'
/// accessors).
const SG_IQ4: &str = r#"
fn iq4x4(w: u32) -> vec4<f32> {
    return vec4<f32>(A_iq4(w & 15u), A_iq4((w >> 8u) & 15u), A_iq4((w >> 16u) & 15u), A_iq4((w >> 24u) & 15u));
}
"#;

const SG_FP4: &str = r#"
fn fp4x4(w: u32) -> vec4<f32> {
    return vec4<f32>(A_fp4(w & 15u), A_fp4((w >> 8u) & 15u), A_fp4((w >> 16u) & 15u), A_fp4((w >> 24u) & 15u));
}
"#;

/// Code that loads the raw storage of row t's current chunk of 32 values
/// (chunk index `ch`, row start byte `ar{t}`), and the expression that
/// decodes values 4q..4q+4 of it as a vec4<f32>.
fn sg_load(dtype: DType, t: u32) -> String {
    let mut s = String::new();
    match dtype {
        DType::F32 => {}
        DType::F16 | DType::BF16 => {
            for p in 0..4 {
                s += &format!("        let h{t}_{p} = A4[ar{t} / 16u + ch * 4u + {p}u];\n");
            }
        }
        DType::Q8_0 => {
            s += &format!("        let b{t} = ar{t} + ch * 34u;\n");
            for i in 0..9 {
                s += &format!("        let w{t}_{i} = A[(b{t} >> 2u) + {i}u];\n");
            }
            s += &format!(
                "        let p{t} = (b{t} & 2u) != 0u;\n        let d{t} = f16_to_f32(select(w{t}_0 & 0xffffu, w{t}_0 >> 16u, p{t}));\n"
            );
        }
        DType::Q4_0 | DType::IQ4_NL => {
            s += &format!("        let b{t} = ar{t} + ch * 18u;\n");
            for i in 0..5 {
                s += &format!("        let w{t}_{i} = A[(b{t} >> 2u) + {i}u];\n");
            }
            s += &format!(
                "        let p{t} = (b{t} & 2u) != 0u;\n        let d{t} = f16_to_f32(select(w{t}_0 & 0xffffu, w{t}_0 >> 16u, p{t}));\n"
            );
            for i in 0..4 {
                s += &format!(
                    "        let s{t}_{i} = select((w{t}_{i} >> 16u) | (w{t}_{j} << 16u), w{t}_{j}, p{t});\n",
                    j = i + 1
                );
            }
        }
        DType::Q4_K => {
            s += &format!(
                r#"        let sb{t} = (ar{t} >> 2u) + (ch >> 3u) * 36u;
        let wd{t} = A[sb{t}];
        let sm{t} = q4k_scale_min(A[sb{t} + 1u], A[sb{t} + 2u], A[sb{t} + 3u], ch & 7u);
        let dl{t} = f16_to_f32(wd{t} & 0xffffu) * sm{t}.x;
        let ml{t} = f16_to_f32(wd{t} >> 16u) * sm{t}.y;
        let qb{t} = sb{t} + 4u + 8u * ((ch & 7u) >> 1u);
        let sh{t} = 4u * (ch & 1u);
"#
            );
            for i in 0..8 {
                s += &format!("        let q{t}_{i} = A[qb{t} + {i}u];\n");
            }
        }
        DType::Q6_K => {
            s += &format!(
                r#"        let sb{t} = ar{t} + (ch >> 3u) * 210u;
        let hh{t} = (ch >> 2u) & 1u;
        let qq{t} = ch & 3u;
        let lb{t} = sb{t} + 64u * hh{t} + 32u * (qq{t} & 1u);
        let hb{t} = sb{t} + 128u + 32u * hh{t};
        let sc{t} = A_u16(sb{t} + 192u + 8u * hh{t} + 2u * qq{t});
        let d{t} = f16_to_f32(A_u16(sb{t} + 208u));
        let d0{t} = d{t} * f32(sext8(sc{t} & 0xffu));
        let d1{t} = d{t} * f32(sext8(sc{t} >> 8u));
"#
            );
            for i in 0..9 {
                s += &format!("        let l{t}_{i} = A[(lb{t} >> 2u) + {i}u];\n");
                s += &format!("        let g{t}_{i} = A[(hb{t} >> 2u) + {i}u];\n");
            }
        }
        DType::Q4_1 => {
            s += &format!(
                r#"        let wb{t} = (ar{t} >> 2u) + ch * 5u;
        let wd{t} = A[wb{t}];
        let d{t} = f16_to_f32(wd{t} & 0xffffu);
        let m{t} = f16_to_f32(wd{t} >> 16u);
"#
            );
            for i in 0..4 {
                s += &format!("        let s{t}_{i} = A[wb{t} + {}u];\n", i + 1);
            }
        }
        DType::Q5_0 => {
            s += &format!("        let b{t} = ar{t} + ch * 22u;\n");
            for i in 0..6 {
                s += &format!("        let w{t}_{i} = A[(b{t} >> 2u) + {i}u];\n");
            }
            s += &format!(
                r#"        let p{t} = (b{t} & 2u) != 0u;
        let d{t} = f16_to_f32(select(w{t}_0 & 0xffffu, w{t}_0 >> 16u, p{t}));
        let h{t} = select((w{t}_0 >> 16u) | (w{t}_1 << 16u), w{t}_1, p{t});
"#
            );
            for i in 0..4 {
                s += &format!(
                    "        let s{t}_{i} = select((w{t}_{j} >> 16u) | (w{t}_{k} << 16u), w{t}_{k}, p{t});\n",
                    j = i + 1,
                    k = i + 2
                );
            }
        }
        DType::Q5_1 => {
            s += &format!(
                r#"        let wb{t} = (ar{t} >> 2u) + ch * 6u;
        let wd{t} = A[wb{t}];
        let d{t} = f16_to_f32(wd{t} & 0xffffu);
        let m{t} = f16_to_f32(wd{t} >> 16u);
        let h{t} = A[wb{t} + 1u];
"#
            );
            for i in 0..4 {
                s += &format!("        let s{t}_{i} = A[wb{t} + {}u];\n", i + 2);
            }
        }
        DType::Q2_K => {
            s += &format!(
                r#"        let sb{t} = (ar{t} >> 2u) + (ch >> 3u) * 21u;
        let c{t} = ch & 7u;
        let sc{t} = A[sb{t} + (c{t} >> 1u)] >> (16u * (c{t} & 1u));
        let wd{t} = A[sb{t} + 20u];
        let d{t} = f16_to_f32(wd{t} & 0xffffu);
        let dm{t} = f16_to_f32(wd{t} >> 16u);
        let dl{t}_0 = d{t} * f32(sc{t} & 15u);
        let ml{t}_0 = dm{t} * f32((sc{t} >> 4u) & 15u);
        let dl{t}_1 = d{t} * f32((sc{t} >> 8u) & 15u);
        let ml{t}_1 = dm{t} * f32((sc{t} >> 12u) & 15u);
        let sh{t} = 2u * (c{t} & 3u);
        let qb{t} = sb{t} + 4u + 8u * (c{t} >> 2u);
"#
            );
            for i in 0..8 {
                s += &format!("        let q{t}_{i} = A[qb{t} + {i}u];\n");
            }
        }
        DType::Q3_K => {
            s += &format!(
                r#"        let kb{t} = ar{t} + (ch >> 3u) * 110u;
        let c{t} = ch & 7u;
        let qb{t} = kb{t} + 32u + 32u * (c{t} >> 2u);
        let lw{t} = A_u16(kb{t} + 96u + 2u * (c{t} & 3u));
        let hw{t} = A_u16(kb{t} + 104u + 2u * (c{t} & 1u));
        let so{t} = 4u * (c{t} >> 2u);
        let sp{t} = 2u * (c{t} >> 1u);
        let d{t} = f16_to_f32(A_u16(kb{t} + 108u));
        let dl{t}_0 = d{t} * (f32(((lw{t} >> so{t}) & 15u) | (((hw{t} >> sp{t}) & 3u) << 4u)) - 32.0);
        let dl{t}_1 = d{t} * (f32(((lw{t} >> (8u + so{t})) & 15u) | (((hw{t} >> (8u + sp{t})) & 3u) << 4u)) - 32.0);
"#
            );
            for i in 0..9 {
                s += &format!("        let hm{t}_{i} = A[(kb{t} >> 2u) + {i}u];\n");
                s += &format!("        let ql{t}_{i} = A[(qb{t} >> 2u) + {i}u];\n");
            }
        }
        DType::Q5_K => {
            s += &format!(
                r#"        let sb{t} = (ar{t} >> 2u) + (ch >> 3u) * 44u;
        let c{t} = ch & 7u;
        let wd{t} = A[sb{t}];
        let sm{t} = q4k_scale_min(A[sb{t} + 1u], A[sb{t} + 2u], A[sb{t} + 3u], c{t});
        let dl{t} = f16_to_f32(wd{t} & 0xffffu) * sm{t}.x;
        let ml{t} = f16_to_f32(wd{t} >> 16u) * sm{t}.y;
        let qb{t} = sb{t} + 12u + 8u * (c{t} >> 1u);
        let sh{t} = 4u * (c{t} & 1u);
"#
            );
            for i in 0..8 {
                s += &format!("        let q{t}_{i} = A[qb{t} + {i}u];\n");
                s += &format!("        let h{t}_{i} = A[sb{t} + {}u];\n", i + 4);
            }
        }
        DType::IQ4_XS => {
            s += &format!(
                r#"        let sb{t} = (ar{t} >> 2u) + (ch >> 3u) * 34u;
        let c{t} = ch & 7u;
        let wd{t} = A[sb{t}];
        let sc{t} = ((A[sb{t} + 1u] >> (4u * c{t})) & 15u) | (((wd{t} >> (16u + 2u * c{t})) & 3u) << 4u);
        let dl{t} = f16_to_f32(wd{t} & 0xffffu) * (f32(sc{t}) - 32.0);
"#
            );
            for i in 0..4 {
                s += &format!("        let s{t}_{i} = A[sb{t} + 2u + 4u * c{t} + {i}u];\n");
            }
        }
        DType::MXFP4 => {
            // 17-byte blocks at any byte: five words from the codes' word,
            // shifted down to the codes' first byte
            s += &format!(
                r#"        let b{t} = ar{t} + ch * 17u;
        let c{t} = b{t} + 1u;
        let sh{t} = (c{t} & 3u) * 8u;
        let e{t} = (A[b{t} >> 2u] >> ((b{t} & 3u) * 8u)) & 0xffu;
        let d{t} = bitcast<f32>(select((e{t} - 1u) << 23u, 0x00200000u << e{t}, e{t} < 2u));
"#
            );
            for i in 0..5 {
                s += &format!("        let w{t}_{i} = A[(c{t} >> 2u) + {i}u];\n");
            }
            for i in 0..4 {
                s += &format!(
                    "        let s{t}_{i} = select((w{t}_{i} >> sh{t}) | (w{t}_{j} << (32u - sh{t})), w{t}_{i}, sh{t} == 0u);\n",
                    j = i + 1
                );
            }
        }
        DType::I32 => {}
    }
    s
}

fn sg_decode(dtype: DType, t: u32, q: u32) -> String {
    match dtype {
        DType::F32 => format!("bitcast<vec4<f32>>(A4[ar{t} / 16u + ch * 8u + {q}u])"),
        DType::F16 => {
            let (p, w) = (q / 2, (q % 2) * 2);
            format!(
                "vec4<f32>(unpack2x16float(h{t}_{p}[{w}u]), unpack2x16float(h{t}_{p}[{w1}u]))",
                w1 = w + 1
            )
        }
        DType::BF16 => {
            let (p, w) = (q / 2, (q % 2) * 2);
            format!("bf16x4(h{t}_{p}[{w}u], h{t}_{p}[{w1}u])", w1 = w + 1)
        }
        DType::Q8_0 => format!(
            "i8x4(select((w{t}_{q} >> 16u) | (w{t}_{q1} << 16u), w{t}_{q1}, p{t})) * d{t}",
            q1 = q + 1
        ),
        DType::Q4_0 => {
            if q < 4 {
                format!("(u4x4(s{t}_{q}) - 8.0) * d{t}")
            } else {
                format!("(u4x4(s{t}_{i} >> 4u) - 8.0) * d{t}", i = q - 4)
            }
        }
        DType::Q4_K => format!("u4x4(q{t}_{q} >> sh{t}) * dl{t} - ml{t}"),
        DType::Q6_K => format!(
            "(vec4<f32>((u4x4(join2(l{t}_{q}, l{t}_{q1}, lb{t}) >> (4u * (qq{t} >> 1u))) + 16.0 * u4x4((join2(g{t}_{q}, g{t}_{q1}, hb{t}) >> (2u * qq{t})) & 0x03030303u))) - 32.0) * {dd}",
            q1 = q + 1,
            dd = if q < 4 {
                format!("d0{t}")
            } else {
                format!("d1{t}")
            }
        ),
        DType::Q4_1 => format!("u4x4({}) * d{t} + m{t}", nibbles(t, q)),
        DType::Q5_0 => format!(
            "(u8x4(({} & 0x0f0f0f0fu) | (spread4(h{t} >> {s}u) << 4u)) - 16.0) * d{t}",
            nibbles(t, q),
            s = 4 * q
        ),
        DType::Q5_1 => format!(
            "u8x4(({} & 0x0f0f0f0fu) | (spread4(h{t} >> {s}u) << 4u)) * d{t} + m{t}",
            nibbles(t, q),
            s = 4 * q
        ),
        DType::Q2_K => format!(
            "u8x4((q{t}_{q} >> sh{t}) & 0x03030303u) * dl{t}_{h} - ml{t}_{h}",
            h = q / 4
        ),
        DType::Q3_K => format!(
            "(u8x4(((join2(ql{t}_{q}, ql{t}_{q1}, qb{t}) >> (2u * (c{t} & 3u))) & 0x03030303u) | (((join2(hm{t}_{q}, hm{t}_{q1}, kb{t}) >> c{t}) & 0x01010101u) << 2u)) - 4.0) * dl{t}_{h}",
            q1 = q + 1,
            h = q / 4
        ),
        DType::Q5_K => format!(
            "u8x4(((q{t}_{q} >> sh{t}) & 0x0f0f0f0fu) | (((h{t}_{q} >> c{t}) & 0x01010101u) << 4u)) * dl{t} - ml{t}"
        ),
        DType::IQ4_NL => format!("iq4x4({}) * d{t}", nibbles(t, q)),
        DType::IQ4_XS => format!("iq4x4({}) * dl{t}", nibbles(t, q)),
        DType::MXFP4 => format!("fp4x4({}) * d{t}", nibbles(t, q)),
        DType::I32 => "vec4<f32>(0.0)".into(),
    }
}

/// The word whose bytes hold (in their low nibbles) values 4q..4q+4 of a
/// block of 32 stored as Q4_0's nibbles, in words `s{t}_0..4`.
fn nibbles(t: u32, q: u32) -> String {
    if q < 4 {
        format!("s{t}_{q}")
    } else {
        format!("(s{t}_{i} >> 4u)", i = q - 4)
    }
}

/// Rows per lane of the subgroup kernel.
const SG_TM: u32 = 4;
/// Subgroups per workgroup of the subgroup kernel.
const SG_GROUPS: u32 = 4;

/// Columns per subgroup for a product with `n` columns.
/// (16 rather than 32: wider tiles did not run faster on lavapipe, and
/// the kernel builds faster with fewer columns.)
fn sg_columns(n: u32) -> u32 {
    n.next_power_of_two().clamp(1, 16)
}

/// The subgroup kernel (see the module documentation). With `ids`, it
/// computes mul_mat_id instead: one column per (slot, token) pair, whose
/// expert is read from `ids` on the device.
fn subgroup(
    rec: &mut Recorder,
    d: &TArg,
    a: &TArg,
    b: &TArg,
    row0: u32,
    ids: Option<&TArg>,
) -> Result<()> {
    let gpu = rec.gpu;
    let m = a.ne[1];
    let (n, columns) = match ids {
        None => (d.ne[1], d.ne[1]),
        // one pair per workgroup column
        Some(_) => (1, d.ne[1] * d.ne[2]),
    };
    if m == 0 || columns == 0 {
        return Ok(());
    }
    let (tm, nc) = (SG_TM, sg_columns(n));
    let mode = if ids.is_some() { "|id" } else { "" };
    let key = format!("mul_mat_subgroup|{}|tm={tm},nc={nc}{mode}", a.dtype);
    let n_storage = if ids.is_some() { 5 } else { 3 };
    let p = pipeline(gpu, &key, n_storage, || {
        let dt = a.dtype;
        let mut s = String::new();
        let (a_row, b_row, store) = if ids.is_some() {
            s += r#"    let e = wid.y % D_ne(1u);
    let tok = wid.y / D_ne(1u);
    let raw = bitcast<i32>(C_bits(C_row(tok, 0u, 0u) + e * C_nb(0u)));
    let ok = raw >= 0 && raw < i32(A_ne(2u));
    if (!ok && lid == 0u && wid.x == 0u) { bad_index(4u, raw, A_ne(2u)); }
    let ex = u32(clamp(raw, 0, i32(A_ne(2u)) - 1));
"#;
            (
                "A_row(min(rb + {t}u, m - 1u), ex, 0u)",
                "B_row(e % B_ne(1u), tok, 0u)",
                "D_set(rb + {t}u, e, tok, 0u, select(0.0, acc{t}_{c}, ok));",
            )
        } else {
            (
                "A_row(min(rb + {t}u, m - 1u), i2 / op_u(1u), i3 / op_u(2u))",
                "B_row(min(j0 + {c}u, n - 1u), i2, i3)",
                "D_set(op_u(0u) + rb + {t}u, j0 + {c}u, i2, i3, acc{t}_{c});",
            )
        };
        for t in 0..tm {
            s += &format!(
                "    let ar{t} = {};\n",
                a_row.replace("{t}", &t.to_string())
            );
        }
        for c in 0..nc {
            s += &format!(
                "    let bb{c} = {} / 16u + sl;\n",
                b_row.replace("{c}", &c.to_string())
            );
        }
        for t in 0..tm {
            for c in 0..nc {
                s += &format!("    var acc{t}_{c} = 0.0;\n");
            }
        }
        s += "    for (var ch = 0u; ch < nch; ch++) {\n";
        for c in 0..nc {
            s += &format!("        let bl{c} = bitcast<vec4<f32>>(B4[bb{c} + ch * 8u]);\n");
        }
        for t in 0..tm {
            s += &sg_load(dt, t);
        }
        for q in 0..8 {
            for t in 0..tm {
                s += &format!("        let a{t}_{q} = {};\n", sg_decode(dt, t, q));
            }
            for c in 0..nc {
                s += &format!("        let b{c}_{q} = subgroupBroadcast(bl{c}, {q}u);\n");
                for t in 0..tm {
                    s += &format!("        acc{t}_{c} += dot(a{t}_{q}, b{c}_{q});\n");
                }
            }
        }
        s += "    }\n";
        for t in 0..tm {
            for c in 0..nc {
                let guard = if ids.is_some() {
                    format!("rb + {t}u < m")
                } else {
                    format!("rb + {t}u < m && j0 + {c}u < n")
                };
                let st = store
                    .replace("{t}", &t.to_string())
                    .replace("{c}", &c.to_string());
                s += &format!("    if ({guard}) {{ {st} }}\n");
            }
        }
        let code = format!(
            r#"
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sl: u32) {{
    let m = A_ne(1u);
    let n = D_ne(1u);
    let nch = A_ne(0u) / 32u;
    let i2 = wid.z % D_ne(2u);
    let i3 = wid.z / D_ne(2u);
    let rb = (wid.x * {groups}u + lid / 8u) * {rows}u + sl * {tm}u;
    let j0 = wid.y * {nc}u;
{s}}}
"#,
            wg = 8 * SG_GROUPS,
            groups = SG_GROUPS,
            rows = 8 * tm,
        );
        let mut sh = Shader::new().tensor("D", 0, DType::F32, Access::Write);
        sh = match dt {
            DType::F32 | DType::F16 | DType::BF16 => sh.tensor_vec4("A", 1),
            _ => sh.tensor("A", 1, dt, Access::Read),
        };
        sh = sh.tensor_vec4("B", 2);
        if ids.is_some() {
            sh = sh.tensor("C", 3, DType::I32, Access::Read).status(4);
        }
        sh = sh.code(SG_HELPERS);
        if matches!(dt, DType::IQ4_NL | DType::IQ4_XS) {
            sh = sh.code(SG_IQ4);
        }
        if dt == DType::MXFP4 {
            sh = sh.code(SG_FP4);
        }
        sh.code(&code).finish()
    })?;
    let rows_per_group = 8 * tm * SG_GROUPS;
    match ids {
        None => {
            let groups = [
                m.div_ceil(rows_per_group),
                n.div_ceil(nc),
                d.ne[2] * d.ne[3],
            ];
            rec.dispatch_grid(p, &[d, a, b], mm_params(a, b, row0), groups)
        }
        Some(ids) => {
            let status = rec.status();
            let groups = [m.div_ceil(rows_per_group), columns, 1];
            rec.dispatch_grid(p, &[d, a, b, ids, &status], Params::new(), groups)
        }
    }
}

/// `mul_mat_id(as, b, ids)`: the subgroup kernel with one column per
/// (slot, token) pair where it applies, otherwise one thread per result
/// element.
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
    let pairs = d.ne[1] as u64 * d.ne[2] as u64;
    let max_groups = gpu.limits.max_compute_workgroups_per_dimension as u64;
    let subgroup_ok = subgroup_fits(rec, &d, &a, &b) && pairs <= max_groups;
    if subgroup_ok && gpu.options.matmul_kernel != Some(Kernel::Generic) {
        return subgroup(rec, &d, &a, &b, 0, Some(&ids));
    }
    let key = format!("mul_mat_id_generic|{}x{}", a.dtype, b.dtype);
    let p = pipeline(gpu, &key, 5, || {
        let code = r#"    if (idx >= op_u(31u)) { return; }
    let i = idx % D_ne(0u);
    let r = idx / D_ne(0u);
    let e = r % D_ne(1u);
    let tok = r / D_ne(1u);
    let expert = bitcast<i32>(C_bits(C_row(tok, 0u, 0u) + e * C_nb(0u)));
    if (expert < 0 || expert >= i32(A_ne(2u))) {
        D_set(i, e, tok, 0u, 0.0);
        bad_index(4u, expert, A_ne(2u));
        return;
    }
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
            .status(4)
            .code(&entry(WG, code))
            .finish()
    })?;
    let mut params = Params::new();
    params.set(31, n as u32);
    let status = rec.status();
    rec.dispatch(
        p,
        &[&d, &a, &b, &ids, &status],
        params,
        n.div_ceil(WG as u64),
    )
}
