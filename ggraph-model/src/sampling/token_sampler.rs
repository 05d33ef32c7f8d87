//! A sequence's sampler as llama.cpp's tools drive one
//! (`common_sampler`): a chain, and optionally a grammar the output must
//! follow, checked the way llama.cpp checks it.

use ggraph_core::error::{Error, Result};

use super::candidates::Candidates;
use super::chain::SamplerChain;

/// What output must follow: it bans the tokens that would leave it
/// (llama.cpp's grammar sampler; [`super::grammar::Grammar`] is one).
pub trait Constraint: Send {
    /// Sets the logit of every candidate the constraint does not allow
    /// next to minus infinity.
    fn apply(&mut self, candidates: &mut Candidates) -> Result<()>;
    /// Advances past a generated token; an error if it was not allowed.
    fn accept(&mut self, token: i32) -> Result<()>;
    /// Whether the output is complete: only end-of-generation may follow.
    fn is_finished(&self) -> bool;
    /// Back to the start.
    fn reset(&mut self);
}

/// A chain with an optional constraint.
pub struct TokenSampler {
    chain: SamplerChain,
    constraint: Option<Box<dyn Constraint>>,
    candidates: Candidates,
}

impl TokenSampler {
    /// Samples with `chain`, unconstrained.
    pub fn new(chain: SamplerChain) -> TokenSampler {
        TokenSampler {
            chain,
            constraint: None,
            candidates: Candidates::default(),
        }
    }

    /// Samples with `chain`, held to `constraint`.
    pub fn constrained(chain: SamplerChain, constraint: Box<dyn Constraint>) -> TokenSampler {
        TokenSampler {
            constraint: Some(constraint),
            ..TokenSampler::new(chain)
        }
    }

    /// The chain.
    pub fn chain(&self) -> &SamplerChain {
        &self.chain
    }

    /// Whether a constraint holds the output, and it is complete.
    pub fn is_finished(&self) -> bool {
        self.constraint.as_ref().is_some_and(|c| c.is_finished())
    }

    /// The next token from `logits`, not yet accepted. As llama.cpp: the
    /// chain chooses first; a token the constraint does not allow sends
    /// the draw again over the logits the constraint allows.
    pub fn sample(&mut self, logits: &[f32]) -> Result<i32> {
        let c = &mut self.candidates;
        c.fill(logits);
        self.chain.apply(c);
        let first = chosen(c, &self.chain)?;
        let Some(constraint) = &mut self.constraint else {
            return Ok(first);
        };
        let mut single = Candidates {
            data: vec![c.data[c.selected.unwrap_or(0)]],
            sorted: false,
            selected: None,
        };
        single.data[0].logit = 1.0;
        constraint.apply(&mut single)?;
        if single.data[0].logit != f32::NEG_INFINITY {
            return Ok(first);
        }
        c.fill(logits);
        constraint.apply(c)?;
        if c.data.iter().all(|t| t.logit == f32::NEG_INFINITY) {
            return Err(Error::InvalidArgument(
                "the grammar allows no token of the vocabulary here".into(),
            ));
        }
        self.chain.apply(c);
        chosen(c, &self.chain)
    }

    /// Takes a token: a prompt token (`generated` false) reaches the chain
    /// only, a generated one the constraint too.
    pub fn accept(&mut self, token: i32, generated: bool) -> Result<()> {
        if generated && let Some(c) = &mut self.constraint {
            c.accept(token)?;
        }
        self.chain.accept(token);
        Ok(())
    }

    /// The `n` most probable candidates of the last draw after the chain,
    /// `(id, p)`: llama.cpp's `--n-probs`.
    pub fn top_probs(&self, n: usize) -> Vec<(i32, f32)> {
        self.candidates.top_probs(n)
    }

    /// The probability token `id` had in the last draw, after the chain
    /// (0 when the chain had cut it).
    pub fn probability(&self, id: i32) -> f32 {
        self.candidates
            .data
            .iter()
            .find(|t| t.id == id)
            .map_or(0.0, |t| t.p)
    }

    /// Forgets the tokens taken, restarts the random numbers and the
    /// constraint.
    pub fn reset(&mut self) {
        self.chain.reset();
        if let Some(c) = &mut self.constraint {
            c.reset();
        }
    }
}

fn chosen(c: &Candidates, chain: &SamplerChain) -> Result<i32> {
    c.selected_id().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "the sampler chain [{}] chose no token (it must end with dist, greedy or mirostat)",
            chain.names().join(", ")
        ))
    })
}
