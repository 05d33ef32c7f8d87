//! The sampling options of the tools, in llama.cpp's spelling and with
//! its defaults (`common/arg.cpp`): what a `llama` run or a server takes
//! to build a [`SamplingParams`].

use ggraph_model::sampling::{
    GrammarSource, ModelSampling, RANDOM_SEED, SamplerType, SamplingParams,
};
use ggraph_model::serde_json;

/// llama.cpp's sampling flags.
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Seed of the draws; -1 draws one at random
    #[arg(short = 's', long, value_name = "SEED", default_value = "-1",
          allow_hyphen_values = true, value_parser = seed)]
    pub seed: u32,
    /// Temperature; 0 or below takes the most likely token
    #[arg(
        long = "temp",
        value_name = "N",
        default_value_t = 0.8,
        allow_hyphen_values = true
    )]
    pub temp: f32,
    /// Top-k sampling; 0 keeps every token
    #[arg(
        long = "top-k",
        value_name = "N",
        default_value_t = 40,
        allow_hyphen_values = true
    )]
    pub top_k: i32,
    /// Top-p sampling; 1.0 is off
    #[arg(
        long = "top-p",
        value_name = "N",
        default_value_t = 0.95,
        allow_hyphen_values = true
    )]
    pub top_p: f32,
    /// Min-p sampling; 0.0 is off
    #[arg(
        long = "min-p",
        value_name = "N",
        default_value_t = 0.05,
        allow_hyphen_values = true
    )]
    pub min_p: f32,
    /// Locally typical sampling, parameter p; 1.0 is off
    #[arg(
        long = "typical",
        value_name = "N",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    pub typical: f32,
    /// Top-n-sigma sampling; -1.0 is off
    #[arg(long = "top-nsigma", value_name = "N", default_value_t = -1.0,
          allow_hyphen_values = true)]
    pub top_nsigma: f32,
    /// Last n tokens the penalties look at; 0 is off
    #[arg(long = "repeat-last-n", value_name = "N", allow_hyphen_values = true, default_value_t = 64,
          value_parser = clap::value_parser!(i32).range(0..))]
    pub repeat_last_n: i32,
    /// Penalise repeated tokens; 1.0 is off
    #[arg(
        long = "repeat-penalty",
        value_name = "N",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    pub repeat_penalty: f32,
    /// Presence penalty; 0.0 is off
    #[arg(
        long = "presence-penalty",
        value_name = "N",
        default_value_t = 0.0,
        allow_hyphen_values = true
    )]
    pub presence_penalty: f32,
    /// Frequency penalty; 0.0 is off
    #[arg(
        long = "frequency-penalty",
        value_name = "N",
        default_value_t = 0.0,
        allow_hyphen_values = true
    )]
    pub frequency_penalty: f32,
    /// DRY multiplier; 0.0 is off
    #[arg(
        long = "dry-multiplier",
        value_name = "N",
        default_value_t = 0.0,
        allow_hyphen_values = true
    )]
    pub dry_multiplier: f32,
    /// DRY base
    #[arg(
        long = "dry-base",
        value_name = "N",
        default_value_t = 1.75,
        allow_hyphen_values = true
    )]
    pub dry_base: f32,
    /// Repetitions DRY allows before penalising
    #[arg(long = "dry-allowed-length", value_name = "N", allow_hyphen_values = true, default_value_t = 2,
          value_parser = clap::value_parser!(i32).range(0..))]
    pub dry_allowed_length: i32,
    /// Last n tokens DRY looks at; 0 is off
    #[arg(long = "dry-penalty-last-n", value_name = "N", allow_hyphen_values = true, default_value_t = 64,
          value_parser = clap::value_parser!(i32).range(0..))]
    pub dry_penalty_last_n: i32,
    /// A DRY sequence breaker, replacing the defaults ("\n", ":", "\"",
    /// "*"); "none" for none; repeat for more
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breaker: Vec<String>,
    /// XTC probability; 0.0 is off
    #[arg(
        long = "xtc-probability",
        value_name = "N",
        default_value_t = 0.0,
        allow_hyphen_values = true
    )]
    pub xtc_probability: f32,
    /// XTC threshold; above 0.5 is off
    #[arg(
        long = "xtc-threshold",
        value_name = "N",
        default_value_t = 0.1,
        allow_hyphen_values = true
    )]
    pub xtc_threshold: f32,
    /// Dynamic temperature range; 0.0 is off
    #[arg(
        long = "dynatemp-range",
        value_name = "N",
        default_value_t = 0.0,
        allow_hyphen_values = true
    )]
    pub dynatemp_range: f32,
    /// Dynamic temperature exponent
    #[arg(
        long = "dynatemp-exp",
        value_name = "N",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    pub dynatemp_exp: f32,
    /// Mirostat: 0 off, 1 Mirostat, 2 Mirostat 2.0 (top-k, nucleus and
    /// the others are then left out)
    #[arg(long, value_name = "N", default_value_t = 0, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u8).range(0..=2))]
    pub mirostat: u8,
    /// Mirostat learning rate (eta)
    #[arg(
        long = "mirostat-lr",
        value_name = "N",
        default_value_t = 0.1,
        allow_hyphen_values = true
    )]
    pub mirostat_lr: f32,
    /// Mirostat target entropy (tau)
    #[arg(
        long = "mirostat-ent",
        value_name = "N",
        default_value_t = 5.0,
        allow_hyphen_values = true
    )]
    pub mirostat_ent: f32,
    /// Adaptive-p: draw tokens near this probability (0.0 to 1.0; negative
    /// is off; with adaptive_p in --samplers)
    #[arg(long = "adaptive-target", value_name = "N", default_value_t = -1.0,
          allow_hyphen_values = true)]
    pub adaptive_target: f32,
    /// Adaptive-p: decay of the moving average of the probabilities drawn
    #[arg(
        long = "adaptive-decay",
        value_name = "N",
        default_value_t = 0.9,
        allow_hyphen_values = true
    )]
    pub adaptive_decay: f32,
    /// Add a bias to a token's logit: TOKEN_ID+BIAS or TOKEN_ID-BIAS
    /// (15043+1, 15043-inf bans it); repeat for more
    #[arg(short = 'l', long = "logit-bias", value_name = "TOKEN_ID(+/-)BIAS",
          value_parser = logit_bias)]
    pub logit_bias: Vec<(i32, f32)>,
    /// The samplers, in order, separated by ';' [default: penalties; dry;
    /// top_n_sigma; top_k; typ_p; top_p; min_p; xtc; temperature]
    #[arg(long, value_name = "SAMPLERS", value_parser = samplers,
          conflicts_with = "sampling_seq")]
    pub samplers: Option<SamplerList>,
    /// The samplers as letters, in order [default: edskypmxt]
    #[arg(long = "sampling-seq", visible_alias = "sampler-seq", value_name = "SEQUENCE",
          value_parser = sampling_seq)]
    pub sampling_seq: Option<SamplerList>,
    /// Go on past end-of-generation tokens
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,
    /// Hold the output to a GBNF grammar (llama.cpp's grammars/*.gbnf
    /// syntax; a text starting with %llguidance is llguidance's Lark)
    #[arg(long, value_name = "GRAMMAR", allow_hyphen_values = true,
          conflicts_with_all = ["grammar_file", "json_schema", "json_schema_file"])]
    pub grammar: Option<String>,
    /// --grammar, read from a file
    #[arg(long = "grammar-file", value_name = "FNAME",
          conflicts_with_all = ["json_schema", "json_schema_file"])]
    pub grammar_file: Option<String>,
    /// Hold the output to a JSON schema, e.g. '{}' for any JSON object
    #[arg(
        short = 'j',
        long = "json-schema",
        value_name = "SCHEMA",
        conflicts_with = "json_schema_file"
    )]
    pub json_schema: Option<String>,
    /// --json-schema, read from a file
    #[arg(long = "json-schema-file", visible_alias = "jf", value_name = "FILE")]
    pub json_schema_file: Option<String>,
    /// Print the N most probable candidates of each token, with their
    /// probabilities after the samplers; 0 is off
    #[arg(long = "n-probs", value_name = "N", default_value_t = 0,
          value_parser = crate::values::count)]
    pub n_probs: usize,
}

impl SamplingArgs {
    /// The parameters a GGUF may set (`general.sampling.*`) that the
    /// command line set: those keep the user's values (llama.cpp's
    /// `user_sampling_config`).
    pub fn user_set(matches: &clap::ArgMatches) -> Vec<ModelSampling> {
        use clap::parser::ValueSource;
        let given = |id: &str| {
            matches
                .try_get_raw(id)
                .is_ok_and(|_| matches.value_source(id) == Some(ValueSource::CommandLine))
        };
        [
            (&["samplers", "sampling_seq"][..], ModelSampling::Samplers),
            (&["top_k"], ModelSampling::TopK),
            (&["top_p"], ModelSampling::TopP),
            (&["min_p"], ModelSampling::MinP),
            (&["xtc_probability"], ModelSampling::XtcProbability),
            (&["xtc_threshold"], ModelSampling::XtcThreshold),
            (&["temp"], ModelSampling::Temp),
            (&["repeat_last_n"], ModelSampling::PenaltyLastN),
            (&["repeat_penalty"], ModelSampling::PenaltyRepeat),
            (&["mirostat"], ModelSampling::Mirostat),
            (&["mirostat_ent"], ModelSampling::MirostatTau),
            (&["mirostat_lr"], ModelSampling::MirostatEta),
        ]
        .into_iter()
        .filter(|(ids, _)| ids.iter().any(|id| given(id)))
        .map(|(_, f)| f)
        .collect()
    }

    /// The grammar the flags ask for, read (files) and parsed (JSON), or
    /// what is wrong with it; not yet compiled.
    pub fn grammar_source(&self) -> Result<Option<GrammarSource>, String> {
        let read = |flag: &str, path: &str| {
            std::fs::read_to_string(path).map_err(|e| format!("{flag} {path}: {e}"))
        };
        let json = |flag: &str, text: &str| {
            serde_json::from_str(text)
                .map(GrammarSource::JsonSchema)
                .map_err(|e| format!("{flag}: not JSON: {e}"))
        };
        Ok(
            match (
                &self.grammar,
                &self.grammar_file,
                &self.json_schema,
                &self.json_schema_file,
            ) {
                (Some(g), ..) => Some(GrammarSource::Gbnf(g.clone())),
                (_, Some(f), ..) => Some(GrammarSource::Gbnf(read("--grammar-file", f)?)),
                (_, _, Some(s), _) => Some(json("--json-schema", s)?),
                (_, _, _, Some(f)) => {
                    Some(json("--json-schema-file", &read("--json-schema-file", f)?)?)
                }
                _ => None,
            },
        )
    }

    /// The parameters these flags give (checked when the chain is built,
    /// against the model's vocabulary).
    pub fn params(&self) -> SamplingParams {
        let mut p = SamplingParams {
            seed: self.seed,
            n_probs: self.n_probs,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            typ_p: self.typical,
            temp: self.temp,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exp,
            penalty_last_n: self.repeat_last_n,
            penalty_repeat: self.repeat_penalty,
            penalty_freq: self.frequency_penalty,
            penalty_present: self.presence_penalty,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_ent,
            mirostat_eta: self.mirostat_lr,
            top_n_sigma: self.top_nsigma,
            adaptive_target: self.adaptive_target,
            adaptive_decay: self.adaptive_decay,
            logit_bias: self.logit_bias.clone(),
            ..SamplingParams::default()
        };
        if !self.dry_sequence_breaker.is_empty() {
            p.dry_sequence_breakers = if self.dry_sequence_breaker == ["none"] {
                Vec::new()
            } else {
                self.dry_sequence_breaker.clone()
            };
        }
        if let Some(s) = self.samplers.as_ref().or(self.sampling_seq.as_ref()) {
            p.samplers = s.0.clone();
        }
        p
    }
}

/// A sampler chain's order, as `--samplers` or `--sampling-seq` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerList(pub Vec<SamplerType>);

/// A seed: 0 to 4294967294, or -1 (random).
fn seed(s: &str) -> Result<u32, String> {
    match s.trim() {
        "-1" => Ok(RANDOM_SEED),
        t => t
            .parse::<u32>()
            .ok()
            .filter(|&v| v != RANDOM_SEED)
            .ok_or_else(|| {
                format!("'{s}' is not a seed (0 to 4294967294, or -1 for a random one)")
            }),
    }
}

/// `TOKEN_ID+BIAS` or `TOKEN_ID-BIAS` (llama.cpp's `--logit-bias`).
fn logit_bias(s: &str) -> Result<(i32, f32), String> {
    let bad = || format!("'{s}' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS (15043+1, 15043-inf)");
    let at = s.find(['+', '-']).ok_or_else(bad)?;
    let token: i32 = s[..at].trim().parse().map_err(|_| bad())?;
    let bias: f32 = s[at..].trim().parse().map_err(|_| bad())?;
    if bias.is_nan() {
        return Err(bad());
    }
    Ok((token, bias))
}

fn samplers(s: &str) -> Result<SamplerList, String> {
    SamplerType::parse_list(s)
        .map(SamplerList)
        .map_err(|e| e.to_string())
}

fn sampling_seq(s: &str) -> Result<SamplerList, String> {
    SamplerType::parse_letters(s)
        .map(SamplerList)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_llama_cpp_writes_them() {
        assert_eq!(seed("-1"), Ok(RANDOM_SEED));
        assert_eq!(seed("42"), Ok(42));
        assert!(seed("4294967295").is_err() && seed("x").is_err());
        assert_eq!(logit_bias("15043+1"), Ok((15043, 1.0)));
        assert_eq!(logit_bias("15043-inf"), Ok((15043, f32::NEG_INFINITY)));
        assert_eq!(logit_bias("7-0.5"), Ok((7, -0.5)));
        assert!(logit_bias("abc+1").is_err() && logit_bias("12").is_err());
        assert_eq!(
            samplers("top_k;temp;min-p"),
            Ok(SamplerList(vec![
                SamplerType::TopK,
                SamplerType::Temperature,
                SamplerType::MinP
            ]))
        );
        assert!(samplers("top_k;bogus").unwrap_err().contains("bogus"));
        assert_eq!(
            sampling_seq("kt"),
            Ok(SamplerList(vec![
                SamplerType::TopK,
                SamplerType::Temperature
            ]))
        );
    }
}
