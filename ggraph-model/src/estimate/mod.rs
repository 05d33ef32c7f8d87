//! Memory estimates for a model before it is loaded: what it will cost on
//! given devices and how its layers will be split.
//!
//! [`estimate`] takes a header (from a GGUF, a header prefix or header
//! JSON) and a request (context, batch, parallel sequences, KV cache type,
//! flash attention, the free memory of hypothetical GPUs 0, 1, ...) and
//! gives, side by side:
//! - `ollama`: what Ollama computes ([`crate::ollama`]);
//! - `exact`: what ggraph's own loader, cache and allocator allocate, by a
//!   dry run of them ([`exact`]); `null` where it was not run, and
//!   `{"error": ...}` for models ggraph cannot build.
//!
//! JSON form ([`Estimate::to_json`]), as `ggraph estimate --json` prints it:
//! ```json
//! {"model": {"architecture": "llama", "block_count": 32, "tensors": 291, "tensor_bytes": 4920734720},
//!  "request": {"ctx": 4096, "batch": 512, "parallel": 1, "kv_type": "f16",
//!              "flash_attn": "auto", "gpu_free": [8589934592], "gpu_overhead": 0, "num_gpu": null},
//!  "ollama": {"kv": [...], "kv_total": ..., "graph_partial": ..., "graph_full": ...,
//!             "gpus": [{"id": "0", "layers": [0, 1, ...], ...}],
//!             "layers_on_gpu": 33, "graph_kind": "full", ...},
//!  "exact": null}
//! ```
//! `ollama` is `{"error": "..."}` when Ollama's formulas cannot be applied
//! (a header without `tokenizer.ggml.tokens`, for instance). Layer indices
//! run from 0 to block_count; block_count is the output layer, as in
//! Ollama. All sizes are bytes.

pub mod exact;

use serde_json::{Value as Json, json};

use crate::gguf::GgufHeader;
pub use crate::ollama::EstimateRequest;
use crate::ollama::{self, OllamaEstimate};
use ggraph_core::error::Error;

/// The estimates of one model for one request.
#[derive(Debug)]
pub struct Estimate {
    /// `general.architecture`, when the header has it.
    pub architecture: Option<String>,
    /// `{arch}.block_count`, when the header has it (an integer that fits
    /// `u32`).
    pub block_count: Option<u64>,
    /// Tensors in the header.
    pub n_tensors: usize,
    /// Bytes of every tensor's data together.
    pub tensor_bytes: u64,
    /// The request the figures are for.
    pub request: EstimateRequest,
    /// Ollama's figures, or why they cannot be computed.
    pub ollama: Result<OllamaEstimate, Error>,
    /// The dry run's figures as JSON ([`exact::ExactEstimate::to_json`]),
    /// set by whoever has devices to run it on; `null` when not run.
    pub exact: Option<Json>,
}

/// Estimates `h` for `req`.
pub fn estimate(h: &GgufHeader, req: &EstimateRequest) -> Estimate {
    let architecture = h.architecture().ok().map(str::to_string);
    let block_count = h
        .opt_hparam_u32("block_count")
        .ok()
        .flatten()
        .map(u64::from);
    Estimate {
        architecture,
        block_count,
        n_tensors: h.tensors().len(),
        tensor_bytes: h.tensor_bytes_total(),
        request: req.clone(),
        ollama: ollama::estimate(h, req),
        exact: None,
    }
}

impl Estimate {
    /// The document `ggraph estimate --json` prints (see the module docs).
    pub fn to_json(&self) -> Json {
        json!({
            "model": {
                "architecture": self.architecture,
                "block_count": self.block_count,
                "tensors": self.n_tensors,
                "tensor_bytes": self.tensor_bytes,
            },
            "request": self.request.to_json(),
            "ollama": match &self.ollama {
                Ok(o) => o.to_json(),
                Err(e) => json!({"error": e.to_string()}),
            },
            "exact": self.exact.clone().unwrap_or(Json::Null),
        })
    }
}
