//! DRY ("don't repeat yourself", `llama_sampler_init_dry`): penalises the
//! tokens that would extend a sequence already repeated in the recent
//! context, growing with its length; sequence breakers (newlines, colons,
//! quotes, by default) end the repetitions it looks at.

use std::collections::HashMap;

use ggraph_core::error::Result;

use super::candidates::Candidates;
use super::sampler::Sampler;
use super::window::TokenWindow;
use crate::tokenizer::Tokenizer;

/// A breaker longer than this is cut to it (llama.cpp's `MAX_CHAR_LEN`).
const MAX_BREAKER_BYTES: usize = 40;
/// Tokens kept of a breaker's tail (llama.cpp's `MAX_SEQ_LEN`).
const MAX_TAIL_TOKENS: usize = 20;

/// The DRY sampler.
#[derive(Clone, Debug)]
pub struct Dry {
    multiplier: f32,
    base: f32,
    allowed_length: usize,
    /// Head token of a breaker, and the tokens that must follow it
    /// (empty: the token alone breaks).
    breakers: HashMap<i32, Vec<Vec<i32>>>,
    window: TokenWindow,
}

impl Dry {
    /// DRY over the last `last_n` tokens; each breaker string is found in
    /// the vocabulary as llama.cpp does (every token that contains it, or
    /// whose end starts it, with the rest tokenised as its tail).
    pub fn new(
        multiplier: f32,
        base: f32,
        allowed_length: usize,
        last_n: usize,
        breakers: &[String],
        tokenizer: &Tokenizer,
    ) -> Result<Dry> {
        let mut table: HashMap<i32, Vec<Vec<i32>>> = HashMap::new();
        for b in breakers {
            let bytes = b.as_bytes();
            if bytes.is_empty() {
                continue;
            }
            let bytes = &bytes[..bytes.len().min(MAX_BREAKER_BYTES)];
            overlapping_sequences(tokenizer, bytes, &mut table)?;
        }
        Ok(Dry {
            multiplier,
            base,
            allowed_length,
            breakers: table,
            window: TokenWindow::new(last_n),
        })
    }

    /// Whether the parameters change nothing.
    pub fn is_disabled(multiplier: f32, base: f32, last_n: usize) -> bool {
        multiplier == 0.0 || base < 1.0 || last_n == 0
    }

    /// The longest repetition each token would extend, as llama.cpp's
    /// steps 1 to 3 find it (breakers limit it; the reverse Z-algorithm
    /// finds the suffixes that appear earlier).
    fn extending(&self) -> HashMap<i32, usize> {
        let mut out = HashMap::new();
        let n = self.window.len();
        let allowed = self.allowed_length;
        if n <= allowed {
            return out;
        }
        let rat = |i: usize| self.window.back(i);
        // 1. the nearest breaker limits how far back a repetition runs
        let mut limit = n;
        for i in 0..n {
            let Some(tails) = self.breakers.get(&rat(i)) else {
                continue;
            };
            let longest = tails
                .iter()
                .filter(|t| t.len() <= i)
                .filter(|t| t.iter().enumerate().all(|(o, &tok)| tok == rat(i - o - 1)))
                .map(Vec::len)
                .max();
            if let Some(len) = longest {
                limit = i - len;
                break;
            }
        }
        if limit < allowed {
            return out;
        }
        // 2. repeat[last - k]: how many tokens before position k (from
        // the end) equal the context's last ones
        let last = n - 1;
        let mut repeat = vec![0usize; n];
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..n {
            if k > rt {
                let mut m = 0;
                while m + k < n && rat(m) == rat(m + k) {
                    m += 1;
                }
                repeat[last - k] = m.min(limit);
                if m > 0 {
                    lt = k;
                    rt = k + m - 1;
                }
            } else {
                let p = k - lt;
                let right = rt - k + 1;
                if repeat[last - p] < right {
                    repeat[last - k] = repeat[last - p].min(limit);
                } else {
                    let mut i = rt + 1;
                    while i < n && rat(i) == rat(i - k) {
                        i += 1;
                    }
                    repeat[last - k] = (i - k).min(limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }
        // 3. the token after each repetition would extend it
        for (i, &len) in repeat.iter().enumerate().take(n - 1) {
            if len >= allowed {
                let token = rat(n - 2 - i);
                let e = out.entry(token).or_insert(len);
                if *e < len {
                    *e = len;
                }
            }
        }
        out
    }
}

impl Sampler for Dry {
    fn name(&self) -> &'static str {
        "dry"
    }
    fn accept(&mut self, token: i32) {
        if !Dry::is_disabled(self.multiplier, self.base, self.window.capacity()) {
            self.window.push(token);
        }
    }
    fn apply(&mut self, c: &mut Candidates) {
        if Dry::is_disabled(self.multiplier, self.base, self.window.capacity()) {
            return;
        }
        let extending = self.extending();
        if extending.is_empty() {
            return;
        }
        const FLOAT_MAX_LOG: f32 = 88.722_84;
        let max_exponent = if self.base > 1.000_001 {
            (FLOAT_MAX_LOG / self.base.ln()) as i64
        } else {
            0
        };
        for t in &mut c.data {
            let Some(&len) = extending.get(&t.id) else {
                continue;
            };
            let breaks_alone = self
                .breakers
                .get(&t.id)
                .is_some_and(|tails| tails.iter().any(Vec::is_empty));
            if breaks_alone {
                continue;
            }
            let mut exponent = len as i64 - self.allowed_length as i64;
            if max_exponent > 0 && exponent > max_exponent {
                exponent = max_exponent;
            }
            let penalty =
                (self.multiplier as f64 * (self.base as f64).powf(exponent as f64)) as f32;
            t.logit -= penalty;
        }
        c.sorted = false;
    }
    fn reset(&mut self) {
        self.window.clear();
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// llama.cpp's `get_overlapping_token_sequences`: every token whose text
/// holds `breaker` breaks alone; a token whose text ends with a head of
/// `breaker` breaks when the rest's tokens follow it.
fn overlapping_sequences(
    tokenizer: &Tokenizer,
    breaker: &[u8],
    table: &mut HashMap<i32, Vec<Vec<i32>>>,
) -> Result<()> {
    for id in 0..tokenizer.n_vocab() as i32 {
        let word = tokenizer.decode_bytes(&[id], false, true)?;
        if contains(&word, breaker) {
            table.entry(id).or_default().push(Vec::new());
            continue;
        }
        for pos in (0..word.len()).filter(|&p| word[p] == breaker[0]) {
            let mut i = 1;
            let mut matched = true;
            while i < breaker.len() && pos + i < word.len() {
                if word[pos + i] != breaker[i] {
                    matched = false;
                    break;
                }
                i += 1;
            }
            if !matched {
                continue;
            }
            let rest = String::from_utf8_lossy(&breaker[i..]);
            let mut tail = tokenizer.encode(&rest, false, false)?;
            tail.truncate(MAX_TAIL_TOKENS);
            let tails = table.entry(id).or_default();
            if !tails.contains(&tail) {
                tails.push(tail);
            }
        }
    }
    Ok(())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w == needle)
}
