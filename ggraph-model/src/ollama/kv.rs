//! Ollama's view of GGUF metadata and tensors, with its quirks.
//!
//! Ollama keeps each value in its GGUF type and its getters match the type
//! exactly (`kv[key].(uint32)`): a block count stored as `uint64` or
//! `int32` reads as missing, and the default is used. Keys that do not
//! start with `general.` or `tokenizer.` get the architecture prefix.
//! Per-layer head counts accept a `uint32`, an `array[uint32]` or an
//! `array[int32]` (negative values wrap). Tensor and layer sizes use
//! Ollama's own table of ggml types, which has no sizes for TQ1_0, TQ2_0,
//! NVFP4 and Q1_0 (they count 0 bytes) and treats the removed id 4 as
//! MXFP4. Arithmetic is on `u64` and wraps, as in Go.
//!
//! Where Ollama would panic (an empty head-count array given to
//! `slices.Max`, a missing `tokenizer.ggml.tokens` under a type assertion,
//! an index past a shape), these functions return an error that says so.

use std::collections::HashMap;

use crate::gguf::{ArrayValues, GgufHeader, TensorInfo, Value, ValueType};
use ggraph_core::error::{Error, Result};

pub(crate) fn ollama_error(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("Ollama estimate: {}", msg.into()))
}

/// Values per block in Ollama's `TensorType.BlockSize` (fs/ggml/ggml.go):
/// 1 for plain types, 32 for the `_0`/`_1` quants, IQ4_NL and MXFP4, and
/// 256 for every other id.
pub fn ollama_block_size(id: u32) -> u64 {
    match id {
        0 | 1 | 24..=28 | 30 => 1,
        2 | 3 | 6..=9 | 20 | 4 | 39 => 32,
        _ => 256,
    }
}

/// Bytes per block in Ollama's `TensorType.TypeSize`; 0 for ids it does
/// not list (TQ1_0, TQ2_0, NVFP4, Q1_0, the removed repacked types).
pub fn ollama_type_size(id: u32) -> u64 {
    let b = ollama_block_size(id);
    match id {
        0 => 4,
        1 => 2,
        2 => 2 + b / 2,
        3 => 2 + 2 + b / 2,
        6 => 2 + 4 + b / 2,
        7 => 2 + 2 + 4 + b / 2,
        8 => 2 + b,
        9 => 2 + 2 + b,
        10 => b / 16 + b / 4 + 2 + 2,
        11 => b / 8 + b / 4 + 12 + 2,
        12 => 2 + 2 + 12 + b / 2,
        13 => 2 + 2 + 12 + b / 8 + b / 2,
        14 => b / 2 + b / 4 + b / 16 + 2,
        15 => 4 + b + 2 * b / 16,
        16 => 2 + 2 * b / 8,
        17 => 2 + 2 * b / 8 + b / 32,
        18 => 2 + b / 4 + b / 8,
        19 => 2 + b / 8 + b / 16,
        20 => 2 + b / 2,
        21 => 2 + b / 4 + b / 8 + b / 32 + 4,
        22 => 2 + b / 4 + b / 16,
        23 => 2 + 2 + b / 2 + b / 64,
        24 => 1,
        25 => 2,
        26 => 4,
        27 | 28 => 8,
        29 => b / 8 + b / 16 + b / 32,
        30 => 2,
        4 | 39 => 1 + b / 2,
        _ => 0,
    }
}

/// Values of a tensor: the product of its shape, wrapping.
pub fn ollama_elements(t: &TensorInfo) -> u64 {
    t.shape.iter().fold(1u64, |a, &n| a.wrapping_mul(n))
}

/// Ollama's `Tensor.Size`: elements * type size / block size, wrapping.
pub fn ollama_tensor_size(t: &TensorInfo) -> u64 {
    let id = t.ggml_type.id();
    ollama_elements(t).wrapping_mul(ollama_type_size(id)) / ollama_block_size(id)
}

/// A layer: tensors by the rest of their name (`attn_q.weight`).
pub type Layer<'a> = HashMap<String, &'a TensorInfo>;

/// Ollama's `Tensors.GroupLayers`: tensors grouped by their first name
/// component, where `blk.N` and `mm.N` (at any position) count as one
/// component: `blk.0.attn_q.weight` is `attn_q.weight` of layer `blk.0`,
/// `v.blk.3.ffn_up.weight` is `ffn_up.weight` of `v.blk.3`,
/// `output_norm.weight` is `weight` of `output_norm`. A later tensor with
/// the same layer and rest replaces an earlier one (a Go map).
pub fn group_layers(tensors: &[TensorInfo]) -> HashMap<String, Layer<'_>> {
    let mut layers: HashMap<String, Layer<'_>> = HashMap::new();
    for t in tensors {
        let mut parts: Vec<String> = t.name.split('.').map(str::to_string).collect();
        if let Some(idx) = parts.iter().position(|s| s == "blk" || s == "mm")
            && parts.len() > idx + 2
        {
            let head = parts[..idx + 2].join(".");
            let mut joined = vec![head];
            joined.extend(parts.drain(idx + 2..));
            parts = joined;
        }
        let rest = parts[1..].join(".");
        layers.entry(parts[0].clone()).or_default().insert(rest, t);
    }
    layers
}

/// Ollama's `Layer.Size`: the sum of its tensors' sizes, wrapping.
pub fn layer_size(l: &Layer<'_>) -> u64 {
    l.values()
        .fold(0u64, |a, t| a.wrapping_add(ollama_tensor_size(t)))
}

/// Layers past this are refused: Ollama would allocate per-layer tables
/// of this length and fit them layer by layer, and no model comes near it
/// (the largest have a few hundred).
const MAX_BLOCKS: u64 = 1 << 16;

/// Ollama's `KV` getters over a header.
pub struct OllamaKv<'a> {
    h: &'a GgufHeader,
    arch: String,
}

impl<'a> OllamaKv<'a> {
    /// Ollama's view of `h`; its architecture is `unknown` when
    /// `general.architecture` is missing or not a string.
    pub fn new(h: &'a GgufHeader) -> OllamaKv<'a> {
        let arch = match h.get("general.architecture") {
            Some(Value::String(s)) => s.clone(),
            _ => "unknown".to_string(),
        };
        OllamaKv { h, arch }
    }

    /// `general.architecture`, or "unknown".
    pub fn architecture(&self) -> &str {
        &self.arch
    }

    fn key(&self, k: &str) -> String {
        if k.starts_with("tokenizer.") || k.starts_with("general.") {
            k.to_string()
        } else {
            format!("{}.{k}", self.arch)
        }
    }

    /// True when the key (prefixed like the getters) is present, whatever
    /// its type.
    pub fn has(&self, k: &str) -> bool {
        self.h.get(&self.key(k)).is_some()
    }

    /// `KV.Uint`: a `uint32` value, else `default`.
    pub fn uint(&self, k: &str, default: u32) -> u32 {
        match self.h.get(&self.key(k)) {
            Some(Value::U32(v)) => *v,
            _ => default,
        }
    }

    /// `KV.UintOrArrayValueAsArray`.
    pub fn uint_or_array(&self, k: &str, default: u32) -> Vec<u32> {
        match self.h.get(&self.key(k)) {
            Some(Value::U32(v)) => vec![*v],
            Some(Value::Array(a)) if a.elem_type() == ValueType::U32 => match a.values() {
                Some(ArrayValues::U32(v)) => v.clone(),
                // An array Ollama did not collect (longer than its
                // maxArraySize) has no values.
                _ => Vec::new(),
            },
            Some(Value::Array(a)) if a.elem_type() == ValueType::I32 => match a.values() {
                Some(ArrayValues::I32(v)) => v.iter().map(|&x| x as u32).collect(),
                _ => Vec::new(),
            },
            _ => vec![default],
        }
    }

    fn min_max(&self, k: &str, default: u32) -> Result<(u64, u64)> {
        let v = self.uint_or_array(k, default);
        match (v.iter().min(), v.iter().max()) {
            (Some(&lo), Some(&hi)) => Ok((lo.into(), hi.into())),
            _ => Err(ollama_error(format!(
                "'{}' is an array without values; Ollama's slices.Min/Max would panic on it",
                self.key(k)
            ))),
        }
    }

    /// `KV.Ints`: the values of an `array[int32]`, else empty.
    pub fn ints(&self, k: &str) -> Vec<i32> {
        match self.h.get(&self.key(k)) {
            Some(Value::Array(a)) => match a.values() {
                Some(ArrayValues::I32(v)) => v.clone(),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// `KV.BlockCount`; more than 65536 layers is refused as not a model.
    pub fn block_count(&self) -> Result<u64> {
        let n = u64::from(self.uint("block_count", 0));
        if n > MAX_BLOCKS {
            return Err(ollama_error(format!(
                "{}.block_count is {n}; more than {MAX_BLOCKS} layers is not a model",
                self.arch
            )));
        }
        Ok(n)
    }

    /// `KV.EmbeddingLength`: `{arch}.embedding_length` if a `uint32`, else 0.
    pub fn embedding_length(&self) -> u64 {
        self.uint("embedding_length", 0).into()
    }

    /// `KV.ContextLength`: `{arch}.context_length` if a `uint32`, else 0.
    pub fn context_length(&self) -> u64 {
        self.uint("context_length", 0).into()
    }

    /// `KV.HeadCount`/`KV.HeadCountKV`: one value per layer; a scalar or a
    /// one-element array applies to all layers, a shorter array is padded
    /// with the default (1), a longer one is cut.
    pub fn per_layer(&self, k: &str) -> Result<Vec<u64>> {
        let v = self.uint_or_array(k, 1);
        let default = if v.len() == 1 { v[0] } else { 1 };
        let n = self.block_count()? as usize;
        Ok((0..n)
            .map(|i| u64::from(v.get(i).copied().unwrap_or(default)))
            .collect())
    }

    /// `KV.HeadCount`: `attention.head_count` per layer, as
    /// [`Self::per_layer`] reads it.
    pub fn head_count(&self) -> Result<Vec<u64>> {
        self.per_layer("attention.head_count")
    }

    /// `KV.HeadCountKV`: `attention.head_count_kv` per layer, as
    /// [`Self::per_layer`] reads it.
    pub fn head_count_kv(&self) -> Result<Vec<u64>> {
        self.per_layer("attention.head_count_kv")
    }

    /// `KV.HeadCountMax`: over the whole array, layers beyond the block
    /// count included.
    pub fn head_count_max(&self) -> Result<u64> {
        Ok(self.min_max("attention.head_count", 1)?.1)
    }

    /// `KV.HeadCountMin`: the smallest `attention.head_count` (1 when
    /// absent); an error for an array without values, on which Ollama
    /// would panic.
    pub fn head_count_min(&self) -> Result<u64> {
        Ok(self.min_max("attention.head_count", 1)?.0)
    }

    /// `KV.HeadCountKVMax`: the largest `attention.head_count_kv` (1 when
    /// absent).
    pub fn head_count_kv_max(&self) -> Result<u64> {
        Ok(self.min_max("attention.head_count_kv", 1)?.1)
    }

    /// `KV.HeadCountKVMin`: the smallest `attention.head_count_kv` (1 when
    /// absent).
    pub fn head_count_kv_min(&self) -> Result<u64> {
        Ok(self.min_max("attention.head_count_kv", 1)?.0)
    }

    /// `KV.EmbeddingHeadCountMax`: despite its name, the embedding length
    /// divided by the *smallest* head count (0 when that is 0).
    pub fn embedding_head_count_max(&self) -> Result<u64> {
        let heads = self.head_count_min()?;
        Ok(self.embedding_length().checked_div(heads).unwrap_or(0))
    }

    /// `KV.EmbeddingHeadCountK`: `attention.key_length`, defaulting to
    /// [`Self::embedding_head_count_max`] cut to 32 bits.
    pub fn embedding_head_count_k(&self) -> Result<u64> {
        let d = self.embedding_head_count_max()? as u32;
        Ok(self.uint("attention.key_length", d).into())
    }

    /// `KV.EmbeddingHeadCountV`: `attention.value_length`, with the same
    /// default as [`Self::embedding_head_count_k`].
    pub fn embedding_head_count_v(&self) -> Result<u64> {
        let d = self.embedding_head_count_max()? as u32;
        Ok(self.uint("attention.value_length", d).into())
    }

    /// `len(tokenizer.ggml.tokens)`: GraphSize asserts this key is an
    /// array of strings and panics otherwise.
    pub fn vocab(&self) -> Result<u64> {
        match self.h.get("tokenizer.ggml.tokens") {
            Some(Value::Array(a)) if a.elem_type() == ValueType::String => Ok(a.len()),
            Some(v) => Err(ollama_error(format!(
                "'tokenizer.ggml.tokens' has type {}; Ollama needs array[string] (its type assertion would panic)",
                v.type_name()
            ))),
            None => Err(ollama_error(
                "'tokenizer.ggml.tokens' is missing; Ollama reads the vocabulary size from it (and would panic without it). \
                 In header JSON: \"tokenizer.ggml.tokens\": {\"type\": \"array[string]\", \"size\": N}",
            )),
        }
    }

    /// `KV.SupportsFlashAttention`: not for embedding models (those with
    /// `{arch}.pooling_type`), gemma2 never, the qwen3.5/qwen3-next
    /// families always, otherwise when key and value head sizes are equal
    /// and non-zero.
    pub fn supports_flash_attention(&self) -> Result<bool> {
        if self.has("pooling_type") {
            return Ok(false);
        }
        if ["qwen35", "qwen35moe", "qwen3next"].contains(&self.arch.as_str()) {
            return Ok(true);
        }
        if self.arch == "gemma2" {
            return Ok(false);
        }
        let (k, v) = (
            self.embedding_head_count_k()?,
            self.embedding_head_count_v()?,
        );
        Ok(k != 0 && v != 0 && k == v)
    }

    /// `KV.FlashAttention`: architectures where Ollama turns flash
    /// attention on by default.
    pub fn flash_attention_default(&self) -> bool {
        [
            "bert",
            "gemma3",
            "gemma4",
            "glm4moelite",
            "glmocr",
            "gptoss",
            "gpt-oss",
            "lfm2",
            "lfm2moe",
            "mistral3",
            "nemotron_h",
            "nemotron_h_moe",
            "nemotron_h_omni",
            "olmo3",
            "qwen3",
            "qwen3moe",
            "qwen35",
            "qwen35moe",
            "qwen3next",
            "qwen3vl",
            "qwen3vlmoe",
        ]
        .contains(&self.arch.as_str())
    }

    /// `KV.OllamaEngineRequired`: architectures Ollama runs on its own
    /// engine, whose memory is measured by a trial load, not by GraphSize.
    pub fn ollama_engine_required(&self) -> bool {
        [
            "bert",
            "deepseek2",
            "deepseekocr",
            "gemma3",
            "gemma3n",
            "gemma4",
            "gptoss",
            "gpt-oss",
            "laguna",
            "llama4",
            "mistral3",
            "mllama",
            "nemotron_h",
            "nemotron_h_moe",
            "nemotron_h_omni",
            "nomic-bert",
            "olmo3",
            "qwen25vl",
            "qwen3",
            "qwen3moe",
            "qwen35",
            "qwen35moe",
            "qwen3next",
            "qwen3vl",
            "qwen3vlmoe",
            "glm4moelite",
            "glmocr",
            "lfm2",
            "lfm2moe",
        ]
        .contains(&self.arch.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{Array, GgmlType};

    fn header(kv: Vec<(&str, Value)>, tensors: Vec<TensorInfo>) -> GgufHeader {
        let kv = kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        GgufHeader::new(3, kv, tensors).unwrap()
    }

    fn t(name: &str, id: u32, shape: &[u64], offset: u64) -> TensorInfo {
        TensorInfo::new(name, GgmlType::from_id(id).unwrap(), shape.to_vec(), offset).unwrap()
    }

    #[test]
    fn ollama_type_sizes_match_ggml_where_ollama_lists_the_type() {
        for g in GgmlType::all() {
            let (ob, ot) = (ollama_block_size(g.id()), ollama_type_size(g.id()));
            match g.name() {
                "TQ1_0" | "TQ2_0" | "NVFP4" | "Q1_0" => assert_eq!(ot, 0, "{g}"),
                _ => assert_eq!(
                    (ob, ot),
                    (u64::from(g.block_size()), u64::from(g.type_size())),
                    "{g}"
                ),
            }
        }
        // The removed id 4 counts as MXFP4 in Ollama.
        assert_eq!((ollama_block_size(4), ollama_type_size(4)), (32, 17));
    }

    #[test]
    fn getters_match_types_exactly_and_prefix_the_architecture() {
        let h = header(
            vec![
                ("general.architecture", "llama".into()),
                ("llama.block_count", Value::U64(32)),
                ("llama.embedding_length", Value::U32(4096)),
                (
                    "llama.attention.head_count",
                    ArrayValues::I32(vec![32, 16, 8]).into(),
                ),
            ],
            vec![],
        );
        let kv = OllamaKv::new(&h);
        // A uint64 block count is not a uint32: Ollama reads 0.
        assert_eq!(kv.block_count().unwrap(), 0);
        assert_eq!(kv.embedding_length(), 4096);
        assert_eq!(kv.head_count_max().unwrap(), 32);
        assert_eq!(kv.head_count_min().unwrap(), 8);
        assert_eq!(kv.embedding_head_count_max().unwrap(), 4096 / 8);
        assert_eq!(kv.head_count_kv_max().unwrap(), 1);
        assert!(kv.vocab().is_err());
    }

    #[test]
    fn per_layer_values_pad_with_the_default_and_ignore_extra_entries() {
        let h = header(
            vec![
                ("general.architecture", "x".into()),
                ("x.block_count", Value::U32(3)),
                (
                    "x.attention.head_count",
                    ArrayValues::U32(vec![4, 0]).into(),
                ),
                (
                    "x.attention.head_count_kv",
                    ArrayValues::U32(vec![2, 2, 2, 9]).into(),
                ),
            ],
            vec![],
        );
        let kv = OllamaKv::new(&h);
        assert_eq!(kv.head_count().unwrap(), vec![4, 0, 1]);
        assert_eq!(kv.head_count_kv().unwrap(), vec![2, 2, 2]);
        // Max over the whole array, the entry past the layers included.
        assert_eq!(kv.head_count_kv_max().unwrap(), 9);
    }

    #[test]
    fn an_array_without_values_is_an_error_where_ollama_would_panic() {
        let h = header(
            vec![
                ("general.architecture", "x".into()),
                (
                    "x.attention.head_count",
                    Value::Array(Array::of_len(ValueType::U32, 5000).unwrap()),
                ),
            ],
            vec![],
        );
        assert!(OllamaKv::new(&h).head_count_max().is_err());
    }

    #[test]
    fn layers_group_by_block_and_sum_ollama_sizes() {
        let ts = vec![
            t("blk.0.attn_q.weight", 12, &[256, 4], 0),
            t("blk.0.attn_norm.weight", 0, &[256], 576),
            t("v.blk.1.ffn_up.weight", 1, &[8], 1600),
            t("output_norm.weight", 0, &[8], 1632),
            t("token_embd.weight", 34, &[256, 2], 1664),
        ];
        let h = header(vec![], ts);
        let layers = group_layers(h.tensors());
        assert_eq!(layer_size(&layers["blk.0"]), 4 * 144 + 256 * 4);
        assert!(layers["v.blk.1"].contains_key("ffn_up.weight"));
        assert!(layers["output_norm"].contains_key("weight"));
        // TQ1_0 has no size in Ollama's table.
        assert_eq!(layer_size(&layers["token_embd"]), 0);
    }
}
