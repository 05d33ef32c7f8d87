//! The generation loop: a prompt decoded in pieces into one sequence,
//! then tokens sampled one at a time ([`TokenSampler`]) and decoded back,
//! text streamed whole characters at a time, stopping at an
//! end-of-generation token, a stop string, the token budget or a full
//! context, and recovering from a device that lost its memory. Runners
//! (the `llama` tool, a server's slot, a user's own) drive it with
//! [`generate`] and a few [`Hooks`].

use std::time::{Duration, Instant};

use ggraph_core::error::Error;

use crate::batch::Batch;
use crate::context::{Context, DecodeError, Recovery};
use crate::kv::SeqId;
use crate::sampling::TokenSampler;
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// Why a generation ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StopReason {
    /// It generated the tokens asked for.
    #[default]
    Length,
    /// The model chose an end-of-generation token (not in the output).
    EndOfGeneration,
    /// The text reached a stop string (not in the output).
    StopString(String),
    /// The context had no cell for the next token: what was generated
    /// stands (llama.cpp stops so without `--context-shift`).
    ContextFull,
    /// A hook asked to stop.
    Hook,
}

/// What a generation did and how fast.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    /// The prompt's token ids, as decoded.
    pub prompt: Vec<i32>,
    /// The tokens chosen, in order (the first from the prompt's logits),
    /// without an end-of-generation token that ended it.
    pub generated: Vec<i32>,
    /// The text of the generated tokens, up to a stop string (with a
    /// tokenizer).
    pub text: String,
    /// Why it ended.
    pub stop: StopReason,
    /// Seconds spent decoding the prompt.
    pub prompt_seconds: f64,
    /// Seconds spent generating, from the first token chosen to the last
    /// decoded.
    pub gen_seconds: f64,
}

impl Generation {
    /// Prompt tokens decoded per second (llama-bench's `pp`).
    pub fn prompt_tokens_per_s(&self) -> f64 {
        self.prompt.len() as f64 / self.prompt_seconds.max(1e-9)
    }

    /// Tokens decoded per second while generating: the first generated
    /// token comes from the prompt's logits, so it is not counted.
    pub fn gen_tokens_per_s(&self) -> f64 {
        self.generated.len().saturating_sub(1) as f64 / self.gen_seconds.max(1e-9)
    }

    /// Whether it stopped because the context was full.
    pub fn context_full(&self) -> bool {
        self.stop == StopReason::ContextFull
    }
}

/// How a generation meets a device that lost its memory mid-run (a remote
/// server that restarted): wait up to `within` for it, restore what it
/// lost ([`Context::recover`]), decode again the tokens a lost KV cache
/// held, and go on. The default, no time, ends the run with the error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retry {
    /// How long to wait for the device, from the failure.
    pub within: Duration,
}

/// One recovery during a generation, as [`Hooks::on_recover`] sees it.
#[derive(Clone, Debug)]
pub struct Recovered {
    /// The error that stopped the decode.
    pub error: String,
    /// What [`Context::recover`] restored.
    pub recovery: Recovery,
    /// Tokens of this generation the lost cache held: they are decoded
    /// again.
    pub replay: usize,
    /// Time from the failure to the recovery.
    pub waited: Duration,
}

/// One generated token, as [`Hooks::on_token`] sees it.
#[derive(Clone, Debug)]
pub struct Token<'a> {
    /// Its id.
    pub id: i32,
    /// The text it completes, ready to show: whole characters, none of a
    /// stop string (possibly empty; held text comes with a later token).
    pub text: &'a str,
    /// The most probable candidates after the chain, `(id, p)`, as many
    /// as [`Request::n_probs`] asks.
    pub probs: &'a [(i32, f32)],
}

/// What a generation calls as it goes; [`Hooks::default`] calls nothing.
pub struct Hooks<'a> {
    /// `(done, total)` prompt tokens, before the first piece and after
    /// each.
    pub on_prompt: Box<dyn FnMut(u64, u64) + 'a>,
    /// Each token as it is chosen: `false` stops the generation there,
    /// without that token. At the end, text still held comes with id -1.
    pub on_token: Box<dyn FnMut(&Token<'_>) -> bool + 'a>,
    /// Each recovery, before the tokens are decoded again.
    pub on_recover: Box<dyn FnMut(&Recovered) + 'a>,
}

impl Default for Hooks<'_> {
    fn default() -> Self {
        Hooks {
            on_prompt: Box::new(|_, _| {}),
            on_token: Box::new(|_| true),
            on_recover: Box::new(|_| {}),
        }
    }
}

/// What to generate, beyond the prompt and the sampler.
#[derive(Clone, Debug)]
pub struct Request {
    /// Tokens to generate at most.
    pub n_predict: usize,
    /// The sequence to decode into (its cache may hold earlier tokens:
    /// the prompt continues them).
    pub seq: SeqId,
    /// Prompt tokens per decode call (0: the context's n_ubatch, one graph
    /// each, so progress can be shown).
    pub piece: usize,
    /// Strings that end the generation when the text reaches them.
    pub stop: Vec<String>,
    /// Go on past end-of-generation tokens (llama.cpp's `--ignore-eos`).
    pub ignore_eos: bool,
    /// Candidates' probabilities to report with each token.
    pub n_probs: usize,
    /// Whether and how long to wait for a device that lost its memory.
    pub retry: Retry,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            n_predict: 32,
            seq: 0,
            piece: 0,
            stop: Vec::new(),
            ignore_eos: false,
            n_probs: 0,
            retry: Retry::default(),
        }
    }
}

/// Decodes `prompt` into sequence `req.seq`, then samples and decodes up
/// to `req.n_predict` tokens. The sampler takes the prompt's tokens first
/// (its penalties see them, as llama.cpp's tools do). With a `tokenizer`,
/// end-of-generation tokens stop it (unless `req.ignore_eos`), the text
/// streams through [`Hooks::on_token`] and stop strings end it.
pub fn generate(
    ctx: &mut Context,
    prompt: &[i32],
    sampler: &mut TokenSampler,
    tokenizer: Option<&Tokenizer>,
    req: &Request,
    mut hooks: Hooks<'_>,
) -> Result<Generation, DecodeError> {
    if prompt.is_empty() {
        return Err(invalid("the prompt is empty".into()));
    }
    let arch = ctx.model().config.arch;
    if arch.embeddings_only || ctx.pooling().pools() {
        return Err(invalid(format!(
            "a {} context computes embeddings, not logits: nothing to sample a token from \
             (embed with ggraph_model::embedding, or `ggraph embed`)",
            arch.name
        )));
    }
    let seq = req.seq;
    let piece = if req.piece == 0 {
        ctx.params.n_ubatch
    } else {
        req.piece
    }
    .max(1);
    let mut looper = Looper {
        seq,
        before: held(ctx, seq, 0),
        piece,
        retry: req.retry,
        on_recover: &mut *hooks.on_recover,
    };
    for &t in prompt {
        sampler
            .accept(t, false)
            .map_err(DecodeError::InvalidBatch)?;
    }
    let mut tokens = Vec::with_capacity(prompt.len() + req.n_predict);
    let start = Instant::now();
    let total = prompt.len() as u64;
    (hooks.on_prompt)(0, total);
    for chunk in prompt.chunks(piece) {
        tokens.extend_from_slice(chunk);
        looper.decode_tail(ctx, &tokens, chunk.len())?;
        (hooks.on_prompt)(tokens.len() as u64, total);
    }
    let prompt_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut out = Generation {
        prompt: prompt.to_vec(),
        prompt_seconds,
        ..Generation::default()
    };
    let mut text = TextStream::new();
    for i in 0..req.n_predict {
        let id = sampler
            .sample(ctx.logits())
            .map_err(DecodeError::InvalidBatch)?;
        if !req.ignore_eos && tokenizer.is_some_and(|t| t.is_eog(id)) {
            out.stop = StopReason::EndOfGeneration;
            break;
        }
        sampler
            .accept(id, true)
            .map_err(DecodeError::InvalidBatch)?;
        let probs = sampler.top_probs(req.n_probs);
        let piece = tokenizer.map_or(&[][..], |t| t.piece(id, false).unwrap_or(&[]));
        let (shown, stop) = text.push(piece, &req.stop);
        if !(hooks.on_token)(&Token {
            id,
            text: &shown,
            probs: &probs,
        }) {
            out.stop = StopReason::Hook;
            break;
        }
        out.generated.push(id);
        if let Some(s) = stop {
            out.stop = StopReason::StopString(s);
            break;
        }
        if i + 1 == req.n_predict {
            break;
        }
        tokens.push(id);
        match looper.decode_tail(ctx, &tokens, 1) {
            Ok(()) => {}
            // no cell for the next token: what was generated stands
            Err(DecodeError::CacheFull { .. }) => {
                out.stop = StopReason::ContextFull;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    if out.stop == StopReason::Length || out.stop == StopReason::ContextFull {
        let rest = text.finish();
        if !rest.is_empty() {
            (hooks.on_token)(&Token {
                id: -1,
                text: &rest,
                probs: &[],
            });
        }
    }
    out.text = text.shown().to_string();
    out.gen_seconds = start.elapsed().as_secs_f64();
    Ok(out)
}

fn invalid(msg: String) -> DecodeError {
    DecodeError::InvalidBatch(Error::InvalidArgument(msg))
}

/// Tokens sequence `seq` holds past its first `before`.
fn held(ctx: &Context, seq: SeqId, before: usize) -> usize {
    ctx.seq_pos_max(seq)
        .map_or(0, |p| (p as usize + 1).saturating_sub(before))
}

/// The decode side of a generation: pieces, and recovery.
struct Looper<'h> {
    seq: SeqId,
    /// Tokens the sequence held before this generation.
    before: usize,
    piece: usize,
    retry: Retry,
    on_recover: &'h mut dyn FnMut(&Recovered),
}

impl Looper<'_> {
    /// Decodes the last `new` of `tokens` in pieces; recovers from lost
    /// memory as `retry` allows, decoding again what a lost cache held.
    fn decode_tail(
        &mut self,
        ctx: &mut Context,
        tokens: &[i32],
        new: usize,
    ) -> Result<(), DecodeError> {
        let before = self.before;
        let mut from = tokens.len().saturating_sub(new);
        let mut failed_at = None;
        loop {
            let err = match tokens[from..]
                .chunks(self.piece)
                .try_for_each(|c| ctx.decode(&Batch::of_sequence(c, self.seq)))
            {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let lost = matches!(err, DecodeError::CacheLost(_)) || ctx.memory_lost();
            if self.retry.within.is_zero() || !lost {
                return Err(err);
            }
            let since = *failed_at.get_or_insert_with(Instant::now);
            let replay = held(ctx, self.seq, before);
            let recovery = wait_and_recover(ctx, since, self.retry.within)?;
            if recovery.cache_cleared && before > 0 {
                return Err(DecodeError::Compute(Error::InvalidArgument(format!(
                    "{err}; the cache was lost with the {before} tokens the sequence held \
                     before this generation, which it cannot decode again"
                ))));
            }
            let replay = if recovery.cache_cleared { replay } else { 0 };
            (self.on_recover)(&Recovered {
                error: err.to_string(),
                recovery,
                replay,
                waited: since.elapsed(),
            });
            // a failed ubatch is rolled back and a lost cache emptied: what
            // the cache holds now is what went through
            from = held(ctx, self.seq, before).min(tokens.len());
        }
    }
}

/// Calls [`Context::recover`] until it succeeds or `within` has passed
/// since `since`, pausing longer each time (0.1 s to 2 s).
fn wait_and_recover(
    ctx: &mut Context,
    since: Instant,
    within: Duration,
) -> Result<Recovery, DecodeError> {
    let mut pause = Duration::from_millis(100);
    loop {
        match ctx.recover() {
            Ok(r) => return Ok(r),
            Err(e) => {
                let left = within.saturating_sub(since.elapsed());
                if left.is_zero() {
                    return Err(DecodeError::Compute(e));
                }
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Generated text, released in whole characters and held back while it
/// may be the start of a stop string: what a runner shows of each token.
#[derive(Debug, Default)]
pub struct TextStream {
    decoder: StreamDecoder,
    /// Decoded text not yet shown (it may begin a stop string).
    pending: String,
    /// Everything shown.
    shown: String,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// The text a token's `piece` (its bytes) lets through, and the first
    /// of `stop` it completed (the text before it is let through, nothing
    /// after).
    pub fn push(&mut self, piece: &[u8], stop: &[String]) -> (String, Option<String>) {
        let text = self.decoder.push(piece);
        self.pending.push_str(&text);
        // the earliest stop string in the text, if any
        let found = stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.pending.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, s)) = found {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            self.shown.push_str(&out);
            return (out, Some(s.clone()));
        }
        // hold the longest tail that begins a stop string
        let keep = stop
            .iter()
            .map(|s| partial_suffix(&self.pending, s))
            .max()
            .unwrap_or(0);
        let cut = self.pending.len() - keep;
        let out: String = self.pending.drain(..cut).collect();
        self.shown.push_str(&out);
        (out, None)
    }

    /// Everything let through so far.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// What is still held, at the end.
    pub fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.pending);
        out.push_str(&self.decoder.finish());
        self.shown.push_str(&out);
        out
    }
}

/// The length of the longest end of `text` that is a proper start of
/// `stop` (on a character boundary).
fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && stop.is_char_boundary(n)
                && text.ends_with(&stop[..n])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_stop_string_is_held_back() {
        assert_eq!(partial_suffix("hello wor", "world"), 3);
        assert_eq!(partial_suffix("hello", "world"), 0);
        assert_eq!(partial_suffix("abc", "c"), 0);
        assert_eq!(partial_suffix("héé", "é!"), 2);
    }
}
