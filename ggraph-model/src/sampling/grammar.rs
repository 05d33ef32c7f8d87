//! Output held to a grammar: llama.cpp's GBNF, llguidance's Lark, a JSON
//! schema or a regex, compiled by the `llguidance` crate over the model's
//! vocabulary (as llama.cpp's `common/llguidance.cpp` does) into a
//! [`Constraint`] that masks every token that would leave the grammar.
//!
//! [`GrammarVocab`] is built once per vocabulary (it indexes every
//! token's bytes: a fraction of a second on a large vocabulary);
//! [`GrammarVocab::compile`] then checks a grammar before any token is
//! generated: a grammar that does not parse or a schema llguidance cannot
//! take is an error, never unconstrained output.

use std::sync::Arc;

use ggraph_core::error::{Error, Result};
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{
    ApproximateTokEnv, InferenceCapabilities, SimpleVob, TokEnv, TokRxInfo, TokTrie,
};
use llguidance::{Matcher, ParserFactory};

use super::candidates::Candidates;
use super::gbnf::gbnf_to_lark;
use super::token_sampler::Constraint;
use crate::tokenizer::Tokenizer;

/// A grammar, in one of the forms the tools take.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSource {
    /// llama.cpp's GBNF (`--grammar`); a text that starts with
    /// `%llguidance` is llguidance's Lark, as llama.cpp reads it.
    Gbnf(String),
    /// llguidance's Lark dialect.
    Lark(String),
    /// A JSON schema (`--json-schema`): the output is one JSON value valid
    /// for it.
    JsonSchema(serde_json::Value),
    /// A regular expression (Rust `regex` syntax) the output matches.
    Regex(String),
}

/// The model's vocabulary, indexed for grammars.
#[derive(Clone)]
pub struct GrammarVocab {
    factory: Arc<ParserFactory>,
    n_vocab: usize,
}

impl std::fmt::Debug for GrammarVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarVocab")
            .field("n_vocab", &self.n_vocab)
            .finish()
    }
}

/// Most Earley items one step of a grammar may hold: llguidance's default
/// (50 000) is too few for llama.cpp's character-level grammars on a
/// large vocabulary.
const STEP_MAX_ITEMS: usize = 1_000_000;

impl GrammarVocab {
    /// Indexes every token's bytes; control tokens are marked as
    /// llguidance expects (their text after a 0xFF byte), and every
    /// end-of-generation token may end a finished grammar.
    pub fn new(tokenizer: &Tokenizer) -> Result<GrammarVocab> {
        let n = tokenizer.n_vocab();
        let mut words = Vec::with_capacity(n);
        let mut eog = Vec::new();
        for id in 0..n as i32 {
            let plain = tokenizer.piece(id, false)?;
            words.push(if plain.is_empty() {
                let special = tokenizer.piece(id, true)?;
                if special.is_empty() {
                    Vec::new()
                } else {
                    [&[0xFF][..], special].concat()
                }
            } else {
                plain.to_vec()
            });
            if tokenizer.is_eog(id) {
                eog.push(id as u32);
            }
        }
        let eos = tokenizer
            .vocab()
            .special
            .eot
            .or(tokenizer.vocab().special.eos)
            .map(|t| t as u32)
            .or_else(|| eog.first().copied())
            .ok_or_else(|| {
                Error::InvalidArgument(
                    "grammar: the vocabulary has no end-of-generation token to end a grammar"
                        .into(),
                )
            })?;
        if eog.is_empty() {
            eog.push(eos);
        }
        let trie = TokTrie::from(&TokRxInfo::new(n as u32, eos), &words).with_eos_tokens(&eog);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new(
            &env,
            InferenceCapabilities::default(),
            &llguidance::earley::SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| Error::InvalidArgument(format!("grammar: {e}")))?;
        factory.set_stderr_log_level(0);
        factory.limits_mut().step_max_items = STEP_MAX_ITEMS;
        Ok(GrammarVocab {
            factory: Arc::new(factory),
            n_vocab: n,
        })
    }

    /// Compiles a grammar: an error (naming what is wrong) if it does not
    /// parse, uses what llguidance cannot take, or allows nothing.
    pub fn compile(&self, source: &GrammarSource) -> Result<Grammar> {
        let top = match source {
            GrammarSource::Gbnf(text) if text.trim_start().starts_with("%llguidance") => {
                TopLevelGrammar::from_lark(text.clone())
            }
            GrammarSource::Gbnf(text) => TopLevelGrammar::from_lark(gbnf_to_lark(text)?),
            GrammarSource::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            GrammarSource::JsonSchema(schema) => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(Error::InvalidArgument(
                        "JSON schema: a schema is a JSON object".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(schema.clone())
            }
            GrammarSource::Regex(rx) => TopLevelGrammar::from_regex(rx),
        };
        let what = match source {
            GrammarSource::JsonSchema(_) => "JSON schema",
            GrammarSource::Regex(_) => "regex",
            _ => "grammar",
        };
        let parser = self
            .factory
            .create_parser(top)
            .map_err(|e| Error::InvalidArgument(format!("{what}: {e}")))?;
        let mut matcher = Matcher::new(Ok(parser));
        // the first mask now: a grammar that allows nothing fails here
        let mask = matcher
            .compute_mask_or_eos()
            .map_err(|e| Error::InvalidArgument(format!("{what}: {e}")))?;
        if mask.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "{what}: no token of the vocabulary can start it"
            )));
        }
        Ok(Grammar {
            matcher,
            mask: Some(mask),
            n_vocab: self.n_vocab,
            what,
        })
    }
}

/// A compiled grammar following one output: the tokens it allows next,
/// and the tokens taken so far.
pub struct Grammar {
    matcher: Matcher,
    /// The allowed tokens for the next position, once computed.
    mask: Option<SimpleVob>,
    n_vocab: usize,
    what: &'static str,
}

impl Grammar {
    fn mask(&mut self) -> Result<&SimpleVob> {
        let mask = match self.mask.take() {
            Some(m) => m,
            None => self.matcher.compute_mask_or_eos().map_err(|e| {
                Error::InvalidArgument(format!("{}: computing the next tokens: {e}", self.what))
            })?,
        };
        Ok(self.mask.insert(mask))
    }
}

impl Constraint for Grammar {
    fn apply(&mut self, candidates: &mut Candidates) -> Result<()> {
        let n = self.n_vocab;
        let mask = self.mask()?;
        for t in &mut candidates.data {
            let allowed = (t.id as usize) < n && mask.is_allowed(t.id as u32);
            if !allowed {
                t.logit = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    fn accept(&mut self, token: i32) -> Result<()> {
        self.mask = None;
        if self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher.consume_token(token as u32).map_err(|e| {
            Error::InvalidArgument(format!(
                "{}: token {token} does not follow it: {e}",
                self.what
            ))
        })
    }

    fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    fn reset(&mut self) {
        self.mask = None;
        let _ = self.matcher.reset();
    }
}
