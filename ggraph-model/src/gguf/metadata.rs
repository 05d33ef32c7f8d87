//! Typed access to GGUF metadata: the architecture, hyperparameters with
//! their `{arch}.` prefix and per-layer arrays.
//!
//! Getters are lenient about integer widths (a `uint64` block count reads
//! as a `u32` when it fits) and strict about kinds (an integer is not a
//! float). Ollama's own getters are stricter; the estimate in
//! [`crate::ollama`] reproduces those separately.

use super::header::GgufHeader;
use super::value::{Array, ArrayValues, Value, ValueType};
use ggraph_core::error::{Error, Result};

pub(crate) fn meta_error(msg: impl Into<String>) -> Error {
    Error::Format {
        file: "GGUF metadata".into(),
        msg: msg.into(),
    }
}

fn to_u32(key: &str, v: i128) -> Result<u32> {
    u32::try_from(v).map_err(|_| meta_error(format!("'{key}' is {v}, outside 0..=4294967295")))
}

impl GgufHeader {
    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| meta_error(format!("key '{key}' is missing")))
    }

    fn wrong_type(key: &str, v: &Value, expected: &str) -> Error {
        meta_error(format!(
            "'{key}' has type {}, expected {expected}",
            v.type_name()
        ))
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        let key = "general.architecture";
        let v = self.require(key)?;
        v.as_str()
            .ok_or_else(|| GgufHeader::wrong_type(key, v, "string"))
    }

    /// `{arch}.{name}`: the key of an architecture hyperparameter.
    pub fn arch_key(&self, name: &str) -> Result<String> {
        Ok(format!("{}.{name}", self.architecture()?))
    }

    /// An integer value that fits `u64`, `None` if absent.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let i = v
            .as_integer()
            .ok_or_else(|| GgufHeader::wrong_type(key, v, "an integer"))?;
        u64::try_from(i)
            .map(Some)
            .map_err(|_| meta_error(format!("'{key}' is {i}, expected a non-negative integer")))
    }

    /// An integer value that fits `u32`, `None` if absent.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        self.opt_u64(key)?
            .map(|v| to_u32(key, v.into()))
            .transpose()
    }

    /// An integer value that fits `u32`; an error when the key is missing,
    /// not an integer, or out of range.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.opt_u32(key)?
            .ok_or_else(|| meta_error(format!("key '{key}' is missing")))
    }

    /// An integer value that fits `u64`; an error when the key is missing,
    /// not an integer, or negative.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.opt_u64(key)?
            .ok_or_else(|| meta_error(format!("key '{key}' is missing")))
    }

    /// A float32 or float64 value as `f32`, `None` if absent.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.as_float() {
            Some(f) => Ok(Some(f as f32)),
            None if v.as_integer().is_some() => Err(meta_error(format!(
                "'{key}' is an integer ({}), expected a float (in header JSON, write it with a decimal point)",
                v.type_name()
            ))),
            None => Err(GgufHeader::wrong_type(key, v, "float32")),
        }
    }

    /// A float32 or float64 value as `f32`; an error when the key is
    /// missing or not a float (an integer is not one).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.opt_f32(key)?
            .ok_or_else(|| meta_error(format!("key '{key}' is missing")))
    }

    /// A string value, `None` if absent; an error for another type.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| GgufHeader::wrong_type(key, v, "string")),
        }
    }

    /// A bool value, `None` if absent; an error for another type (an
    /// integer 0 or 1 included).
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(GgufHeader::wrong_type(key, v, "bool")),
        }
    }

    /// An array value of any element type, `None` if absent; an error for
    /// a scalar or string. Its values may be unknown (header JSON).
    pub fn opt_array(&self, key: &str) -> Result<Option<&Array>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(Some)
                .ok_or_else(|| GgufHeader::wrong_type(key, v, "an array")),
        }
    }

    /// Architecture hyperparameter `{arch}.{name}` as `u32`.
    pub fn hparam_u32(&self, name: &str) -> Result<u32> {
        self.get_u32(&self.arch_key(name)?)
    }

    /// The same, `None` if absent.
    pub fn opt_hparam_u32(&self, name: &str) -> Result<Option<u32>> {
        self.opt_u32(&self.arch_key(name)?)
    }

    /// Architecture hyperparameter `{arch}.{name}` as `f32` (a float32 or
    /// float64 value).
    pub fn hparam_f32(&self, name: &str) -> Result<f32> {
        self.get_f32(&self.arch_key(name)?)
    }

    /// The same, `None` if absent.
    pub fn opt_hparam_f32(&self, name: &str) -> Result<Option<f32>> {
        self.opt_f32(&self.arch_key(name)?)
    }

    /// A per-layer hyperparameter `{arch}.{name}`: a scalar applies to
    /// every layer, an integer array gives one value per layer and must
    /// have `n_layer` of them (as llama.cpp requires). `None` if absent.
    pub fn opt_layer_u32s(&self, name: &str, n_layer: usize) -> Result<Option<Vec<u32>>> {
        let key = self.arch_key(name)?;
        let Some(v) = self.get(&key) else {
            return Ok(None);
        };
        if let Some(i) = v.as_integer() {
            return Ok(Some(vec![to_u32(&key, i)?; n_layer]));
        }
        let a = v
            .as_array()
            .ok_or_else(|| GgufHeader::wrong_type(&key, v, "an integer or an integer array"))?;
        let vals = a
            .values()
            .ok_or_else(|| {
                meta_error(format!(
                    "'{key}' is known only by its length; its values are needed"
                ))
            })?
            .integers()
            .ok_or_else(|| GgufHeader::wrong_type(&key, v, "an integer array"))?;
        if vals.len() != n_layer {
            return Err(meta_error(format!(
                "'{key}' has {} values, expected one per layer ({n_layer})",
                vals.len()
            )));
        }
        vals.into_iter()
            .map(|x| to_u32(&key, x))
            .collect::<Result<Vec<u32>>>()
            .map(Some)
    }

    /// The same, with an error when the key is absent.
    pub fn layer_u32s(&self, name: &str, n_layer: usize) -> Result<Vec<u32>> {
        self.opt_layer_u32s(name, n_layer)?.ok_or_else(|| {
            meta_error(format!(
                "key '{}.{name}' is missing",
                self.architecture().unwrap_or("?")
            ))
        })
    }

    /// Vocabulary size: `{arch}.vocab_size`, else the length of
    /// `tokenizer.ggml.tokens`.
    pub fn vocab_size(&self) -> Result<u64> {
        if let Some(n) = self.opt_u64(&self.arch_key("vocab_size")?)? {
            return Ok(n);
        }
        match self.opt_array("tokenizer.ggml.tokens")? {
            Some(a) if a.elem_type() == ValueType::String => Ok(a.len()),
            Some(a) => Err(meta_error(format!(
                "'tokenizer.ggml.tokens' has type {}, expected array[string]",
                a.type_name()
            ))),
            None => Err(meta_error(
                "no vocabulary size: neither '{arch}.vocab_size' nor 'tokenizer.ggml.tokens' is present",
            )),
        }
    }

    /// The tokens, when the header holds their values.
    pub fn tokens(&self) -> Option<&[String]> {
        match self.opt_array("tokenizer.ggml.tokens").ok()??.values()? {
            ArrayValues::String(v) => Some(v),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A header of these key-value pairs and no tensors.
    pub(crate) fn header(kv: Vec<(&str, Value)>) -> GgufHeader {
        GgufHeader::new(
            3,
            kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            vec![],
        )
        .unwrap()
    }

    /// The metadata of a small llama model.
    pub(crate) fn llama_kv() -> Vec<(&'static str, Value)> {
        vec![
            ("general.architecture", "llama".into()),
            ("llama.block_count", Value::U32(2)),
            ("llama.embedding_length", Value::U64(64)),
            (
                "llama.attention.head_count",
                ArrayValues::I32(vec![4, 4]).into(),
            ),
            ("llama.attention.head_count_kv", Value::U32(2)),
            ("llama.feed_forward_length", Value::U32(128)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
            ("llama.rope.freq_base", Value::F32(500000.0)),
            ("llama.vocab_size", Value::U32(100)),
        ]
    }

    #[test]
    fn hyperparameters_read_with_the_architecture_prefix() {
        let h = header(llama_kv());
        assert_eq!(h.architecture().unwrap(), "llama");
        assert_eq!(h.hparam_u32("block_count").unwrap(), 2);
        assert_eq!(h.hparam_u32("embedding_length").unwrap(), 64);
        assert_eq!(h.layer_u32s("attention.head_count", 2).unwrap(), vec![4, 4]);
        assert_eq!(
            h.layer_u32s("attention.head_count_kv", 2).unwrap(),
            vec![2, 2]
        );
        assert!(h.layer_u32s("attention.head_count", 3).is_err());
        assert_eq!(h.opt_hparam_f32("rope.freq_base").unwrap(), Some(500000.0));
        assert_eq!(h.opt_hparam_u32("expert_count").unwrap(), None);
    }

    #[test]
    fn type_mismatches_say_what_was_found() {
        let h = header(vec![
            ("general.architecture", "llama".into()),
            ("llama.rope.freq_base", Value::U32(10000)),
            ("llama.block_count", Value::I32(-1)),
        ]);
        let e = h.hparam_f32("rope.freq_base").unwrap_err().to_string();
        assert!(e.contains("decimal point"), "{e}");
        let e = h.hparam_u32("block_count").unwrap_err().to_string();
        assert!(e.contains("-1"), "{e}");
        let e = h.hparam_u32("embedding_length").unwrap_err().to_string();
        assert!(
            e.contains("llama.embedding_length") && e.contains("missing"),
            "{e}"
        );
    }
}
