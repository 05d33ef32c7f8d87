//! A minimal tokenizer over a GGUF vocabulary: SentencePiece-style text
//! (spaces as `▁`, a leading `▁`), greedy longest match, byte tokens
//! (`<0xXX>`) for what no piece covers. It round-trips the vocabulary's
//! own pieces; it is not a faithful BPE.

use std::collections::HashMap;

use ggraph_core::error::{Error, Result};

/// What a GGUF says about its vocabulary besides the pieces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VocabInfo {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece), `gpt2` (byte-level
    /// BPE), ...
    pub model: Option<String>,
    /// The token put before a prompt: `tokenizer.ggml.bos_token_id`, unless
    /// `tokenizer.ggml.add_bos_token` is false.
    pub bos: Option<i32>,
}

pub struct Tokenizer {
    pieces: Vec<String>,
    bos: Option<i32>,
    ids: HashMap<String, i32>,
    bytes: [Option<i32>; 256],
    max_len: usize,
    unk: Option<i32>,
}

const SPACE: char = '▁';

fn byte_of(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() == 2 {
        u8::from_str_radix(hex, 16).ok()
    } else {
        None
    }
}

fn is_special(piece: &str) -> bool {
    piece.starts_with('<') && piece.ends_with('>')
}

impl Tokenizer {
    pub fn new(pieces: Vec<String>) -> Result<Tokenizer> {
        if pieces.is_empty() {
            return Err(Error::InvalidArgument("an empty vocabulary".into()));
        }
        let mut ids = HashMap::with_capacity(pieces.len());
        let mut bytes = [None; 256];
        let mut max_len = 1;
        for (i, p) in pieces.iter().enumerate() {
            if let Some(b) = byte_of(p) {
                bytes[b as usize].get_or_insert(i as i32);
            } else if !is_special(p) {
                ids.entry(p.clone()).or_insert(i as i32);
                max_len = max_len.max(p.len());
            }
        }
        let unk = pieces.iter().position(|p| p == "<unk>").map(|i| i as i32);
        Ok(Tokenizer {
            pieces,
            bos: None,
            ids,
            bytes,
            max_len,
            unk,
        })
    }

    /// The tokenizer of a model's vocabulary: SentencePiece-style
    /// vocabularies (`llama`, or no model named) only; any other kind is an
    /// error rather than a wrong tokenisation. Prompts start with the
    /// vocabulary's BOS token when it has one.
    pub fn for_vocab(pieces: Vec<String>, info: &VocabInfo) -> Result<Tokenizer> {
        match info.model.as_deref() {
            None | Some("llama") => {}
            Some(other) => {
                return Err(Error::Unsupported {
                    device: "ggraph's tokenizer".into(),
                    what: format!(
                        "'{other}' vocabularies (tokenizer.ggml.model); only SentencePiece ('llama') text is tokenised: give the prompt as token ids"
                    ),
                });
            }
        }
        if let Some(b) = info.bos
            && usize::try_from(b).map_or(true, |b| b >= pieces.len())
        {
            return Err(Error::InvalidArgument(format!(
                "BOS token {b} is outside the {}-piece vocabulary",
                pieces.len()
            )));
        }
        let mut t = Tokenizer::new(pieces)?;
        t.bos = info.bos;
        Ok(t)
    }

    pub fn n_vocab(&self) -> usize {
        self.pieces.len()
    }

    /// The token ids of `text`, after the BOS token if the vocabulary
    /// has one.
    pub fn encode(&self, text: &str) -> Vec<i32> {
        let s: String = std::iter::once(SPACE)
            .chain(text.chars().map(|c| if c == ' ' { SPACE } else { c }))
            .collect();
        let mut out: Vec<i32> = self.bos.into_iter().collect();
        let mut i = 0;
        while i < s.len() {
            let mut matched = None;
            let mut end = (i + self.max_len).min(s.len());
            while end > i {
                if s.is_char_boundary(end)
                    && let Some(&id) = self.ids.get(&s[i..end])
                {
                    matched = Some((id, end));
                    break;
                }
                end -= 1;
            }
            match matched {
                Some((id, e)) => {
                    out.push(id);
                    i = e;
                }
                None => {
                    let c_len = s[i..].chars().next().map_or(1, char::len_utf8);
                    for &b in &s.as_bytes()[i..i + c_len] {
                        if let Some(id) = self.bytes[b as usize].or(self.unk) {
                            out.push(id)
                        }
                    }
                    i += c_len;
                }
            }
        }
        out
    }

    /// The text of `ids` (unknown ids are skipped).
    pub fn decode(&self, ids: &[i32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(p) = usize::try_from(id).ok().and_then(|i| self.pieces.get(i)) else {
                continue;
            };
            match byte_of(p) {
                Some(b) => bytes.push(b),
                None if is_special(p) => {}
                None => bytes.extend(p.replace(SPACE, " ").as_bytes()),
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        text.strip_prefix(' ').map(str::to_string).unwrap_or(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::make::make_vocab;

    #[test]
    fn other_vocabulary_kinds_are_refused_and_bos_leads_the_prompt() {
        let gpt2 = VocabInfo {
            model: Some("gpt2".into()),
            bos: None,
        };
        let e = Tokenizer::for_vocab(make_vocab(64), &gpt2)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("'gpt2'") && e.contains("token ids"), "{e}");

        let v = make_vocab(512);
        let bos = v.iter().position(|p| p == "<s>").unwrap() as i32;
        let llama = VocabInfo {
            model: Some("llama".into()),
            bos: Some(bos),
        };
        let t = Tokenizer::for_vocab(v.clone(), &llama).unwrap();
        let ids = t.encode("hello world");
        assert_eq!(ids[0], bos);
        assert_eq!(t.decode(&ids), "hello world", "BOS decodes to nothing");
        let outside = VocabInfo {
            model: None,
            bos: Some(512),
        };
        assert!(Tokenizer::for_vocab(v, &outside).is_err());
    }

    #[test]
    fn text_round_trips_and_uses_the_longest_pieces() {
        let t = Tokenizer::new(make_vocab(512)).unwrap();
        for text in [
            "hello world",
            "the graph model is in the world",
            "Zebra & π!",
        ] {
            assert_eq!(t.decode(&t.encode(text)), text);
        }
        let ids = t.encode("hello world");
        assert_eq!(ids.len(), 2, "▁hello and ▁world are pieces");
    }

    #[test]
    fn every_plain_piece_encodes_to_itself() {
        let v = make_vocab(512);
        let t = Tokenizer::new(v.clone()).unwrap();
        for (i, p) in v.iter().enumerate() {
            if p.starts_with('▁') && p.len() > "▁".len() {
                let text = p.trim_start_matches('▁');
                assert_eq!(t.encode(text), vec![i as i32], "{p}");
            }
        }
    }
}
