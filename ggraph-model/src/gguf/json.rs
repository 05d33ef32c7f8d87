//! A GGUF header as JSON, so that a header can be stored, edited and
//! estimated without any GGUF at hand.
//!
//! ```json
//! {"version": 3,
//!  "kv": {"general.architecture": "llama",
//!         "llama.block_count": 32,
//!         "llama.rope.freq_base": 500000.0,
//!         "llama.attention.head_count": [32, 32],
//!         "tokenizer.ggml.tokens": {"type": "array[string]", "size": 128256},
//!         "general.file_type": {"type": "uint64", "value": 15}},
//!  "tensors": [{"name": "blk.0.attn_q.weight", "type": "Q4_K", "shape": [4096, 4096]}]}
//! ```
//!
//! Values:
//! - a JSON integer is a `uint32`, a JSON float (written with a decimal
//!   point or exponent) a `float32`, a string a `string`, `true`/`false` a
//!   `bool`;
//! - a list of integers is an `array[int32]`; a list of numbers with at
//!   least one float an `array[float32]`; a list of strings an
//!   `array[string]`; a list of bools an `array[bool]`; `[]` an empty
//!   `array[int32]`;
//! - any other type is explicit: `{"type": T, "value": v}` for a scalar,
//!   `{"type": "array[T]", "values": [...]}` for an array with values and
//!   `{"type": "array[T]", "size": N}` for an array known only by its
//!   length. Type names: `uint8 int8 uint16 int16 uint32 int32 uint64 int64
//!   float32 float64 bool string`. Non-finite floats are the strings
//!   `"nan"`, `"inf"`, `"-inf"` in the explicit form.
//!
//! Tensors: `name`, `type` (ggml's name, any ggml type, case-insensitive),
//! `shape` in ggml order (`shape[0]` is the row length) and an optional
//! `offset` into the data section. Without offsets, tensors are packed in
//! order at the alignment, as ggml writes them; the writer includes offsets
//! only when a header's are not packed that way. `version` is optional
//! (default 3).
//!
//! Writing chooses the shortest form that reads back as the same value,
//! and writes arrays longer than [`JsonOptions::max_array_values`] by
//! length only (`{"type": ..., "size": N}`).

use serde_json::{Map, Number, Value as Json, json};

use super::header::{GgufHeader, TensorInfo};
use super::types::GgmlType;
use super::value::{Array, ArrayValues, Value, ValueType};
use ggraph_core::error::{Error, Result};

/// How a header is written as JSON.
#[derive(Clone, Debug)]
pub struct JsonOptions {
    /// Arrays with more elements are written by length only; `None`
    /// writes every value.
    pub max_array_values: Option<u64>,
}

impl Default for JsonOptions {
    /// Arrays up to 1024 values (per-layer hyperparameters) are written in
    /// full; vocabularies and merges by length only.
    fn default() -> Self {
        JsonOptions {
            max_array_values: Some(1024),
        }
    }
}

fn num_f32(x: f32) -> Json {
    // The shortest decimal that reads back as this f32, as an f64.
    match format!("{x}")
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
    {
        Some(n) => Json::Number(n),
        None => Json::Null,
    }
}

fn float_json(x: f64) -> Json {
    if x.is_nan() {
        json!("nan")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        Number::from_f64(x).map_or(Json::Null, Json::Number)
    }
}

fn f32_json(x: f32) -> Json {
    if x.is_finite() {
        num_f32(x)
    } else {
        float_json(x.into())
    }
}

fn explicit(t: &str, v: Json) -> Json {
    json!({"type": t, "value": v})
}

fn scalar_json(v: &Value) -> Json {
    match v {
        Value::U32(x) => json!(x),
        Value::F32(x) if x.is_finite() => num_f32(*x),
        Value::F32(x) => explicit("float32", f32_json(*x)),
        Value::String(s) => json!(s),
        Value::Bool(b) => json!(b),
        Value::U8(x) => explicit("uint8", json!(x)),
        Value::I8(x) => explicit("int8", json!(x)),
        Value::U16(x) => explicit("uint16", json!(x)),
        Value::I16(x) => explicit("int16", json!(x)),
        Value::I32(x) => explicit("int32", json!(x)),
        Value::U64(x) => explicit("uint64", json!(x)),
        Value::I64(x) => explicit("int64", json!(x)),
        Value::F64(x) => explicit("float64", float_json(*x)),
        Value::Array(_) => Json::Null,
    }
}

fn array_values_json(a: &ArrayValues) -> Vec<Json> {
    match a {
        ArrayValues::U8(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::I8(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::U16(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::I16(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::U32(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::I32(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::F32(v) => v.iter().map(|&x| f32_json(x)).collect(),
        ArrayValues::Bool(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::String(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::U64(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::I64(v) => v.iter().map(|x| json!(x)).collect(),
        ArrayValues::F64(v) => v.iter().map(|&x| float_json(x)).collect(),
    }
}

fn array_json(a: &Array, opts: &JsonOptions) -> Json {
    let by_size = || json!({"type": a.type_name(), "size": a.len()});
    let Some(values) = a.values() else {
        return by_size();
    };
    if opts.max_array_values.is_some_and(|m| a.len() > m) {
        return by_size();
    }
    let items = array_values_json(values);
    // A plain list reads back as the same array for these types, except
    // that an empty list reads as array[int32] and a float list needs every
    // value finite.
    let plain = match values {
        ArrayValues::I32(_) => true,
        ArrayValues::String(_) | ArrayValues::Bool(_) => !items.is_empty(),
        ArrayValues::F32(v) => !v.is_empty() && v.iter().all(|x| x.is_finite()),
        _ => false,
    };
    if plain {
        Json::Array(items)
    } else {
        json!({"type": a.type_name(), "values": items})
    }
}

/// `h`'s JSON form (see the module docs).
pub fn header_to_json(h: &GgufHeader, opts: &JsonOptions) -> Json {
    let mut kv = Map::new();
    for (k, v) in h.kv() {
        let j = match v {
            Value::Array(a) => array_json(a, opts),
            v => scalar_json(v),
        };
        kv.insert(k.clone(), j);
    }
    let specs: Vec<(String, GgmlType, Vec<u64>)> = h
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.ggml_type, t.shape.clone()))
        .collect();
    let packed = GgufHeader::packed_offsets(&specs, h.alignment()).ok();
    let with_offsets =
        packed.is_none_or(|p| p.iter().zip(h.tensors()).any(|(&o, t)| o != t.offset));
    let tensors: Vec<Json> = h
        .tensors()
        .iter()
        .map(|t| {
            let mut o = json!({"name": t.name, "type": t.ggml_type.name(), "shape": t.shape});
            if with_offsets {
                o["offset"] = json!(t.offset);
            }
            o
        })
        .collect();
    json!({"version": h.version(), "kv": Json::Object(kv), "tensors": tensors})
}

fn explain(key: &str, msg: impl std::fmt::Display) -> String {
    format!("kv '{key}': {msg}")
}

fn int_in<T: TryFrom<i128>>(key: &str, j: &Json, t: ValueType) -> Result<T, String> {
    let i: Option<i128> = j
        .as_u64()
        .map(i128::from)
        .or_else(|| j.as_i64().map(i128::from));
    let i = i.ok_or_else(|| explain(key, format!("{j} is not an integer (type {t})")))?;
    T::try_from(i).map_err(|_| explain(key, format!("{i} is out of range for {t}")))
}

fn float_of(key: &str, j: &Json) -> Result<f64, String> {
    match j {
        Json::Number(n) => n
            .as_f64()
            .ok_or_else(|| explain(key, format!("{n} is not a number"))),
        Json::String(s) => match s.as_str() {
            "nan" | "NaN" => Ok(f64::NAN),
            "inf" | "+inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            _ => Err(explain(
                key,
                format!("'{s}' is not a float (use a number, \"nan\", \"inf\" or \"-inf\")"),
            )),
        },
        _ => Err(explain(key, format!("{j} is not a float"))),
    }
}

fn to_f32(key: &str, x: f64) -> Result<f32, String> {
    let f = x as f32;
    if x.is_finite() && !f.is_finite() {
        return Err(explain(
            key,
            format!(
                "{x} is beyond float32's range; write {{\"type\": \"float64\", \"value\": {x}}}"
            ),
        ));
    }
    Ok(f)
}

fn typed_scalar(key: &str, t: ValueType, j: &Json) -> Result<Value, String> {
    Ok(match t {
        ValueType::U8 => Value::U8(int_in(key, j, t)?),
        ValueType::I8 => Value::I8(int_in(key, j, t)?),
        ValueType::U16 => Value::U16(int_in(key, j, t)?),
        ValueType::I16 => Value::I16(int_in(key, j, t)?),
        ValueType::U32 => Value::U32(int_in(key, j, t)?),
        ValueType::I32 => Value::I32(int_in(key, j, t)?),
        ValueType::U64 => Value::U64(int_in(key, j, t)?),
        ValueType::I64 => Value::I64(int_in(key, j, t)?),
        ValueType::F32 => Value::F32(to_f32(key, float_of(key, j)?)?),
        ValueType::F64 => Value::F64(float_of(key, j)?),
        ValueType::Bool => Value::Bool(
            j.as_bool()
                .ok_or_else(|| explain(key, format!("{j} is not a bool")))?,
        ),
        ValueType::String => Value::String(
            j.as_str()
                .ok_or_else(|| explain(key, format!("{j} is not a string")))?
                .to_string(),
        ),
        ValueType::Array => return Err(explain(key, "use \"array[T]\" for arrays")),
    })
}

fn typed_array(key: &str, t: ValueType, items: &[Json]) -> Result<ArrayValues, String> {
    fn all<T>(items: &[Json], f: impl Fn(&Json) -> Result<T, String>) -> Result<Vec<T>, String> {
        items.iter().map(f).collect()
    }
    Ok(match t {
        ValueType::U8 => ArrayValues::U8(all(items, |j| int_in(key, j, t))?),
        ValueType::I8 => ArrayValues::I8(all(items, |j| int_in(key, j, t))?),
        ValueType::U16 => ArrayValues::U16(all(items, |j| int_in(key, j, t))?),
        ValueType::I16 => ArrayValues::I16(all(items, |j| int_in(key, j, t))?),
        ValueType::U32 => ArrayValues::U32(all(items, |j| int_in(key, j, t))?),
        ValueType::I32 => ArrayValues::I32(all(items, |j| int_in(key, j, t))?),
        ValueType::U64 => ArrayValues::U64(all(items, |j| int_in(key, j, t))?),
        ValueType::I64 => ArrayValues::I64(all(items, |j| int_in(key, j, t))?),
        ValueType::F32 => ArrayValues::F32(all(items, |j| to_f32(key, float_of(key, j)?))?),
        ValueType::F64 => ArrayValues::F64(all(items, |j| float_of(key, j))?),
        ValueType::Bool => ArrayValues::Bool(all(items, |j| {
            j.as_bool()
                .ok_or_else(|| explain(key, format!("{j} is not a bool")))
        })?),
        ValueType::String => ArrayValues::String(all(items, |j| {
            j.as_str()
                .map(str::to_string)
                .ok_or_else(|| explain(key, format!("{j} is not a string")))
        })?),
        ValueType::Array => {
            return Err(explain(key, "arrays of arrays are not supported"));
        }
    })
}

/// A value type name from JSON: a scalar name or `array[T]`.
fn parse_type(key: &str, name: &str) -> Result<(bool, ValueType), String> {
    let names = "uint8, int8, uint16, int16, uint32, int32, uint64, int64, float32, float64, bool, string, or array[T] of those";
    let (is_array, inner) = match name
        .strip_prefix("array[")
        .and_then(|s| s.strip_suffix(']'))
    {
        Some(inner) => (true, inner),
        None => (false, name),
    };
    match ValueType::from_name(inner) {
        Some(t) if t != ValueType::Array => Ok((is_array, t)),
        _ => Err(explain(key, format!("unknown type '{name}' (use {names})"))),
    }
}

fn plain_list(key: &str, items: &[Json]) -> Result<ArrayValues, String> {
    if items.is_empty() || items.iter().all(|j| j.is_u64() || j.is_i64()) {
        return typed_array(key, ValueType::I32, items).map_err(|e| {
            format!("{e} (a list of integers is an array[int32]; use {{\"type\": \"array[uint64]\", \"values\": [...]}} for others)")
        });
    }
    if items.iter().all(Json::is_number) {
        return typed_array(key, ValueType::F32, items);
    }
    if items.iter().all(Json::is_string) {
        return typed_array(key, ValueType::String, items);
    }
    if items.iter().all(Json::is_boolean) {
        return typed_array(key, ValueType::Bool, items);
    }
    Err(explain(
        key,
        "a list must hold only integers, only numbers, only strings or only bools; use {\"type\": \"array[T]\", \"values\": [...]}",
    ))
}

fn value_from_json(key: &str, j: &Json) -> Result<Value, String> {
    match j {
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                u32::try_from(u).map(Value::U32).map_err(|_| {
                    explain(key, format!("{u} does not fit uint32 (a plain integer); write {{\"type\": \"uint64\", \"value\": {u}}}"))
                })
            } else if let Some(i) = n.as_i64() {
                Err(explain(
                    key,
                    format!(
                        "{i} is negative; plain integers are uint32, write {{\"type\": \"int32\", \"value\": {i}}}"
                    ),
                ))
            } else {
                Ok(Value::F32(to_f32(key, float_of(key, j)?)?))
            }
        }
        Json::String(s) => Ok(Value::String(s.clone())),
        Json::Bool(b) => Ok(Value::Bool(*b)),
        Json::Array(items) => Ok(Value::from(plain_list(key, items)?)),
        Json::Object(o) => {
            for k in o.keys() {
                if !["type", "value", "values", "size"].contains(&k.as_str()) {
                    return Err(explain(
                        key,
                        format!(
                            "unknown member '{k}' (an explicit value has \"type\" and one of \"value\", \"values\", \"size\")"
                        ),
                    ));
                }
            }
            let tname = o
                .get("type")
                .and_then(Json::as_str)
                .ok_or_else(|| explain(key, "an explicit value needs a \"type\" string"))?;
            let (is_array, t) = parse_type(key, tname)?;
            let given = ["value", "values", "size"]
                .iter()
                .filter(|m| o.contains_key(**m))
                .count();
            if given != 1 {
                return Err(explain(
                    key,
                    "give exactly one of \"value\", \"values\", \"size\"",
                ));
            }
            match (is_array, o.get("value"), o.get("values"), o.get("size")) {
                (false, Some(v), _, _) => typed_scalar(key, t, v),
                (true, _, Some(Json::Array(items)), _) => {
                    Ok(Value::from(typed_array(key, t, items)?))
                }
                (true, _, _, Some(n)) => {
                    let len = n.as_u64().ok_or_else(|| {
                        explain(key, format!("\"size\" {n} is not a non-negative integer"))
                    })?;
                    Ok(Value::Array(
                        Array::of_len(t, len).ok_or_else(|| explain(key, "bad array type"))?,
                    ))
                }
                (true, _, Some(_), _) => Err(explain(key, "\"values\" must be a list")),
                (true, _, _, _) => Err(explain(
                    key,
                    format!("type {tname} is an array: give \"values\" or \"size\""),
                )),
                (false, _, _, _) => Err(explain(
                    key,
                    format!("type {tname} is a scalar: give \"value\""),
                )),
            }
        }
        Json::Null => Err(explain(key, "null is not a GGUF value")),
    }
}

fn tensor_from_json(
    i: usize,
    j: &Json,
) -> Result<(String, GgmlType, Vec<u64>, Option<u64>), String> {
    let o = j
        .as_object()
        .ok_or_else(|| format!("tensors[{i}] is not an object"))?;
    for k in o.keys() {
        if !["name", "type", "shape", "offset"].contains(&k.as_str()) {
            return Err(format!(
                "tensors[{i}]: unknown member '{k}' (a tensor has name, type, shape and optionally offset)"
            ));
        }
    }
    let name = o
        .get("name")
        .and_then(Json::as_str)
        .ok_or_else(|| format!("tensors[{i}] needs a \"name\" string"))?
        .to_string();
    let tname = o
        .get("type")
        .and_then(Json::as_str)
        .ok_or_else(|| format!("tensor '{name}' needs a \"type\" string (F32, F16, Q4_K, ...)"))?;
    let t = GgmlType::from_name(tname).ok_or_else(|| {
        let known: Vec<&str> = GgmlType::all().map(GgmlType::name).collect();
        format!(
            "tensor '{name}': unknown ggml type '{tname}' (known: {})",
            known.join(", ")
        )
    })?;
    let shape = o
        .get("shape")
        .and_then(Json::as_array)
        .ok_or_else(|| format!("tensor '{name}' needs a \"shape\" list"))?
        .iter()
        .map(|d| {
            d.as_u64().ok_or_else(|| {
                format!("tensor '{name}': dimension {d} is not a non-negative integer")
            })
        })
        .collect::<Result<Vec<u64>, String>>()?;
    let offset =
        match o.get("offset") {
            None => None,
            Some(d) => Some(d.as_u64().ok_or_else(|| {
                format!("tensor '{name}': offset {d} is not a non-negative integer")
            })?),
        };
    Ok((name, t, shape, offset))
}

fn header_from_json_inner(j: &Json) -> Result<GgufHeader, String> {
    let o = j
        .as_object()
        .ok_or("a header is a JSON object with \"kv\" and \"tensors\"")?;
    for k in o.keys() {
        if !["version", "kv", "tensors"].contains(&k.as_str()) {
            return Err(format!(
                "unknown member '{k}' (a header has version, kv and tensors)"
            ));
        }
    }
    let version = match o.get("version") {
        None => 3,
        Some(v) => v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("version {v} is not an integer"))?,
    };
    let mut kv = Vec::new();
    match o.get("kv") {
        None => {}
        Some(Json::Object(m)) => {
            for (k, v) in m {
                kv.push((k.clone(), value_from_json(k, v)?));
            }
        }
        Some(_) => return Err("\"kv\" must be an object of key: value".into()),
    }
    let specs = match o.get("tensors") {
        None => Vec::new(),
        Some(Json::Array(ts)) => ts
            .iter()
            .enumerate()
            .map(|(i, t)| tensor_from_json(i, t))
            .collect::<Result<Vec<_>, String>>()?,
        Some(_) => return Err("\"tensors\" must be a list".into()),
    };
    // The alignment comes from the pairs; check them first.
    let align = GgufHeader::new(version, kv.clone(), Vec::new())?.alignment();
    let offsets = if specs.iter().all(|s| s.3.is_none()) {
        let plain: Vec<(String, GgmlType, Vec<u64>)> = specs
            .iter()
            .map(|s| (s.0.clone(), s.1, s.2.clone()))
            .collect();
        GgufHeader::packed_offsets(&plain, align)?
    } else if specs.iter().all(|s| s.3.is_some()) {
        specs.iter().map(|s| s.3.unwrap_or(0)).collect()
    } else {
        return Err(
            "give an offset for every tensor or for none (then they are packed in order)".into(),
        );
    };
    let tensors = specs
        .into_iter()
        .zip(offsets)
        .map(|((name, t, shape, _), off)| TensorInfo::new(name, t, shape, off))
        .collect::<Result<Vec<_>, String>>()?;
    GgufHeader::new(version, kv, tensors)
}

/// Reads a header from its JSON form. `file` names the source in errors.
pub fn header_from_json(j: &Json, file: &str) -> Result<GgufHeader> {
    header_from_json_inner(j).map_err(|msg| Error::Format {
        file: file.to_string(),
        msg,
    })
}

/// Reads a header from JSON text.
pub fn header_from_json_str(text: &str, file: &str) -> Result<GgufHeader> {
    let j: Json = serde_json::from_str(text).map_err(|e| Error::Format {
        file: file.to_string(),
        msg: format!("not valid JSON: {e}"),
    })?;
    header_from_json(&j, file)
}

impl GgufHeader {
    /// This header as JSON (see [`crate::gguf::json`]).
    pub fn to_json(&self, opts: &JsonOptions) -> Json {
        header_to_json(self, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<GgufHeader> {
        header_from_json_str(text, "test.json")
    }

    #[test]
    fn the_issue_example_reads_with_the_documented_types() {
        let h = read(
            r#"{"kv": {"general.architecture": "llama", "llama.block_count": 32,
            "llama.rope.freq_base": 500000.0, "llama.attention.head_count": [32, 32],
            "tokenizer.ggml.tokens": {"type": "array[string]", "size": 128256}},
            "tensors": [{"name": "blk.0.attn_q.weight", "type": "Q4_K", "shape": [4096, 4096]}]}"#,
        )
        .unwrap();
        assert_eq!(h.version(), 3);
        assert_eq!(h.get("llama.block_count"), Some(&Value::U32(32)));
        assert_eq!(h.get("llama.rope.freq_base"), Some(&Value::F32(500000.0)));
        assert_eq!(
            h.get("llama.attention.head_count"),
            Some(&Value::from(ArrayValues::I32(vec![32, 32])))
        );
        let tokens = h.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
        assert_eq!(
            (tokens.elem_type(), tokens.len()),
            (ValueType::String, 128256)
        );
        assert!(tokens.values().is_none());
        let t = h.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!(
            (t.ggml_type.name(), t.size_bytes),
            ("Q4_K", 4096 * 16 * 144)
        );
    }

    #[test]
    fn every_value_type_survives_a_json_round_trip() {
        let kv: Vec<(String, Value)> = vec![
            ("u8".into(), Value::U8(200)),
            ("i8".into(), Value::I8(-5)),
            ("u16".into(), Value::U16(60000)),
            ("i16".into(), Value::I16(-300)),
            ("u32".into(), Value::U32(4_000_000_000)),
            ("i32".into(), Value::I32(-7)),
            ("f32".into(), Value::F32(1e-5)),
            ("f32.whole".into(), Value::F32(3.0)),
            ("f32.nan".into(), Value::F32(f32::NEG_INFINITY)),
            ("bool".into(), Value::Bool(true)),
            ("str".into(), Value::from("héllo \"q\"")),
            ("u64".into(), Value::U64(u64::MAX)),
            ("i64".into(), Value::I64(i64::MIN)),
            ("f64".into(), Value::F64(0.1)),
            ("a.i32".into(), ArrayValues::I32(vec![1, -2]).into()),
            ("a.i32.empty".into(), ArrayValues::I32(vec![]).into()),
            ("a.str.empty".into(), ArrayValues::String(vec![]).into()),
            ("a.f32".into(), ArrayValues::F32(vec![1.0, 0.5]).into()),
            (
                "a.f32.nan".into(),
                ArrayValues::F32(vec![f32::INFINITY]).into(),
            ),
            ("a.u8".into(), ArrayValues::U8(vec![1, 2]).into()),
            ("a.bool".into(), ArrayValues::Bool(vec![true, false]).into()),
            (
                "a.str".into(),
                ArrayValues::String(vec!["a".into(), "".into()]).into(),
            ),
            ("a.u64".into(), ArrayValues::U64(vec![u64::MAX]).into()),
            ("a.f64".into(), ArrayValues::F64(vec![2.5]).into()),
            (
                "a.len".into(),
                Value::Array(Array::of_len(ValueType::I16, 9).unwrap()),
            ),
        ];
        let h = GgufHeader::new(3, kv, vec![]).unwrap();
        let text = h
            .to_json(&JsonOptions {
                max_array_values: None,
            })
            .to_string();
        let back = read(&text).unwrap();
        assert_eq!(back, h, "{text}");
    }

    #[test]
    fn plain_forms_are_used_where_they_read_back_the_same() {
        let h = read(r#"{"kv": {"a": 7, "b": 0.5, "c": [1, 2], "d": ["x"], "e": true}}"#).unwrap();
        let j = h.to_json(&JsonOptions::default());
        assert_eq!(
            j["kv"],
            json!({"a": 7, "b": 0.5, "c": [1, 2], "d": ["x"], "e": true})
        );
    }

    #[test]
    fn long_arrays_are_written_by_length() {
        let tokens: Vec<String> = (0..2000).map(|i| format!("t{i}")).collect();
        let h = GgufHeader::new(
            3,
            vec![(
                "tokenizer.ggml.tokens".into(),
                ArrayValues::String(tokens).into(),
            )],
            vec![],
        )
        .unwrap();
        let j = h.to_json(&JsonOptions::default());
        assert_eq!(
            j["kv"]["tokenizer.ggml.tokens"],
            json!({"type": "array[string]", "size": 2000})
        );
    }

    #[test]
    fn tensors_are_packed_unless_offsets_are_given() {
        let h = read(
            r#"{"kv": {"general.alignment": 64}, "tensors": [
            {"name": "a", "type": "F32", "shape": [3]},
            {"name": "b", "type": "q5_k", "shape": [256, 2]}]}"#,
        )
        .unwrap();
        assert_eq!(h.tensor("b").unwrap().offset, 64);
        assert_eq!(h.tensor("b").unwrap().size_bytes, 2 * 176);
        assert!(
            h.to_json(&JsonOptions::default())["tensors"][1]
                .get("offset")
                .is_none()
        );
        let h = read(
            r#"{"tensors": [{"name": "a", "type": "F32", "shape": [3], "offset": 32},
            {"name": "b", "type": "F32", "shape": [3], "offset": 0}]}"#,
        )
        .unwrap();
        assert_eq!(
            h.to_json(&JsonOptions::default())["tensors"][0]["offset"],
            json!(32)
        );
    }

    #[test]
    fn mistakes_are_explained() {
        let cases = [
            (r#"{"kv": {"x": -1}}"#, "int32"),
            (r#"{"kv": {"x": 5000000000}}"#, "uint64"),
            (r#"{"kv": {"x": [1, "a"]}}"#, "only integers"),
            (
                r#"{"kv": {"x": {"type": "uint9", "value": 1}}}"#,
                "unknown type",
            ),
            (
                r#"{"kv": {"x": {"type": "uint8", "value": 300}}}"#,
                "out of range",
            ),
            (
                r#"{"kv": {"x": {"type": "array[int8]", "value": 3}}}"#,
                "is an array",
            ),
            (r#"{"kv": {"x": null}}"#, "null"),
            (
                r#"{"tensors": [{"name": "a", "type": "Q9_X", "shape": [1]}]}"#,
                "unknown ggml type",
            ),
            (
                r#"{"tensors": [{"name": "a", "type": "Q4_0", "shape": [33]}]}"#,
                "block size",
            ),
            (r#"{"tensor": []}"#, "unknown member"),
            ("{", "not valid JSON"),
        ];
        for (text, want) in cases {
            let e = read(text).unwrap_err().to_string();
            assert!(
                e.contains(want) && e.starts_with("test.json"),
                "{text}: {e}"
            );
        }
    }
}
