//! Pooling: the last layer's token rows made into one vector per
//! sequence, as llama.cpp's `build_pooling` makes them (mean, the first
//! or the last token, or a reranker's classifier on the first), and the
//! inputs it reads, filled from the ubatch's tokens.
//!
//! A ubatch's sequences are pooled in ascending id order (llama.cpp's
//! `seq_id_unq`): row `k` of the result belongs to the `k`-th smallest id
//! among its tokens.

use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::{GraphBuilder, TensorId, UnaryOp};

use super::config::ModelConfig;
use super::pooling_type::Pooling;
use super::weights::Tensors;
use crate::kv::{SeqId, TokenPlace};

/// What a graph pools: how, over how many sequences of the ubatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolShape {
    /// The pooling (not [`Pooling::None`]).
    pub pooling: Pooling,
    /// Sequences among the ubatch's tokens.
    pub n_seqs: usize,
}

/// The inputs a pooled graph reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolingInputs {
    /// F32 `[n_tokens, n_seqs]`: each sequence's weight on each token (1
    /// over its token count, 0 for the others), for mean pooling.
    pub mean: Option<TensorId>,
    /// I32 `[n_seqs]`: the row each sequence takes (first, last, rank).
    pub rows: Option<TensorId>,
}

/// The rows `embd` `[n_embd, n_tokens]` pooled per sequence:
/// `[n_embd, n_seqs]`, or a reranker's `[n_cls_out, n_seqs]` scores.
pub fn pool(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    embd: TensorId,
    shape: PoolShape,
) -> Result<(TensorId, PoolingInputs)> {
    let n_tokens = b.tensor(embd)?.ne[1];
    let mut inputs = PoolingInputs::default();
    let mut cur = match shape.pooling.picks(c.causal) {
        Some(_) => {
            let rows = b.input("inp_cls", DType::I32, &[shape.n_seqs])?;
            inputs.rows = Some(rows);
            b.get_rows(embd, rows)?
        }
        None if shape.pooling == Pooling::Mean => {
            let mean = b.input("inp_mean", DType::F32, &[n_tokens, shape.n_seqs])?;
            inputs.mean = Some(mean);
            let by_token = b.transpose(embd)?;
            let by_token = b.cont(by_token)?;
            b.mul_mat(by_token, mean)?
        }
        None => {
            return Err(Error::InvalidArgument(
                "pool: no pooling to build (Pooling::None keeps every row)".into(),
            ));
        }
    };
    if shape.pooling == Pooling::Rank {
        cur = classifier(b, c, weights, cur)?;
    }
    b.set_name(cur, "result_embd_pooled")?;
    Ok((cur, inputs))
}

/// sentence-transformers' dense projections after pooling (llama.cpp's
/// `build_dense_out`): `dense_2`, then `dense_3` back to the model's
/// width.
pub fn dense_modules(
    b: &mut GraphBuilder,
    weights: &mut Tensors<'_>,
    x: TensorId,
) -> Result<TensorId> {
    let d2 = weights.req(b, "dense_2.weight")?;
    let x = b.mul_mat(d2, x)?;
    let d3 = weights.req(b, "dense_3.weight")?;
    let x = b.mul_mat(d3, x)?;
    b.set_name(x, "result_embd_pooled")?;
    Ok(x)
}

/// A reranker's head on the picked rows: `cls` (tanh), its norm, then
/// `cls.output`; a causal model's scores go through a softmax (Qwen3's
/// rerankers).
fn classifier(
    b: &mut GraphBuilder,
    c: &ModelConfig,
    weights: &mut Tensors<'_>,
    mut cur: TensorId,
) -> Result<TensorId> {
    let dense = weights.opt(b, "cls.weight")?;
    let out = weights.opt(b, "cls.output.weight")?;
    if dense.is_none() && out.is_none() {
        return Err(Error::InvalidArgument(format!(
            "rank pooling needs a classifier head ('cls.weight' or 'cls.output.weight'); this {} \
             model has none",
            c.arch.name
        )));
    }
    if let Some(w) = dense {
        cur = b.mul_mat(w, cur)?;
        if let Some(bias) = weights.opt(b, "cls.bias")? {
            cur = b.add(cur, bias)?;
        }
        cur = b.unary(UnaryOp::Tanh, cur)?;
        if let Some(norm) = weights.opt(b, "cls.norm.weight")? {
            cur = b.norm(cur, c.norm_eps)?;
            cur = b.mul(cur, norm)?;
        }
    }
    if let Some(w) = out {
        cur = b.mul_mat(w, cur)?;
        if let Some(bias) = weights.opt(b, "cls.output.bias")? {
            cur = b.add(cur, bias)?;
        }
    }
    if c.causal {
        cur = b.soft_max(cur)?;
    }
    Ok(cur)
}

/// The sequences of a ubatch's tokens, in pooling order (ascending ids).
pub fn pooled_seqs(places: &[TokenPlace]) -> Vec<SeqId> {
    let all = places.iter().fold(0u64, |acc, p| acc | p.seqs);
    (0..64).filter(|s| all >> s & 1 == 1).collect()
}

/// The mean-pooling weights of a ubatch's tokens over its sequences
/// `seqs` ([`pooled_seqs`]): row-major `[n_seqs][n_tokens]`, each
/// sequence's row 1 / its token count on its tokens.
pub fn mean_weights(places: &[TokenPlace], seqs: &[SeqId]) -> Vec<f32> {
    let n = places.len();
    let mut w = vec![0.0f32; n * seqs.len()];
    for (k, &s) in seqs.iter().enumerate() {
        let count = places.iter().filter(|p| p.seqs >> s & 1 == 1).count();
        if count == 0 {
            continue;
        }
        let div = 1.0 / count as f32;
        for (i, p) in places.iter().enumerate() {
            if p.seqs >> s & 1 == 1 {
                w[k * n + i] = div;
            }
        }
    }
    w
}

/// The row each sequence of `seqs` takes under `pooling`: its first
/// position's (the earliest in the ubatch on a tie) or its last
/// position's (the latest on a tie), as llama.cpp picks them.
pub fn picked_rows(
    places: &[TokenPlace],
    seqs: &[SeqId],
    pooling: Pooling,
    causal: bool,
) -> Vec<i32> {
    let last = pooling.picks(causal).unwrap_or(false);
    seqs.iter()
        .map(|&s| {
            let mut best: Option<(i32, usize)> = None;
            for (i, p) in places.iter().enumerate() {
                if p.seqs >> s & 1 == 0 {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some((pos, _)) if last => p.pos >= pos,
                    Some((pos, _)) => p.pos < pos,
                };
                if better {
                    best = Some((p.pos, i));
                }
            }
            best.map_or(0, |(_, i)| i as i32)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(pos: i32, seqs: u64) -> TokenPlace {
        TokenPlace { pos, seqs }
    }

    #[test]
    fn sequences_pool_in_ascending_order_with_their_own_weights_and_rows() {
        // sequence 3: positions 0, 1, 2; sequence 1: positions 0, 1
        let places = [
            place(0, 1 << 3),
            place(1, 1 << 3),
            place(0, 1 << 1),
            place(2, 1 << 3),
            place(1, 1 << 1),
        ];
        let seqs = pooled_seqs(&places);
        assert_eq!(seqs, vec![1, 3]);
        let w = mean_weights(&places, &seqs);
        assert_eq!(&w[..5], &[0.0, 0.0, 0.5, 0.0, 0.5]);
        let third = 1.0 / 3.0;
        assert_eq!(&w[5..], &[third, third, 0.0, third, 0.0]);
        assert_eq!(picked_rows(&places, &seqs, Pooling::Cls, false), vec![2, 0]);
        assert_eq!(
            picked_rows(&places, &seqs, Pooling::Last, false),
            vec![4, 3]
        );
        // a causal reranker scores the last token, a bidirectional one the first
        assert_eq!(picked_rows(&places, &seqs, Pooling::Rank, true), vec![4, 3]);
        assert_eq!(
            picked_rows(&places, &seqs, Pooling::Rank, false),
            vec![2, 0]
        );
    }
}
