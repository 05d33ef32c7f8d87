//! The sampling a model asks for: a GGUF's `general.sampling.*` keys
//! (written from the model's `generation_config.json` by llama.cpp's
//! converter), which llama.cpp's tools take in place of their defaults
//! for every parameter the user did not set (`common_params_sampling`
//! after `common_init_from_params`).

use crate::gguf::{GgufHeader, Value};

use super::chain::{SamplerType, SamplingParams};

/// A parameter a GGUF may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelSampling {
    /// The chain's order (`general.sampling.sequence`, names split by `;`).
    Samplers,
    /// `general.sampling.top_k`.
    TopK,
    /// `general.sampling.top_p`.
    TopP,
    /// `general.sampling.min_p`.
    MinP,
    /// `general.sampling.xtc_probability`.
    XtcProbability,
    /// `general.sampling.xtc_threshold`.
    XtcThreshold,
    /// `general.sampling.temp`.
    Temp,
    /// `general.sampling.penalty_last_n`.
    PenaltyLastN,
    /// `general.sampling.penalty_repeat`.
    PenaltyRepeat,
    /// `general.sampling.mirostat`.
    Mirostat,
    /// `general.sampling.mirostat_tau`.
    MirostatTau,
    /// `general.sampling.mirostat_eta`.
    MirostatEta,
}

impl ModelSampling {
    /// Every one, with its key.
    pub const ALL: [(ModelSampling, &'static str); 12] = [
        (ModelSampling::Samplers, "general.sampling.sequence"),
        (ModelSampling::TopK, "general.sampling.top_k"),
        (ModelSampling::TopP, "general.sampling.top_p"),
        (ModelSampling::MinP, "general.sampling.min_p"),
        (
            ModelSampling::XtcProbability,
            "general.sampling.xtc_probability",
        ),
        (
            ModelSampling::XtcThreshold,
            "general.sampling.xtc_threshold",
        ),
        (ModelSampling::Temp, "general.sampling.temp"),
        (
            ModelSampling::PenaltyLastN,
            "general.sampling.penalty_last_n",
        ),
        (
            ModelSampling::PenaltyRepeat,
            "general.sampling.penalty_repeat",
        ),
        (ModelSampling::Mirostat, "general.sampling.mirostat"),
        (ModelSampling::MirostatTau, "general.sampling.mirostat_tau"),
        (ModelSampling::MirostatEta, "general.sampling.mirostat_eta"),
    ];
}

/// A metadata value as llama.cpp's `llama_model_meta_val_str` writes it
/// (floats with six decimals, as `std::to_string`).
fn as_text(v: &Value) -> Option<String> {
    if let Some(s) = v.as_str() {
        return Some(s.to_string());
    }
    if let Some(i) = v.as_integer() {
        return Some(i.to_string());
    }
    v.as_float().map(|f| format!("{f:.6}"))
}

/// The number at the start of `s`, as `strtol`/`strtof` read it (none
/// when it does not start with one).
fn leading<T: std::str::FromStr>(s: &str) -> Option<T> {
    let s = s.trim_start();
    (1..=s.len())
        .rev()
        .filter(|&n| s.is_char_boundary(n))
        .find_map(|n| s[..n].parse().ok())
}

impl SamplingParams {
    /// These parameters with the model's own sampling (`general.sampling.*`
    /// in the GGUF) in place of every one `user_set` does not name, as
    /// llama.cpp's tools take them. Keys that do not hold a number (or,
    /// for the sequence, sampler names) are left out, as llama.cpp leaves
    /// them; unknown sampler names are skipped.
    pub fn with_model_defaults(mut self, header: &GgufHeader, user_set: &[ModelSampling]) -> Self {
        for (field, key) in ModelSampling::ALL {
            if user_set.contains(&field) {
                continue;
            }
            let Some(text) = header.get(key).and_then(as_text) else {
                continue;
            };
            let int = || leading::<i64>(&text).map(|v| v as i32);
            let float = || leading::<f32>(&text);
            match field {
                ModelSampling::Samplers => {
                    let list: Vec<SamplerType> =
                        text.split(';').filter_map(SamplerType::from_name).collect();
                    if !list.is_empty() {
                        self.samplers = list;
                    }
                }
                ModelSampling::TopK => self.top_k = int().unwrap_or(self.top_k),
                ModelSampling::TopP => self.top_p = float().unwrap_or(self.top_p),
                ModelSampling::MinP => self.min_p = float().unwrap_or(self.min_p),
                ModelSampling::XtcProbability => {
                    self.xtc_probability = float().unwrap_or(self.xtc_probability)
                }
                ModelSampling::XtcThreshold => {
                    self.xtc_threshold = float().unwrap_or(self.xtc_threshold)
                }
                ModelSampling::Temp => self.temp = float().unwrap_or(self.temp),
                ModelSampling::PenaltyLastN => {
                    self.penalty_last_n = int().unwrap_or(self.penalty_last_n)
                }
                ModelSampling::PenaltyRepeat => {
                    self.penalty_repeat = float().unwrap_or(self.penalty_repeat)
                }
                ModelSampling::Mirostat => {
                    if let Some(m) = int().and_then(|m| u8::try_from(m).ok()) {
                        self.mirostat = m;
                    }
                }
                ModelSampling::MirostatTau => {
                    self.mirostat_tau = float().unwrap_or(self.mirostat_tau)
                }
                ModelSampling::MirostatEta => {
                    self.mirostat_eta = float().unwrap_or(self.mirostat_eta)
                }
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;

    #[test]
    fn the_model_s_keys_replace_the_defaults_the_user_left() {
        let mut w = GgufWriter::new();
        w.kv("general.sampling.temp", Value::F32(0.6))
            .kv("general.sampling.top_k", Value::I32(20))
            .kv("general.sampling.top_p", Value::F32(0.95))
            .kv(
                "general.sampling.sequence",
                Value::String("top_k;bogus;temperature".into()),
            )
            .kv(
                "general.sampling.min_p",
                Value::String("not a number".into()),
            );
        let h = w.header().unwrap();
        let p = SamplingParams::default().with_model_defaults(&h, &[ModelSampling::TopK]);
        assert_eq!((p.temp, p.top_k, p.top_p, p.min_p), (0.6, 40, 0.95, 0.05));
        assert_eq!(p.samplers, [SamplerType::TopK, SamplerType::Temperature]);
        assert_eq!(leading::<i64>(" 12abc"), Some(12));
        assert_eq!(leading::<f32>("0.5x"), Some(0.5));
    }
}
