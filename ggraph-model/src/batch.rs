//! Batches of tokens: what the user gives, sanitised against the cache
//! (positions that continue each sequence, default sequence and outputs),
//! and split into ubatches the graph can take.

use crate::kv::{Cells, SeqId, TokenPlace};
use ggraph_core::error::{Error, Result};

/// Tokens to decode, with optional positions, sequences and output flags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// Token ids, each in `0..n_vocab` (llama.cpp's `llama_batch.token`).
    pub tokens: Vec<i32>,
    /// Per token; default: continue each token's (first) sequence.
    pub positions: Option<Vec<i32>>,
    /// Per token, one or more sequences; default: sequence 0.
    pub seq_ids: Option<Vec<Vec<SeqId>>>,
    /// Per token, whether its logits are wanted; default: the last token.
    pub outputs: Option<Vec<bool>>,
}

impl Batch {
    /// Tokens of sequence 0, continuing it, with the last one's logits.
    pub fn tokens(tokens: &[i32]) -> Batch {
        Batch {
            tokens: tokens.to_vec(),
            ..Batch::default()
        }
    }

    /// Tokens of sequence `seq`, continuing it, with the last one's
    /// logits.
    pub fn of_sequence(tokens: &[i32], seq: SeqId) -> Batch {
        Batch {
            tokens: tokens.to_vec(),
            seq_ids: Some(vec![vec![seq]; tokens.len()]),
            ..Batch::default()
        }
    }

    /// Every token's logits.
    pub fn all_outputs(mut self) -> Batch {
        self.outputs = Some(vec![true; self.tokens.len()]);
        self
    }
}

/// A batch with every field filled in and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct SaneBatch {
    /// Token ids, each within the vocabulary.
    pub tokens: Vec<i32>,
    /// Per token, its position and the set of sequences it belongs to.
    pub places: Vec<TokenPlace>,
    /// Per token, whether its logits are computed.
    pub outputs: Vec<bool>,
}

impl SaneBatch {
    /// Tokens in the batch (at least one after [`sanitize`]).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the batch has no tokens ([`sanitize`] never returns one).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Tokens whose logits are computed: rows of the logits it produces.
    pub fn n_outputs(&self) -> usize {
        self.outputs.iter().filter(|o| **o).count()
    }
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(format!("batch: {msg}"))
}

/// Fills in and checks a batch against the cache's cells and vocabulary.
/// Positions continue each sequence where the cache leaves it; explicit
/// positions must do the same (each sequence's positions in the batch
/// increase by one, starting right after the cache's last).
pub fn sanitize(batch: &Batch, cells: &Cells, n_vocab: usize) -> Result<SaneBatch> {
    let n = batch.tokens.len();
    if n == 0 {
        return Err(bad("no tokens".into()));
    }
    let check_len = |what: &str, len: usize| {
        if len != n {
            Err(bad(format!("{what} has {len} entries for {n} tokens")))
        } else {
            Ok(())
        }
    };
    if let Some(&t) = batch
        .tokens
        .iter()
        .find(|&&t| t < 0 || t as usize >= n_vocab)
    {
        return Err(bad(format!(
            "token {t} is outside the vocabulary of {n_vocab}"
        )));
    }
    let seqs: Vec<u64> = match &batch.seq_ids {
        None => vec![1; n],
        Some(ids) => {
            check_len("seq_ids", ids.len())?;
            ids.iter()
                .enumerate()
                .map(|(i, s)| {
                    if s.is_empty() {
                        return Err(bad(format!("token {i} belongs to no sequence")));
                    }
                    s.iter().try_fold(0u64, |acc, &id| {
                        if (id as usize) < cells.n_seq_max() {
                            Ok(acc | 1 << id)
                        } else {
                            Err(bad(format!(
                                "token {i}: sequence {id} is beyond the {} the cache tracks",
                                cells.n_seq_max()
                            )))
                        }
                    })
                })
                .collect::<Result<_>>()?
        }
    };
    // the next position of each sequence
    let mut next: Vec<Option<i32>> = (0..cells.n_seq_max() as SeqId)
        .map(|s| Some(cells.seq_pos_max(s).map_or(0, |p| p + 1)))
        .collect();
    let first_seq = |m: u64| m.trailing_zeros() as usize;
    let mut positions = Vec::with_capacity(n);
    for i in 0..n {
        let expected = next[first_seq(seqs[i])].expect("every sequence has a next position");
        let pos = match &batch.positions {
            None => expected,
            Some(p) => {
                check_len("positions", p.len())?;
                p[i]
            }
        };
        for s in 0..cells.n_seq_max() {
            if seqs[i] & (1 << s) == 0 {
                continue;
            }
            let want = next[s].expect("set");
            if pos != want {
                return Err(bad(format!(
                    "token {i} of sequence {s} is at position {pos}; the sequence continues at {want}"
                )));
            }
            next[s] = Some(pos + 1);
        }
        positions.push(pos);
    }
    let outputs = match &batch.outputs {
        None => {
            let mut o = vec![false; n];
            o[n - 1] = true;
            o
        }
        Some(o) => {
            check_len("outputs", o.len())?;
            o.clone()
        }
    };
    Ok(SaneBatch {
        tokens: batch.tokens.clone(),
        places: positions
            .into_iter()
            .zip(seqs)
            .map(|(pos, seqs)| TokenPlace { pos, seqs })
            .collect(),
        outputs,
    })
}

/// How a batch is cut into ubatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UbatchSplit {
    /// Consecutive runs of at most n_ubatch tokens.
    Simple,
    /// Each ubatch takes the same number of tokens from every sequence
    /// that still has tokens (for models with per-sequence state).
    Equal,
    /// One sequence at a time.
    Seq,
}

/// Indices into the batch of each ubatch's tokens, in order.
pub fn split(batch: &SaneBatch, n_ubatch: usize, mode: UbatchSplit) -> Result<Vec<Vec<usize>>> {
    if n_ubatch == 0 {
        return Err(bad("n_ubatch must be positive".into()));
    }
    let n = batch.len();
    Ok(match mode {
        UbatchSplit::Simple => (0..n)
            .collect::<Vec<_>>()
            .chunks(n_ubatch)
            .map(|c| c.to_vec())
            .collect(),
        UbatchSplit::Seq | UbatchSplit::Equal => {
            // tokens grouped by their sequence set, in order of first use
            let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
            for (i, p) in batch.places.iter().enumerate() {
                match groups.iter_mut().find(|(s, _)| *s == p.seqs) {
                    Some((_, v)) => v.push(i),
                    None => groups.push((p.seqs, vec![i])),
                }
            }
            if mode == UbatchSplit::Seq {
                groups
                    .iter()
                    .flat_map(|(_, v)| v.chunks(n_ubatch).map(|c| c.to_vec()))
                    .collect()
            } else {
                let mut out = Vec::new();
                let mut cursor = vec![0usize; groups.len()];
                loop {
                    let live: Vec<usize> = (0..groups.len())
                        .filter(|&g| cursor[g] < groups[g].1.len())
                        .collect();
                    if live.is_empty() {
                        break;
                    }
                    let per = (n_ubatch / live.len()).max(1);
                    let take = live
                        .iter()
                        .map(|&g| groups[g].1.len() - cursor[g])
                        .min()
                        .unwrap_or(0)
                        .min(per);
                    let mut ub = Vec::new();
                    for &g in live.iter().take(n_ubatch.max(1)) {
                        ub.extend_from_slice(&groups[g].1[cursor[g]..cursor[g] + take]);
                        cursor[g] += take;
                    }
                    out.push(ub);
                }
                out
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells() -> Cells {
        Cells::new(64, 4).unwrap()
    }

    #[test]
    fn defaults_continue_sequence_zero_and_output_the_last_token() {
        let b = sanitize(&Batch::tokens(&[5, 6, 7]), &cells(), 100).unwrap();
        assert_eq!(
            b.places.iter().map(|p| p.pos).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(b.places.iter().all(|p| p.seqs == 1));
        assert_eq!(b.outputs, [false, false, true]);
    }

    #[test]
    fn positions_continue_each_sequence_from_the_cache() {
        let mut c = cells();
        let s = c.find_slot(2).unwrap();
        c.apply(
            s,
            &[
                TokenPlace { pos: 0, seqs: 2 },
                TokenPlace { pos: 1, seqs: 2 },
            ],
        )
        .unwrap();
        let batch = Batch {
            tokens: vec![1, 2, 3],
            seq_ids: Some(vec![vec![1], vec![0], vec![1]]),
            ..Batch::default()
        };
        let b = sanitize(&batch, &c, 100).unwrap();
        assert_eq!(
            b.places.iter().map(|p| p.pos).collect::<Vec<_>>(),
            [2, 0, 3]
        );
    }

    #[test]
    fn inconsistent_input_is_an_error() {
        let c = cells();
        let cases = [
            Batch::default(),
            Batch::tokens(&[100]),
            Batch {
                tokens: vec![1, 2],
                positions: Some(vec![0, 2]),
                ..Batch::default()
            },
            Batch {
                tokens: vec![1],
                positions: Some(vec![3]),
                ..Batch::default()
            },
            Batch {
                tokens: vec![1, 2],
                seq_ids: Some(vec![vec![0]]),
                ..Batch::default()
            },
            Batch {
                tokens: vec![1],
                seq_ids: Some(vec![vec![9]]),
                ..Batch::default()
            },
            Batch {
                tokens: vec![1],
                seq_ids: Some(vec![vec![]]),
                ..Batch::default()
            },
            Batch {
                tokens: vec![1],
                outputs: Some(vec![true, false]),
                ..Batch::default()
            },
        ];
        for b in cases {
            assert!(sanitize(&b, &c, 100).is_err(), "{b:?}");
        }
    }

    #[test]
    fn splits() {
        let batch = Batch {
            tokens: vec![1; 7],
            seq_ids: Some(vec![
                vec![0],
                vec![1],
                vec![0],
                vec![1],
                vec![0],
                vec![0],
                vec![1],
            ]),
            ..Batch::default()
        };
        let b = sanitize(&batch, &cells(), 10).unwrap();
        assert_eq!(
            split(&b, 3, UbatchSplit::Simple).unwrap(),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
        );
        assert_eq!(
            split(&b, 3, UbatchSplit::Seq).unwrap(),
            vec![vec![0, 2, 4], vec![5], vec![1, 3, 6]]
        );
        let eq = split(&b, 4, UbatchSplit::Equal).unwrap();
        assert_eq!(eq, vec![vec![0, 2, 1, 3], vec![4, 6], vec![5]]);
        let all: usize = eq.iter().map(|u| u.len()).sum();
        assert_eq!(all, 7);
    }
}
