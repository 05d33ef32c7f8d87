//! SentencePiece's unigram model (`tokenizer.ggml.model = t5`: T5, XLM-R
//! and their descendants), as llama.cpp's `llm_tokenizer_ugm`: the text
//! normalised by the file's precompiled character map (a XOR-compressed
//! double array of replacement prefixes), spaces written as `▁`, then the
//! best-scoring split by Viterbi over a trie of the pieces, a character no
//! piece covers being the unknown token at the lowest score less 10, and
//! runs of unknown tokens merged.

use ggraph_core::error::{Error, Result};

use super::vocab::{TokenAttr, UgmOptions, Vocab};

/// A byte trie (llama.cpp's `naive_trie`), nodes in one arena.
#[derive(Clone, Debug, Default)]
struct Trie {
    nodes: Vec<TrieNode>,
}

/// A trie node: its children by byte (arena indices), and the token that
/// ends there.
#[derive(Clone, Debug, Default)]
struct TrieNode {
    children: Vec<(u8, usize)>,
    id: Option<i32>,
}

impl Trie {
    fn new() -> Trie {
        Trie {
            nodes: vec![TrieNode::default()],
        }
    }

    fn insert(&mut self, key: &[u8], id: i32) {
        let mut at = 0;
        for &b in key {
            at = match self.child(at, b) {
                Some(next) => next,
                None => {
                    self.nodes.push(TrieNode::default());
                    let next = self.nodes.len() - 1;
                    self.nodes[at].children.push((b, next));
                    next
                }
            };
        }
        self.nodes[at].id = Some(id);
    }

    fn child(&self, node: usize, b: u8) -> Option<usize> {
        (self.nodes[node].children.iter())
            .find(|(c, _)| *c == b)
            .map(|&(_, n)| n)
    }

    /// How many bytes of `key` the trie's paths follow, whether or not a
    /// token ends there (llama.cpp's `get_longest_prefix`).
    fn walked(&self, key: &[u8]) -> usize {
        let mut at = 0;
        for (i, &b) in key.iter().enumerate() {
            match self.child(at, b) {
                Some(next) => at = next,
                None => return i,
            }
        }
        key.len()
    }
}

/// A unigram vocabulary ready to split text.
#[derive(Clone, Debug)]
pub(crate) struct Ugm {
    /// Normal, user-defined and unused pieces.
    pieces: Trie,
    user_defined: Trie,
    /// The XCDA entries and the replacement strings after them.
    xcda: Vec<u32>,
    replacements: Vec<u8>,
    unknown_score: f64,
    remove_extra_whitespaces: bool,
    add_space_prefix: bool,
}

fn charsmap_error(msg: &str) -> Error {
    Error::Format {
        file: "GGUF vocabulary".into(),
        msg: format!("'tokenizer.ggml.precompiled_charsmap': {msg}"),
    }
}

impl Ugm {
    /// The model of vocabulary `v` with `opts`.
    pub(crate) fn new(v: &Vocab, opts: &UgmOptions, add_space_prefix: bool) -> Ugm {
        let mut pieces = Trie::new();
        let mut user_defined = Trie::new();
        let mut min_score = f32::MAX;
        for id in 0..v.n_tokens() as i32 {
            let attr = v.attr(id);
            let text = v.text_of(id).unwrap_or("").as_bytes();
            if attr.has(TokenAttr::NORMAL) {
                min_score = min_score.min(v.score(id));
            }
            if attr.has(
                TokenAttr::NORMAL
                    .with(TokenAttr::USER_DEFINED)
                    .with(TokenAttr::UNUSED),
            ) {
                pieces.insert(text, id);
            }
            if attr.has(TokenAttr::USER_DEFINED) {
                user_defined.insert(text, id);
            }
        }
        Ugm {
            pieces,
            user_defined,
            xcda: opts.xcda.clone(),
            replacements: opts.replacements.clone(),
            unknown_score: (min_score - 10.0) as f64,
            remove_extra_whitespaces: opts.remove_extra_whitespaces,
            add_space_prefix,
        }
    }

    /// The ids of `text` (a fragment between special tokens), appended.
    pub(crate) fn tokenize(&self, v: &Vocab, text: &str, out: &mut Vec<i32>) -> Result<()> {
        let norm = self.normalize(text.as_bytes())?;
        if norm.is_empty() {
            return Ok(());
        }
        let unk = v.special.unk.unwrap_or(0);
        let n = norm.len();
        // per byte offset: the best split's last token, where it starts,
        // and its score
        let mut best: Vec<(i32, usize, f64)> = vec![(unk, 0, f64::MIN); n + 1];
        best[0] = (unk, 0, 0.0);
        let mut at = 0;
        while at < n {
            let char_len = utf8_len(norm[at]).min(n - at);
            let here = best[at].2;
            let mut whole_char = false;
            let mut node = self.pieces.child(0, norm[at]);
            let mut end = at + 1;
            while let Some(nd) = node {
                if let Some(id) = self.pieces.nodes[nd].id {
                    if end - at == char_len {
                        whole_char = true;
                    }
                    let score = match v.attr(id).has(TokenAttr::USER_DEFINED) {
                        true => 0.0,
                        false => v.score(id) as f64,
                    };
                    if here + score > best[end].2 {
                        best[end] = (id, at, here + score);
                    }
                }
                if end >= n {
                    break;
                }
                node = self.pieces.child(nd, norm[end]);
                end += 1;
            }
            if !whole_char {
                let end = at + char_len;
                if here + self.unknown_score > best[end].2 {
                    best[end] = (unk, at, here + self.unknown_score);
                }
            }
            at += char_len;
        }
        // back from the end, runs of unknown tokens as one
        let start = out.len();
        let (mut at, mut prev_unknown) = (n, false);
        loop {
            let (id, from, _) = best[at];
            let unknown = id == unk;
            if !(prev_unknown && unknown) {
                out.push(id);
            }
            if from == 0 {
                break;
            }
            prev_unknown = unknown;
            at = from;
        }
        out[start..].reverse();
        Ok(())
    }

    /// The text as the character map and the space options make it.
    fn normalize(&self, input: &[u8]) -> Result<Vec<u8>> {
        const SPACE: &[u8] = "\u{2581}".as_bytes();
        let mut out = Vec::with_capacity(input.len() * 3);
        let (mut prepended, mut in_word) = (false, false);
        let mut at = 0;
        while at < input.len() {
            let (piece, consumed) = self.normalize_prefix(input, at)?;
            for &c in piece.iter() {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (self.add_space_prefix && !prepended) || self.remove_extra_whitespaces {
                            out.extend_from_slice(SPACE);
                            prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !self.remove_extra_whitespaces {
                        out.extend_from_slice(SPACE);
                    }
                }
            }
            at += consumed;
        }
        Ok(out)
    }

    /// The normalised text of the longest prefix of `input[at..]` the map
    /// replaces (or a user-defined piece, or one character as it is; a
    /// byte that starts no character is U+FFFD), and the bytes it
    /// consumed.
    fn normalize_prefix<'a>(&'a self, input: &'a [u8], at: usize) -> Result<(&'a [u8], usize)> {
        let rest = &input[at..];
        let user = self.user_defined.walked(rest);
        if user > 0 {
            return Ok((&rest[..user], user));
        }
        let (mut longest, mut replacement) = (0, 0);
        if !self.xcda.is_empty() {
            let node = |i: usize| {
                self.xcda
                    .get(i)
                    .copied()
                    .ok_or_else(|| charsmap_error("an index past its array"))
            };
            let base = |p: u32| (p >> 10) << ((p & (1 << 9)) >> 6);
            let mut index = base(node(0)?) as usize;
            for (i, &c) in rest.iter().enumerate() {
                if c == 0 {
                    break;
                }
                index ^= c as usize;
                let p = node(index)?;
                if p & ((1 << 31) | 0xff) != c as u32 {
                    break;
                }
                let leaf = (p >> 8) & 1 == 1;
                index ^= base(p) as usize;
                if leaf {
                    longest = i + 1;
                    replacement = (node(index)? & ((1 << 31) - 1)) as usize;
                }
            }
        }
        if longest > 0 {
            let tail = self
                .replacements
                .get(replacement..)
                .ok_or_else(|| charsmap_error("a replacement past its strings"))?;
            let len = tail
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| charsmap_error("an unterminated replacement"))?;
            return Ok((&tail[..len], longest));
        }
        match valid_char_len(rest) {
            Some(len) => Ok((&rest[..len], len)),
            None => Ok(("\u{FFFD}".as_bytes(), 1)),
        }
    }
}

/// The bytes of the UTF-8 character a lead byte starts (llama.cpp's
/// `unicode_len_utf8`: 1 for a continuation byte).
fn utf8_len(b: u8) -> usize {
    match b >> 4 {
        0xF => 4,
        0xE => 3,
        0xC | 0xD => 2,
        _ => 1,
    }
}

/// The length of the valid UTF-8 character `s` starts with, if it does.
fn valid_char_len(s: &[u8]) -> Option<usize> {
    let len = match s.first()? {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return None,
    };
    let bytes = s.get(..len)?;
    std::str::from_utf8(bytes).ok().map(|_| len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::vocab::tests::spm_vocab;

    fn split(v: &Vocab, m: &Ugm, text: &str) -> Vec<i32> {
        let mut out = Vec::new();
        m.tokenize(v, text, &mut out).unwrap();
        out
    }

    #[test]
    fn the_best_scoring_split_wins_and_unknown_runs_are_one_token() {
        // scores fall with the id: "▁ab" (3) beats "▁a" + "b" (4 + 6)
        let v = spm_vocab(&["<unk>", "<s>", "</s>", "▁ab", "▁a", "▁", "b"]);
        let m = Ugm::new(&v, &UgmOptions::default(), true);
        assert_eq!(split(&v, &m, "ab"), [3]);
        assert_eq!(split(&v, &m, "ab b"), [3, 5, 6]);
        // "x" and "y" are no pieces: one unknown token for both
        assert_eq!(split(&v, &m, "abxy"), [3, 0]);
    }
}
