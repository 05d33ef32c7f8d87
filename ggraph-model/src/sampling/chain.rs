//! A chain of samplers, and llama.cpp's sampling parameters with the
//! chain its tools build from them (`common_sampler_init`).

use ggraph_core::error::{Error, Result};

use super::candidates::Candidates;
use super::dry::Dry;
use super::filters::{
    LogitBias, MinP, Penalties, Temperature, TopK, TopNSigma, TopP, Typical, Xtc,
};
use super::sampler::Sampler;
use super::selectors::{AdaptiveP, Dist, Mirostat, MirostatV2};
use crate::tokenizer::Tokenizer;

/// Samplers applied in order to one candidate list; the last chooses.
#[derive(Clone, Default)]
pub struct SamplerChain {
    samplers: Vec<Box<dyn Sampler>>,
    candidates: Candidates,
    seed: Option<u32>,
}

impl std::fmt::Debug for SamplerChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplerChain")
            .field("samplers", &self.names())
            .field("seed", &self.seed)
            .finish()
    }
}

impl SamplerChain {
    /// An empty chain.
    pub fn new() -> SamplerChain {
        SamplerChain::default()
    }

    /// Adds a sampler at the end.
    pub fn push(&mut self, sampler: Box<dyn Sampler>) {
        self.samplers.push(sampler);
    }

    /// The samplers' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.samplers.iter().map(|s| s.name()).collect()
    }

    /// The seed the chain's draws use, where it was built from
    /// [`SamplingParams`] (a random seed, resolved).
    pub fn seed(&self) -> Option<u32> {
        self.seed
    }

    /// Applies every sampler to `candidates`, in order.
    pub fn apply(&mut self, candidates: &mut Candidates) {
        for s in &mut self.samplers {
            s.apply(candidates);
        }
    }

    /// Tells every sampler of a token taken (a prompt token, or the one
    /// chosen).
    pub fn accept(&mut self, token: i32) {
        for s in &mut self.samplers {
            s.accept(token);
        }
    }

    /// Forgets the tokens accepted and restarts the random numbers.
    pub fn reset(&mut self) {
        for s in &mut self.samplers {
            s.reset();
        }
    }

    /// Chooses a token from `logits` (one per vocabulary entry) and
    /// accepts it, as `llama_sampler_sample` does. The candidates, with
    /// their probabilities after the chain, stay for
    /// [`SamplerChain::candidates`].
    pub fn sample(&mut self, logits: &[f32]) -> Result<i32> {
        let mut c = std::mem::take(&mut self.candidates);
        c.fill(logits);
        self.apply(&mut c);
        let chosen = c.selected_id();
        self.candidates = c;
        let token = chosen.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "the sampler chain [{}] chose no token from {} logits \
                 (a chain must end with a sampler that chooses: dist, greedy or mirostat)",
                self.names().join(", "),
                logits.len()
            ))
        })?;
        self.accept(token);
        Ok(token)
    }

    /// The candidates of the last [`SamplerChain::sample`], as the chain
    /// left them.
    pub fn candidates(&self) -> &Candidates {
        &self.candidates
    }
}

/// The samplers whose order `--samplers` sets (llama.cpp's
/// `common_sampler_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SamplerType {
    /// Repetition, frequency and presence penalties.
    Penalties,
    /// DRY.
    Dry,
    /// Top-n-sigma.
    TopNSigma,
    /// Top-k.
    TopK,
    /// Locally typical.
    Typical,
    /// Top-p (nucleus).
    TopP,
    /// Min-p.
    MinP,
    /// Exclude Top Choices.
    Xtc,
    /// Temperature (dynamic when a range is set).
    Temperature,
    /// Adaptive-p: when listed, it draws at the end of the chain in
    /// place of the plain draw, wherever it is listed.
    AdaptiveP,
}

impl SamplerType {
    /// Every type with its canonical name and its letter; the first nine
    /// are llama.cpp's default chain, in order.
    pub const ALL: [(SamplerType, &'static str, char); 10] = [
        (SamplerType::Penalties, "penalties", 'e'),
        (SamplerType::Dry, "dry", 'd'),
        (SamplerType::TopNSigma, "top_n_sigma", 's'),
        (SamplerType::TopK, "top_k", 'k'),
        (SamplerType::Typical, "typ_p", 'y'),
        (SamplerType::TopP, "top_p", 'p'),
        (SamplerType::MinP, "min_p", 'm'),
        (SamplerType::Xtc, "xtc", 'x'),
        (SamplerType::Temperature, "temperature", 't'),
        (SamplerType::AdaptiveP, "adaptive_p", 'a'),
    ];

    /// llama.cpp's default chain (`edskypmxt`).
    pub fn defaults() -> Vec<SamplerType> {
        SamplerType::ALL[..9].iter().map(|e| e.0).collect()
    }

    /// Its canonical name (`top_k`).
    pub fn name(self) -> &'static str {
        SamplerType::ALL
            .iter()
            .find(|(t, _, _)| *t == self)
            .map_or("", |e| e.1)
    }

    /// A type by any of llama.cpp's spellings: the canonical name, with
    /// dashes (`top-k`) or without (`topk`), `nucleus`, `temp`, `typ`;
    /// any case.
    pub fn from_name(name: &str) -> Option<SamplerType> {
        let lower = name.to_ascii_lowercase();
        let alias = match lower.as_str() {
            "nucleus" => Some(SamplerType::TopP),
            "temp" => Some(SamplerType::Temperature),
            "typ" => Some(SamplerType::Typical),
            _ => None,
        };
        alias.or_else(|| {
            SamplerType::ALL.iter().map(|e| e.0).find(|t| {
                let canonical = t.name();
                lower == canonical
                    || lower == canonical.replace('_', "-")
                    || lower == canonical.replace('_', "")
            })
        })
    }

    /// The chain `--samplers` gives: names separated by `;` (or `,`).
    pub fn parse_list(list: &str) -> Result<Vec<SamplerType>> {
        list.split([';', ','])
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                SamplerType::from_name(s.trim()).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "--samplers: unknown sampler '{}' (known: {})",
                        s.trim(),
                        SamplerType::ALL.map(|e| e.1).join(", ")
                    ))
                })
            })
            .collect()
    }

    /// The chain `--sampling-seq` gives: one letter a sampler
    /// (`edskypmxt` is the default).
    pub fn parse_letters(letters: &str) -> Result<Vec<SamplerType>> {
        letters
            .chars()
            .map(|c| {
                SamplerType::ALL
                    .iter()
                    .find(|e| e.2 == c)
                    .map(|e| e.0)
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "--sampling-seq: unknown sampler letter '{c}' (known: {})",
                            SamplerType::ALL.map(|e| e.2.to_string()).join("")
                        ))
                    })
            })
            .collect()
    }
}

/// llama.cpp's `LLAMA_DEFAULT_SEED`: a seed drawn at random.
pub const RANDOM_SEED: u32 = u32::MAX;

/// The sampling parameters of llama.cpp's tools
/// (`common_params_sampling`), with its defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// The draws' seed; [`RANDOM_SEED`] draws one.
    pub seed: u32,
    /// Probabilities of the top candidates to report (0: none).
    pub n_probs: usize,
    /// Candidates the cutting samplers keep at least (0: no floor).
    pub min_keep: usize,
    /// Top-k (0: the whole vocabulary).
    pub top_k: i32,
    /// Top-p (1: off).
    pub top_p: f32,
    /// Min-p (0: off).
    pub min_p: f32,
    /// XTC's chance to act (0: off).
    pub xtc_probability: f32,
    /// XTC's threshold (above 0.5: off).
    pub xtc_threshold: f32,
    /// Typical-p (1: off).
    pub typ_p: f32,
    /// Temperature (0 or below: the most likely token).
    pub temp: f32,
    /// Dynamic temperature's range either side of `temp` (0: off).
    pub dynatemp_range: f32,
    /// Dynamic temperature's exponent.
    pub dynatemp_exponent: f32,
    /// Tokens the penalties look back over (0 or below: off).
    pub penalty_last_n: i32,
    /// Repetition penalty (1: off).
    pub penalty_repeat: f32,
    /// Frequency penalty (0: off).
    pub penalty_freq: f32,
    /// Presence penalty (0: off).
    pub penalty_present: f32,
    /// DRY's multiplier (0: off).
    pub dry_multiplier: f32,
    /// DRY's base.
    pub dry_base: f32,
    /// Repetitions longer than this are penalised by DRY.
    pub dry_allowed_length: i32,
    /// Tokens DRY looks back over (0 or below: off).
    pub dry_penalty_last_n: i32,
    /// Strings that end the repetitions DRY looks at.
    pub dry_sequence_breakers: Vec<String>,
    /// Mirostat version (0: off, 1 or 2).
    pub mirostat: u8,
    /// Mirostat's target surprise.
    pub mirostat_tau: f32,
    /// Mirostat's learning rate.
    pub mirostat_eta: f32,
    /// Top-n-sigma (0 or below: off).
    pub top_n_sigma: f32,
    /// Adaptive-p's target probability (negative: off).
    pub adaptive_target: f32,
    /// Adaptive-p's moving average decay.
    pub adaptive_decay: f32,
    /// The configurable samplers, in order.
    pub samplers: Vec<SamplerType>,
    /// Biases added to tokens' logits.
    pub logit_bias: Vec<(i32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            seed: RANDOM_SEED,
            n_probs: 0,
            min_keep: 0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            typ_p: 1.0,
            temp: 0.8,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            penalty_last_n: 64,
            penalty_repeat: 1.0,
            penalty_freq: 0.0,
            penalty_present: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            top_n_sigma: -1.0,
            samplers: SamplerType::defaults(),
            adaptive_target: -1.0,
            adaptive_decay: 0.9,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: temperature 0 (the chain still runs, and keeps
    /// only the most likely token).
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temp: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Refuses values out of range, naming the flag: a negative top-k,
    /// probabilities outside 0..1, temperatures and penalties that are not
    /// finite, a Mirostat version other than 0, 1 or 2, a logit bias for a
    /// token outside the `n_vocab`-token vocabulary or of NaN or plus
    /// infinity.
    pub fn check(&self, n_vocab: usize) -> Result<()> {
        let bad = |flag: &str, what: String| Err(Error::InvalidArgument(format!("{flag}: {what}")));
        let unit = |flag: &str, v: f32| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                bad(flag, format!("{v} is outside 0..1"))
            }
        };
        let finite = |flag: &str, v: f32| {
            if v.is_finite() {
                Ok(())
            } else {
                bad(flag, format!("{v} is not a finite number"))
            }
        };
        if self.top_k < 0 {
            return bad(
                "--top-k",
                format!("{} is negative (0 keeps every token)", self.top_k),
            );
        }
        unit("--top-p", self.top_p)?;
        unit("--min-p", self.min_p)?;
        unit("--typical", self.typ_p)?;
        unit("--xtc-probability", self.xtc_probability)?;
        unit("--xtc-threshold", self.xtc_threshold)?;
        finite("--temp", self.temp)?;
        finite("--dynatemp-range", self.dynatemp_range)?;
        finite("--dynatemp-exp", self.dynatemp_exponent)?;
        if self.dynatemp_range < 0.0 {
            return bad(
                "--dynatemp-range",
                format!("{} is negative", self.dynatemp_range),
            );
        }
        finite("--repeat-penalty", self.penalty_repeat)?;
        if self.penalty_repeat <= 0.0 || !(1.0 / self.penalty_repeat).is_finite() {
            return bad(
                "--repeat-penalty",
                format!("{} must be above 0 (1 is off)", self.penalty_repeat),
            );
        }
        finite("--frequency-penalty", self.penalty_freq)?;
        finite("--presence-penalty", self.penalty_present)?;
        for (flag, n) in [
            ("--repeat-last-n", self.penalty_last_n),
            ("--dry-penalty-last-n", self.dry_penalty_last_n),
        ] {
            if n < -1 {
                return bad(flag, format!("{n} is below -1"));
            }
        }
        finite("--dry-multiplier", self.dry_multiplier)?;
        finite("--dry-base", self.dry_base)?;
        if self.dry_multiplier < 0.0 {
            return bad(
                "--dry-multiplier",
                format!("{} is negative", self.dry_multiplier),
            );
        }
        if self.dry_allowed_length < 0 {
            return bad(
                "--dry-allowed-length",
                format!("{} is negative", self.dry_allowed_length),
            );
        }
        if self.mirostat > 2 {
            return bad("--mirostat", format!("{} is not 0, 1 or 2", self.mirostat));
        }
        finite("--mirostat-ent", self.mirostat_tau)?;
        finite("--mirostat-lr", self.mirostat_eta)?;
        finite("--top-nsigma", self.top_n_sigma)?;
        finite("--adaptive-target", self.adaptive_target)?;
        if self.adaptive_target > 1.0 {
            return bad(
                "--adaptive-target",
                format!("{} is above 1", self.adaptive_target),
            );
        }
        finite("--adaptive-decay", self.adaptive_decay)?;
        for &(token, bias) in &self.logit_bias {
            if token < 0 || token as usize >= n_vocab {
                return bad(
                    "--logit-bias",
                    format!("token {token} is outside the {n_vocab}-token vocabulary"),
                );
            }
            if bias.is_nan() || bias == f32::INFINITY {
                return bad(
                    "--logit-bias",
                    format!("token {token}'s bias {bias} is not a number or minus infinity"),
                );
            }
        }
        Ok(())
    }

    /// The parameters as llama.cpp's tools print them
    /// (`common_params_sampling::print`), for comparing runs.
    pub fn summary(&self) -> String {
        format!(
            "repeat_last_n = {}, repeat_penalty = {:.3}, frequency_penalty = {:.3}, presence_penalty = {:.3}\n\
             dry_multiplier = {:.3}, dry_base = {:.3}, dry_allowed_length = {}, dry_penalty_last_n = {}\n\
             top_k = {}, top_p = {:.3}, min_p = {:.3}, xtc_probability = {:.3}, xtc_threshold = {:.3}, \
             typical_p = {:.3}, top_n_sigma = {:.3}, temp = {:.3}\n\
             mirostat = {}, mirostat_lr = {:.3}, mirostat_ent = {:.3}, adaptive_target = {:.3}, adaptive_decay = {:.3}",
            self.penalty_last_n,
            self.penalty_repeat,
            self.penalty_freq,
            self.penalty_present,
            self.dry_multiplier,
            self.dry_base,
            self.dry_allowed_length,
            self.dry_penalty_last_n,
            self.top_k,
            self.top_p,
            self.min_p,
            self.xtc_probability,
            self.xtc_threshold,
            self.typ_p,
            self.top_n_sigma,
            self.temp,
            self.mirostat,
            self.mirostat_eta,
            self.mirostat_tau,
            self.adaptive_target,
            self.adaptive_decay
        )
    }

    /// The seed the draws use: `seed`, or one drawn from the clock and the
    /// process when it is [`RANDOM_SEED`].
    pub fn resolved_seed(&self) -> u32 {
        if self.seed != RANDOM_SEED {
            return self.seed;
        }
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish() as u32
    }

    /// The chain llama.cpp's `common_sampler_init` builds from these
    /// parameters, over a vocabulary of `n_vocab` tokens. DRY needs the `tokenizer` to
    /// find its sequence breakers. Checks the parameters first
    /// ([`SamplingParams::check`]).
    pub fn chain(&self, n_vocab: usize, tokenizer: Option<&Tokenizer>) -> Result<SamplerChain> {
        self.check(n_vocab)?;
        let seed = self.resolved_seed();
        // below 0 is off, as llama.cpp's library reads it (llama-server
        // reads -1 as the context size before it builds a chain)
        let last_n = |n: i32| n.max(0) as usize;
        let mut chain = SamplerChain::new();
        chain.seed = Some(seed);
        if !self.logit_bias.is_empty() {
            chain.push(Box::new(LogitBias::new(self.logit_bias.clone())));
        }
        if self.mirostat != 0 {
            chain.push(Box::new(Temperature::new(self.temp)));
            chain.push(if self.mirostat == 1 {
                Box::new(Mirostat::new(
                    n_vocab,
                    seed,
                    self.mirostat_tau,
                    self.mirostat_eta,
                    100,
                ))
            } else {
                Box::new(MirostatV2::new(seed, self.mirostat_tau, self.mirostat_eta))
            });
            return Ok(chain);
        }
        let min_keep = self.min_keep;
        for &kind in &self.samplers {
            let sampler: Box<dyn Sampler> = match kind {
                SamplerType::Penalties => {
                    let n = last_n(self.penalty_last_n);
                    if Penalties::is_disabled(
                        n,
                        self.penalty_repeat,
                        self.penalty_freq,
                        self.penalty_present,
                    ) {
                        continue;
                    }
                    Box::new(Penalties::new(
                        n,
                        self.penalty_repeat,
                        self.penalty_freq,
                        self.penalty_present,
                    ))
                }
                SamplerType::Dry => {
                    let n = last_n(self.dry_penalty_last_n);
                    if Dry::is_disabled(self.dry_multiplier, self.dry_base, n) {
                        continue;
                    }
                    let tokenizer = tokenizer.ok_or_else(|| {
                        Error::InvalidArgument(
                            "--dry-multiplier: DRY needs the model's vocabulary to find its \
                             sequence breakers"
                                .into(),
                        )
                    })?;
                    Box::new(Dry::new(
                        self.dry_multiplier,
                        self.dry_base,
                        self.dry_allowed_length as usize,
                        n,
                        &self.dry_sequence_breakers,
                        tokenizer,
                    )?)
                }
                SamplerType::TopNSigma if self.top_n_sigma > 0.0 => {
                    Box::new(TopNSigma::new(self.top_n_sigma))
                }
                SamplerType::TopK => Box::new(TopK::new(self.top_k)),
                SamplerType::Typical => Box::new(Typical::new(self.typ_p, min_keep)),
                SamplerType::TopP => Box::new(TopP::new(self.top_p, min_keep)),
                SamplerType::MinP => Box::new(MinP::new(self.min_p, min_keep)),
                SamplerType::Xtc if !Xtc::is_disabled(self.xtc_probability, self.xtc_threshold) => {
                    Box::new(Xtc::new(
                        self.xtc_probability,
                        self.xtc_threshold,
                        min_keep,
                        seed,
                    ))
                }
                SamplerType::Temperature => Box::new(Temperature::dynamic(
                    self.temp,
                    self.dynatemp_range,
                    self.dynatemp_exponent,
                )),
                SamplerType::TopNSigma | SamplerType::Xtc | SamplerType::AdaptiveP => continue,
            };
            chain.push(sampler);
        }
        if self.samplers.contains(&SamplerType::AdaptiveP) {
            chain.push(Box::new(AdaptiveP::new(
                self.adaptive_target,
                self.adaptive_decay,
                seed,
            )));
        } else {
            chain.push(Box::new(Dist::new(seed)));
        }
        Ok(chain)
    }
}
