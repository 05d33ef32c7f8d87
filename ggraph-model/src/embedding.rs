//! Embeddings of many token sequences, as llama.cpp's `llama-embedding`
//! and `llama-server` compute them: the sequences packed into batches (up
//! to `n_batch` tokens and `n_seq_max` sequences each, a sequence never
//! cut), each batch decoded afresh, and every sequence's pooled vector
//! (or with pooling none each token's row) normalised as
//! `common_embd_normalize` does. Runners (`ggraph embed`, the server's
//! `/v1/embeddings` and `/v1/rerank`) drive it.

use ggraph_core::error::Error;

use crate::arch::Pooling;
use crate::batch::Batch;
use crate::context::{Context, DecodeError};

/// How a vector is scaled (llama.cpp's `--embd-normalize`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Normalize {
    /// As computed (-1).
    None,
    /// Into the int16 range: the largest magnitude becomes 32760 (0).
    MaxAbs,
    /// To unit length under the p-norm (2: euclidean, the default; any
    /// other positive p).
    PNorm(i32),
}

impl Normalize {
    /// llama.cpp's number for it: -1 none, 0 max-abs, p > 0 the p-norm.
    pub fn from_number(n: i32) -> Option<Normalize> {
        match n {
            -1 => Some(Normalize::None),
            0 => Some(Normalize::MaxAbs),
            p if p > 0 => Some(Normalize::PNorm(p)),
            _ => None,
        }
    }

    /// `v` scaled, in llama.cpp's arithmetic (the sum in f64, the factor
    /// rounded to f32).
    pub fn apply(self, v: &[f32]) -> Vec<f32> {
        let sum: f64 = match self {
            Normalize::None => 1.0,
            Normalize::MaxAbs => v.iter().fold(0.0f64, |m, x| m.max(f64::from(x.abs()))) / 32760.0,
            Normalize::PNorm(2) => v.iter().map(|x| f64::from(x * x)).sum::<f64>().sqrt(),
            Normalize::PNorm(p) => v
                .iter()
                .map(|x| f64::from(x.abs()).powf(f64::from(p)))
                .sum::<f64>()
                .powf(1.0 / f64::from(p)),
        };
        let factor = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
        v.iter().map(|x| x * factor).collect()
    }
}

/// The cosine similarity of two vectors (llama.cpp's
/// `common_embd_similarity_cos`: 1 for two zero vectors, 0 for one).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        ab += f64::from(x * y);
        aa += f64::from(x * x);
        bb += f64::from(y * y);
    }
    match (aa == 0.0, bb == 0.0) {
        (true, true) => 1.0,
        (false, false) => (ab / (aa.sqrt() * bb.sqrt())) as f32,
        _ => 0.0,
    }
}

/// Why sequences got no embeddings.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A sequence has no tokens.
    #[error("input {index} has no tokens")]
    Empty {
        /// Its place among the inputs.
        index: usize,
    },
    /// A sequence is longer than one batch may be.
    #[error(
        "input {index} has {tokens} tokens, more than the {limit} a batch takes (n_batch, \
         and for a model without a cache n_ubatch): raise them, or shorten the input"
    )]
    TooLong {
        /// Its place among the inputs.
        index: usize,
        /// Its tokens.
        tokens: usize,
        /// The most tokens a batch takes.
        limit: usize,
    },
    /// The context was made without embeddings (a decoder's logits only).
    #[error("the context computes no embeddings: make it with ContextParams::embeddings")]
    NoEmbeddings,
    /// A decode failed.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// The embeddings of `inputs` (token ids each), normalised by `norm`: one
/// vector per input with pooling (a reranker's `n_cls_out` scores), or
/// every token's row of every input, in order, with pooling none. The
/// context's cache is emptied before each batch.
pub fn embed(
    ctx: &mut Context,
    inputs: &[Vec<i32>],
    norm: Normalize,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    if !ctx.params.embeddings {
        return Err(EmbedError::NoEmbeddings);
    }
    let limit = max_batch_tokens(ctx);
    for (index, input) in inputs.iter().enumerate() {
        if input.is_empty() {
            return Err(EmbedError::Empty { index });
        }
        if input.len() > limit {
            return Err(EmbedError::TooLong {
                index,
                tokens: input.len(),
                limit,
            });
        }
    }
    let n_seq_max = ctx.params.n_seq_max.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < inputs.len() {
        let (mut end, mut tokens) = (start, 0);
        while end < inputs.len() && end - start < n_seq_max && tokens + inputs[end].len() <= limit {
            tokens += inputs[end].len();
            end += 1;
        }
        out.extend(embed_batch(ctx, &inputs[start..end], norm)?);
        start = end;
    }
    Ok(out)
}

/// The most tokens one batch of sequences may hold, so one input at most.
pub fn max_batch_tokens(ctx: &Context) -> usize {
    let p = &ctx.params;
    match ctx.memory().keeps_nothing() {
        true => p.n_batch.min(p.n_ubatch),
        false => p.n_batch.min(p.n_ctx),
    }
}

/// One batch: input `k` as sequence `k`, every token an output.
fn embed_batch(
    ctx: &mut Context,
    inputs: &[Vec<i32>],
    norm: Normalize,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut batch = Batch::default();
    let (mut positions, mut seqs) = (Vec::new(), Vec::new());
    for (s, input) in inputs.iter().enumerate() {
        batch.tokens.extend_from_slice(input);
        positions.extend(0..input.len() as i32);
        seqs.extend(std::iter::repeat_n(vec![s as u32], input.len()));
    }
    batch.positions = Some(positions);
    batch.seq_ids = Some(seqs);
    let batch = batch.all_outputs();
    ctx.clear_cache();
    ctx.decode(&batch)?;
    let rows: Vec<Vec<f32>> = match ctx.pooling() {
        Pooling::None => {
            let n = ctx.model().config.n_embd;
            ctx.embeddings().chunks(n).map(|r| norm.apply(r)).collect()
        }
        _ => (0..inputs.len() as u32)
            .map(|s| {
                ctx.embeddings_seq(s).map(|v| norm.apply(v)).ok_or_else(|| {
                    DecodeError::Compute(Error::InvalidArgument(format!(
                        "sequence {s} has no pooled embedding"
                    )))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisations_are_llama_cpps() {
        let v = [3.0, -4.0];
        assert_eq!(Normalize::PNorm(2).apply(&v), [0.6, -0.8]);
        assert_eq!(Normalize::None.apply(&v), v);
        let m = Normalize::MaxAbs.apply(&v);
        assert_eq!(m[1], -32760.0);
        let taxicab = Normalize::PNorm(1).apply(&v);
        assert!((taxicab[0] - 3.0 / 7.0).abs() < 1e-7);
        assert_eq!(Normalize::PNorm(2).apply(&[0.0, 0.0]), [0.0, 0.0]);
        assert_eq!(Normalize::from_number(-2), None);
        assert_eq!(Normalize::from_number(2), Some(Normalize::PNorm(2)));
    }

    #[test]
    fn cosine_is_llama_cpps() {
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), 0.0);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-7);
        assert_eq!(cosine(&[0.0], &[0.0]), 1.0);
        assert_eq!(cosine(&[0.0], &[1.0]), 0.0);
    }
}
