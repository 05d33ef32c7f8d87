//! llama.cpp's `common_params_sampling`, as the sampling fixtures write it
//! (`fixtures/sampling/make-fixtures`: every field, llama.cpp's names,
//! minus infinity as "-inf"), read into ggraph's parameters. Shared by
//! ggraph-model's and ggraph's sampling tests (`#[path]`).

use ggraph_model::sampling::{SamplerType, SamplingParams};
use serde_json::Value;

/// A float, or "-inf" / "inf".
pub fn float(v: &Value) -> f32 {
    match v.as_str() {
        Some("-inf") => f32::NEG_INFINITY,
        Some("inf") => f32::INFINITY,
        _ => v.as_f64().unwrap() as f32,
    }
}

/// An integer.
pub fn int(v: &Value) -> i32 {
    v.as_i64().unwrap() as i32
}

/// Whether every sampler the case lists is one ggraph has.
pub fn known_samplers(p: &Value) -> bool {
    p["samplers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| SamplerType::from_name(n.as_str().unwrap()).is_some())
}

/// The case's parameters: every field is in the fixture.
pub fn params(p: &Value) -> SamplingParams {
    let f = |k: &str| float(&p[k]);
    let i = |k: &str| int(&p[k]);
    SamplingParams {
        seed: p["seed"].as_u64().unwrap() as u32,
        n_probs: 0,
        min_keep: i("min_keep") as usize,
        top_k: i("top_k"),
        top_p: f("top_p"),
        min_p: f("min_p"),
        xtc_probability: f("xtc_probability"),
        xtc_threshold: f("xtc_threshold"),
        typ_p: f("typ_p"),
        temp: f("temp"),
        dynatemp_range: f("dynatemp_range"),
        dynatemp_exponent: f("dynatemp_exponent"),
        penalty_last_n: i("penalty_last_n"),
        penalty_repeat: f("penalty_repeat"),
        penalty_freq: f("penalty_freq"),
        penalty_present: f("penalty_present"),
        dry_multiplier: f("dry_multiplier"),
        dry_base: f("dry_base"),
        dry_allowed_length: i("dry_allowed_length"),
        dry_penalty_last_n: i("dry_penalty_last_n"),
        dry_sequence_breakers: p["dry_sequence_breakers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect(),
        mirostat: i("mirostat") as u8,
        mirostat_tau: f("mirostat_tau"),
        mirostat_eta: f("mirostat_eta"),
        top_n_sigma: f("top_n_sigma"),
        adaptive_target: f("adaptive_target"),
        adaptive_decay: f("adaptive_decay"),
        samplers: p["samplers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| SamplerType::from_name(s.as_str().unwrap()).unwrap())
            .collect(),
        logit_bias: p["logit_bias"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (int(&b[0]), float(&b[1])))
            .collect(),
    }
}
