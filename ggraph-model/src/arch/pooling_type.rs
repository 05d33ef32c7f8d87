//! llama.cpp's pooling types: how a model's token rows become one vector
//! per sequence (`{arch}.pooling_type`, `--pooling`). The graph that pools
//! is `pooling.rs`.

use ggraph_core::error::{Error, Result};

/// How token rows become a sequence's embedding (llama.cpp's
/// `llama_pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Every token's row, unpooled.
    None,
    /// The mean of the sequence's rows.
    Mean,
    /// The row of the sequence's first position (BERT's `[CLS]`).
    Cls,
    /// The row of the sequence's last position (decoders).
    Last,
    /// A reranker's score: the classifier head on the first row (the
    /// last for a causal model).
    Rank,
}

impl Pooling {
    /// Every pooling, in llama.cpp's numbering from 0.
    pub const ALL: [Pooling; 5] = [
        Pooling::None,
        Pooling::Mean,
        Pooling::Cls,
        Pooling::Last,
        Pooling::Rank,
    ];

    /// The pooling of llama.cpp's number (`{arch}.pooling_type`); -1 is
    /// its "unspecified", which reads as none.
    pub fn from_number(n: i64) -> Option<Pooling> {
        match n {
            -1 => Some(Pooling::None),
            0..=4 => Some(Pooling::ALL[n as usize]),
            _ => None,
        }
    }

    /// Its name on llama.cpp's command lines (`--pooling`).
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// The pooling named `s` (`none`, `mean`, `cls`, `last`, `rank`).
    pub fn parse(s: &str) -> Result<Pooling> {
        Pooling::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("pooling '{s}': one of none, mean, cls, last, rank"))
            })
    }

    /// Whether it makes one vector per sequence (all but none).
    pub fn pools(self) -> bool {
        self != Pooling::None
    }

    /// Whether it picks one row per sequence: the last position's when
    /// `last`, else the first's (None for mean and no pooling).
    pub(super) fn picks(self, causal: bool) -> Option<bool> {
        match self {
            Pooling::Cls => Some(false),
            Pooling::Last => Some(true),
            Pooling::Rank => Some(causal),
            Pooling::None | Pooling::Mean => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_numbers_and_names() {
        assert_eq!(Pooling::from_number(-1), Some(Pooling::None));
        assert_eq!(Pooling::from_number(3), Some(Pooling::Last));
        assert_eq!(Pooling::from_number(5), None);
        for p in Pooling::ALL {
            assert_eq!(Pooling::parse(p.name()).ok(), Some(p));
        }
        assert!(Pooling::parse("max").is_err());
    }
}
