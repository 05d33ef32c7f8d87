//! WGSL source generation: a prelude, and typed accessors for each bound
//! tensor.
//!
//! Tensors are bound as arrays of 32-bit words and addressed in bytes, so
//! that every type reads the same way: f16 and bf16 values are halves of
//! words, quantised blocks are decoded from bytes. A tensor the kernel
//! writes in pieces smaller than a word (f16, bf16, quantised blocks) is
//! bound as atomic words, and its partial words are written with atomic
//! and/or, so that neighbouring threads never lose each other's halves.
//!
//! For a tensor bound as `X` in slot s, the generated functions are:
//! `X_ne(d)`, `X_nb(d)` (byte strides), `X_row(i1, i2, i3)` (byte offset of
//! a row), `X_at(rowb, i0)` (element i0 of the row at byte rowb, as f32,
//! dequantised for block types), `X_get(i0, i1, i2, i3)`, `X_bits(b)` (the
//! raw bits of the element at byte b), and for written tensors `X_setf(b,
//! v)`, `X_setbits(b, bits)`, `X_set(i0, i1, i2, i3, v)` and, for block
//! types, `X_put_bytes(b0, n, bytes)`.

use ggraph_core::DType;
use ggraph_core::quant::{IQ4_VALUES, MXFP4_VALUES};

/// The part every kernel shares: parameters and conversions.
pub(crate) const PRELUDE: &str = r#"
struct Params { v: array<vec4<u32>, 32> }
@group(0) @binding(0) var<uniform> P: Params;
fn pu(i: u32) -> u32 { return P.v[i >> 2u][i & 3u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }
const P_OP: u32 = 96u;
fn op_u(i: u32) -> u32 { return pu(P_OP + i); }
fn op_f(i: u32) -> f32 { return pf(P_OP + i); }
fn neg_inf() -> f32 { var b = 0xff800000u; return bitcast<f32>(b); }
fn is_neg_inf(x: f32) -> bool { return bitcast<u32>(x) == 0xff800000u; }
fn f16_to_f32(b: u32) -> f32 { return unpack2x16float(b).x; }
fn f32_to_f16(v: f32) -> u32 { return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu; }
fn bf16_to_f32(b: u32) -> f32 { return bitcast<f32>(b << 16u); }
fn f32_to_bf16(v: f32) -> u32 {
    let u = bitcast<u32>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return ((u >> 16u) | 64u) & 0xffffu; }
    return ((u + (0x7fffu + ((u >> 16u) & 1u))) >> 16u) & 0xffffu;
}
fn sext8(b: u32) -> i32 { return bitcast<i32>(b << 24u) >> 24u; }
// the linear index of a workgroup in a grid spread over x and y
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.x + wid.y * nwg.x; }
"#;

/// How a kernel uses a bound tensor.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// Whether writes to `dtype` touch parts of words.
fn sub_word(dtype: DType) -> bool {
    !matches!(dtype, DType::F32 | DType::I32)
}

/// WGSL accessors for a tensor bound in `slot` (binding slot + 1) as `x`.
pub(crate) fn tensor(x: &str, slot: usize, dtype: DType, access: Access) -> String {
    let atomic = access == Access::Write && sub_word(dtype);
    let elem = if atomic { "atomic<u32>" } else { "u32" };
    let mut s = format!(
        "@group(0) @binding({b}) var<storage, read_write> {x}: array<{elem}>;\n",
        b = slot + 1
    );
    s += &accessors(x, slot, dtype, access);
    s
}

/// The accessors of `tensor` without the binding declaration (for kernels
/// that declare the binding with another element type as well).
pub(crate) fn accessors(x: &str, slot: usize, dtype: DType, access: Access) -> String {
    let atomic = access == Access::Write && sub_word(dtype);
    let base = 16 * slot;
    let mut s = String::new();
    if atomic {
        s += &format!("fn {x}_w(i: u32) -> u32 {{ return atomicLoad(&{x}[i]); }}\n");
    } else {
        s += &format!("fn {x}_w(i: u32) -> u32 {{ return {x}[i]; }}\n");
    }
    s += &format!(
        r#"fn {x}_u8(b: u32) -> u32 {{ return ({x}_w(b >> 2u) >> ((b & 3u) << 3u)) & 0xffu; }}
fn {x}_u16(b: u32) -> u32 {{ return ({x}_w(b >> 2u) >> ((b & 2u) << 3u)) & 0xffffu; }}
fn {x}_off() -> u32 {{ return pu({base}u); }}
fn {x}_ne(d: u32) -> u32 {{ return pu({base}u + 1u + d); }}
fn {x}_nb(d: u32) -> u32 {{ return pu({base}u + 5u + d); }}
fn {x}_row(i1: u32, i2: u32, i3: u32) -> u32 {{ return {x}_off() + i1 * {x}_nb(1u) + i2 * {x}_nb(2u) + i3 * {x}_nb(3u); }}
"#
    );
    // raw bits and f32 value of one element at byte b (plain types)
    let (bits, f) = match dtype {
        DType::F32 => (
            format!("{x}_w(b >> 2u)"),
            format!("bitcast<f32>({x}_w(b >> 2u))"),
        ),
        DType::I32 => (
            format!("{x}_w(b >> 2u)"),
            format!("f32(bitcast<i32>({x}_w(b >> 2u)))"),
        ),
        DType::F16 => (format!("{x}_u16(b)"), format!("f16_to_f32({x}_u16(b))")),
        DType::BF16 => (format!("{x}_u16(b)"), format!("bf16_to_f32({x}_u16(b))")),
        _ => ("0u".to_string(), "0.0".to_string()),
    };
    s += &format!("fn {x}_bits(b: u32) -> u32 {{ return {bits}; }}\n");
    s += &format!("fn {x}_f(b: u32) -> f32 {{ return {f}; }}\n");
    s += &at_fn(x, dtype);
    s += &format!(
        "fn {x}_get(i0: u32, i1: u32, i2: u32, i3: u32) -> f32 {{ return {x}_at({x}_row(i1, i2, i3), i0); }}\n"
    );
    if access == Access::Write {
        s += &store_fns(x, dtype, atomic);
    }
    s
}

/// `X_at(rowb, i0)`: element i0 of the row starting at byte rowb.
fn at_fn(x: &str, dtype: DType) -> String {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 | DType::I32 => format!(
            "fn {x}_at(rowb: u32, i0: u32) -> f32 {{ return {x}_f(rowb + i0 * {x}_nb(0u)); }}\n"
        ),
        DType::Q8_0 => format!(
            r#"fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 5u) * 34u;
    let d = f16_to_f32({x}_u16(blk));
    return d * f32(sext8({x}_u8(blk + 2u + (i0 & 31u))));
}}
"#
        ),
        DType::Q4_0 => format!(
            r#"fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 5u) * 18u;
    let j = i0 & 31u;
    let byte = {x}_u8(blk + 2u + (j & 15u));
    let q = select(byte & 15u, byte >> 4u, j >= 16u);
    return (f32(q) - 8.0) * f16_to_f32({x}_u16(blk));
}}
"#
        ),
        DType::Q4_1 => format!(
            r#"fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 5u) * 20u;
    let j = i0 & 31u;
    let byte = {x}_u8(blk + 4u + (j & 15u));
    let q = select(byte & 15u, byte >> 4u, j >= 16u);
    return f32(q) * f16_to_f32({x}_u16(blk)) + f16_to_f32({x}_u16(blk + 2u));
}}
"#
        ),
        DType::Q5_0 => format!(
            r#"{q5}fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 5u) * 22u;
    return (f32({x}_q5(blk + 2u, i0 & 31u)) - 16.0) * f16_to_f32({x}_u16(blk));
}}
"#,
            q5 = q5_code_fn(x)
        ),
        DType::Q5_1 => format!(
            r#"{q5}fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 5u) * 24u;
    return f32({x}_q5(blk + 4u, i0 & 31u)) * f16_to_f32({x}_u16(blk)) + f16_to_f32({x}_u16(blk + 2u));
}}
"#,
            q5 = q5_code_fn(x)
        ),
        DType::Q2_K => format!(
            r#"fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 8u) * 84u;
    let j = i0 & 255u;
    let q = ({x}_u8(blk + 16u + 32u * (j >> 7u) + (j & 31u)) >> (2u * ((j >> 5u) & 3u))) & 3u;
    let sc = {x}_u8(blk + (j >> 4u));
    let d = f16_to_f32({x}_u16(blk + 80u));
    let dmin = f16_to_f32({x}_u16(blk + 82u));
    return (d * f32(sc & 15u)) * f32(q) - dmin * f32(sc >> 4u);
}}
"#
        ),
        DType::Q3_K => format!(
            r#"fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 8u) * 110u;
    let j = i0 & 255u;
    let lo = ({x}_u8(blk + 32u + 32u * (j >> 7u) + (j & 31u)) >> (2u * ((j >> 5u) & 3u))) & 3u;
    let hi = ({x}_u8(blk + (j & 31u)) >> (j >> 5u)) & 1u;
    let s = j >> 4u;
    let sl = ({x}_u8(blk + 96u + (s & 7u)) >> (4u * (s >> 3u))) & 15u;
    let sh = ({x}_u8(blk + 104u + (s & 3u)) >> (2u * (s >> 2u))) & 3u;
    let d = f16_to_f32({x}_u16(blk + 108u));
    return (d * (f32(sl | (sh << 4u)) - 32.0)) * (f32(lo | (hi << 2u)) - 4.0);
}}
"#
        ),
        DType::Q4_K => format!(
            r#"{sm}fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 8u) * 144u;
    let j = i0 & 255u;
    let g = j >> 6u;
    let w = j & 63u;
    let byte = {x}_u8(blk + 16u + 32u * g + (w & 31u));
    let q = select(byte & 15u, byte >> 4u, w >= 32u);
    let sm = {x}_scale_min(blk, 2u * g + (w >> 5u));
    let d = f16_to_f32({x}_u16(blk));
    let dmin = f16_to_f32({x}_u16(blk + 2u));
    return (d * f32(sm.x)) * f32(q) - dmin * f32(sm.y);
}}
"#,
            sm = k_scale_min_fn(x)
        ),
        DType::Q5_K => format!(
            r#"{sm}fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 8u) * 176u;
    let j = i0 & 255u;
    let g = j >> 6u;
    let w = j & 63u;
    let byte = {x}_u8(blk + 48u + 32u * g + (w & 31u));
    let hi = ({x}_u8(blk + 16u + (j & 31u)) >> (j >> 5u)) & 1u;
    let q = select(byte & 15u, byte >> 4u, w >= 32u) | (hi << 4u);
    let sm = {x}_scale_min(blk, j >> 5u);
    let d = f16_to_f32({x}_u16(blk));
    let dmin = f16_to_f32({x}_u16(blk + 2u));
    return (d * f32(sm.x)) * f32(q) - dmin * f32(sm.y);
}}
"#,
            sm = k_scale_min_fn(x)
        ),
        DType::Q6_K => format!(
            r#"fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 8u) * 210u;
    let j = i0 & 255u;
    let h = j >> 7u;
    let r = j & 127u;
    let quarter = r >> 5u;
    let l = r & 31u;
    let qlb = {x}_u8(blk + 64u * h + l + 32u * (quarter & 1u));
    let lo = select(qlb & 15u, qlb >> 4u, quarter >= 2u);
    let hi = ({x}_u8(blk + 128u + 32u * h + l) >> (2u * quarter)) & 3u;
    let q = i32(lo | (hi << 4u)) - 32;
    let sc = sext8({x}_u8(blk + 192u + 8u * h + (l >> 4u) + 2u * quarter));
    let d = f16_to_f32({x}_u16(blk + 208u));
    return (d * f32(sc)) * f32(q);
}}
"#
        ),
        DType::IQ4_NL => format!(
            r#"{iq4}fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 5u) * 18u;
    let j = i0 & 31u;
    let byte = {x}_u8(blk + 2u + (j & 15u));
    return f16_to_f32({x}_u16(blk)) * {x}_iq4(select(byte & 15u, byte >> 4u, j >= 16u));
}}
"#,
            iq4 = iq4_value_fn(x)
        ),
        DType::IQ4_XS => format!(
            r#"{iq4}fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 8u) * 136u;
    let j = i0 & 255u;
    let s = j >> 5u;
    let l = j & 31u;
    let byte = {x}_u8(blk + 8u + 16u * s + (l & 15u));
    let sl = ({x}_u8(blk + 4u + (s >> 1u)) >> (4u * (s & 1u))) & 15u;
    let sh = ({x}_u16(blk + 2u) >> (2u * s)) & 3u;
    let dl = f16_to_f32({x}_u16(blk)) * (f32(sl | (sh << 4u)) - 32.0);
    return dl * {x}_iq4(select(byte & 15u, byte >> 4u, l >= 16u));
}}
"#,
            iq4 = iq4_value_fn(x)
        ),
        DType::MXFP4 => format!(
            r#"{fp4}fn {x}_at(rowb: u32, i0: u32) -> f32 {{
    let blk = rowb + (i0 >> 5u) * 17u;
    let j = i0 & 31u;
    let e = {x}_u8(blk);
    let byte = {x}_u8(blk + 1u + (j & 15u));
    let d = bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
    return {x}_fp4(select(byte & 15u, byte >> 4u, j >= 16u)) * d;
}}
"#,
            fp4 = table_value_fn(x, "fp4", &MXFP4_VALUES)
        ),
    }
}

/// `X_q5(qb, j)`: the 5-bit code of value j of a Q5_0 / Q5_1 block whose
/// fifth bits start at byte qb (its nibbles follow them).
fn q5_code_fn(x: &str) -> String {
    format!(
        r#"fn {x}_q5(qb: u32, j: u32) -> u32 {{
    let byte = {x}_u8(qb + 4u + (j & 15u));
    let hi = ({x}_u8(qb + (j >> 3u)) >> (j & 7u)) & 1u;
    return select(byte & 15u, byte >> 4u, j >= 16u) | (hi << 4u);
}}
"#
    )
}

/// `X_scale_min(blk, j)`: the 6-bit scale and min of sub-block j of a
/// Q4_K / Q5_K super-block, from the 12 bytes at blk + 4.
fn k_scale_min_fn(x: &str) -> String {
    format!(
        r#"fn {x}_scale_min(blk: u32, j: u32) -> vec2<u32> {{
    if (j < 4u) {{
        return vec2<u32>({x}_u8(blk + 4u + j) & 63u, {x}_u8(blk + 8u + j) & 63u);
    }}
    let a = {x}_u8(blk + 8u + j);
    return vec2<u32>((a & 15u) | (({x}_u8(blk + j) >> 6u) << 4u), (a >> 4u) | (({x}_u8(blk + 4u + j) >> 6u) << 4u));
}}
"#
    )
}

/// The IQ4 table as four words of signed bytes (entry q in byte q % 4 of
/// word q / 4).
/// A table of sixteen signed bytes as four little-endian words.
fn table_words(table: &[i8; 16]) -> [u32; 4] {
    std::array::from_fn(|w| u32::from_le_bytes(std::array::from_fn(|b| table[4 * w + b] as u8)))
}

/// `X_{name}(q)`: entry q (0..16) of `table`.
fn table_value_fn(x: &str, name: &str, table: &[i8; 16]) -> String {
    let [w0, w1, w2, w3] = table_words(table);
    format!(
        r#"fn {x}_{name}(q: u32) -> f32 {{
    let w = select(select({w0:#x}u, {w1:#x}u, q >= 4u), select({w2:#x}u, {w3:#x}u, q >= 12u), q >= 8u);
    return f32(sext8(w >> (8u * (q & 3u))));
}}
"#
    )
}

/// `X_iq4(q)`: entry q of the IQ4 table.
fn iq4_value_fn(x: &str) -> String {
    table_value_fn(x, "iq4", &IQ4_VALUES)
}

fn store_fns(x: &str, dtype: DType, atomic: bool) -> String {
    let mut s = String::new();
    if atomic {
        s += &format!(
            r#"fn {x}_set16(b: u32, v: u32) {{
    let i = b >> 2u;
    let sh = (b & 2u) << 3u;
    atomicAnd(&{x}[i], ~(0xffffu << sh));
    atomicOr(&{x}[i], (v & 0xffffu) << sh);
}}
// bytes[0..n] written at byte b0 (words shared with neighbours are merged)
fn {x}_put_bytes(b0: u32, n: u32, bytes: ptr<function, array<u32, 212>>) {{
    let first = b0 >> 2u;
    let last = (b0 + n - 1u) >> 2u;
    for (var w = first; w <= last; w++) {{
        var val = 0u;
        var mask = 0u;
        for (var k = 0u; k < 4u; k++) {{
            let b = w * 4u + k;
            if (b >= b0 && b < b0 + n) {{
                val |= ((*bytes)[b - b0] & 0xffu) << (8u * k);
                mask |= 0xffu << (8u * k);
            }}
        }}
        if (mask == 0xffffffffu) {{
            atomicStore(&{x}[w], val);
        }} else {{
            atomicAnd(&{x}[w], ~mask);
            atomicOr(&{x}[w], val);
        }}
    }}
}}
"#
        );
    } else {
        s += &format!("fn {x}_setw(i: u32, v: u32) {{ {x}[i] = v; }}\n");
    }
    let (setbits, setf) = match dtype {
        DType::F32 => (
            format!("{x}_setw(b >> 2u, v);"),
            format!("{x}_setw(b >> 2u, bitcast<u32>(v));"),
        ),
        DType::I32 => (
            format!("{x}_setw(b >> 2u, v);"),
            format!("{x}_setw(b >> 2u, bitcast<u32>(i32(v)));"),
        ),
        DType::F16 => (
            format!("{x}_set16(b, v);"),
            format!("{x}_set16(b, f32_to_f16(v));"),
        ),
        DType::BF16 => (
            format!("{x}_set16(b, v);"),
            format!("{x}_set16(b, f32_to_bf16(v));"),
        ),
        _ => (String::new(), String::new()),
    };
    s += &format!("fn {x}_setbits(b: u32, v: u32) {{ {setbits} }}\n");
    s += &format!("fn {x}_setf(b: u32, v: f32) {{ {setf} }}\n");
    s += &format!(
        "fn {x}_set(i0: u32, i1: u32, i2: u32, i3: u32, v: f32) {{ {x}_setf({x}_row(i1, i2, i3) + i0 * {x}_nb(0u), v); }}\n"
    );
    s
}

/// The status word in slot `{slot}`: `bad_index(kind, value, limit)`
/// records an index outside its tensor (kind bits: 1 get_rows, 2
/// set_rows, 4 mul_mat_id, 8 add_id).
pub(crate) const STATUS: &str = r#"@group(0) @binding({binding}) var<storage, read_write> STATUS: array<atomic<u32>>;
fn bad_index(kind: u32, value: i32, limit: u32) {
    atomicOr(&STATUS[0], kind);
    atomicStore(&STATUS[1], bitcast<u32>(value));
    atomicStore(&STATUS[2], limit);
}
"#;

/// A shader: the prelude, the tensors and a body.
pub(crate) struct Shader {
    src: String,
}

impl Shader {
    pub fn new() -> Shader {
        Shader {
            src: PRELUDE.to_string(),
        }
    }

    /// Declares tensor slot `slot` as `x`.
    pub fn tensor(mut self, x: &str, slot: usize, dtype: DType, access: Access) -> Shader {
        self.src += &tensor(x, slot, dtype, access);
        self
    }

    /// Declares tensor slot `slot` as `x4`, an array of vec4 words (for
    /// 16-byte loads), with only the layout accessors of `x` (`x_ne`,
    /// `x_nb`, `x_off`, `x_row`).
    pub fn tensor_vec4(mut self, x: &str, slot: usize) -> Shader {
        let base = 16 * slot;
        self.src += &format!(
            r#"@group(0) @binding({b}) var<storage, read_write> {x}4: array<vec4<u32>>;
fn {x}_off() -> u32 {{ return pu({base}u); }}
fn {x}_ne(d: u32) -> u32 {{ return pu({base}u + 1u + d); }}
fn {x}_nb(d: u32) -> u32 {{ return pu({base}u + 5u + d); }}
fn {x}_row(i1: u32, i2: u32, i3: u32) -> u32 {{ return {x}_off() + i1 * {x}_nb(1u) + i2 * {x}_nb(2u) + i3 * {x}_nb(3u); }}
"#,
            b = slot + 1
        );
        self
    }

    /// Declares the status word in tensor slot `slot`.
    pub fn status(mut self, slot: usize) -> Shader {
        self.src += &STATUS.replace("{binding}", &(slot + 1).to_string());
        self
    }

    pub fn code(mut self, code: &str) -> Shader {
        self.src += code;
        self
    }

    pub fn finish(self) -> String {
        self.src
    }
}

/// A compute entry point with `wg` threads running `body`. The body sees
/// `gi` (the linear workgroup index), `lid` (the local index) and `idx`
/// (the global linear index, gi * wg + lid).
pub(crate) fn entry(wg: u32, body: &str) -> String {
    format!(
        r#"
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let gi = group_index(wid, nwg);
    let idx = gi * {wg}u + lid;
{body}
}}
"#
    )
}

/// Code that splits a linear index `k` of a shape `ne` (given as an
/// accessor prefix, e.g. `D`) into `i0..i3` named with `prefix`.
pub(crate) fn unravel(k: &str, x: &str, prefix: &str) -> String {
    format!(
        r#"    let {prefix}0 = {k} % {x}_ne(0u);
    let {prefix}r1 = {k} / {x}_ne(0u);
    let {prefix}1 = {prefix}r1 % {x}_ne(1u);
    let {prefix}r2 = {prefix}r1 / {x}_ne(1u);
    let {prefix}2 = {prefix}r2 % {x}_ne(2u);
    let {prefix}3 = {prefix}r2 / {x}_ne(2u);
"#
    )
}
