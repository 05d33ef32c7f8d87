//! Text to token ids and back, as llama.cpp does it for the vocabulary a
//! GGUF carries: SentencePiece (`llama`) and GPT-2 byte-level BPE (`gpt2`)
//! vocabularies with the pre-tokenizer `tokenizer.ggml.pre` names, special
//! tokens found in text, BOS/EOS as the file asks, and detokenisation that
//! streams whole characters.
//!
//! Written against llama.cpp's `llama-vocab.cpp` and `unicode.cpp` (as
//! vendored in the llama-cpp-python 0.3.36 sdist) and checked id for id
//! against its `llama-tokenize` (tests/tokenizer_fixtures.rs).

mod bpe;
pub mod byte_level;
mod detokenize;
pub mod pretokenize;
mod special;
mod spm;
mod text_index;
mod ugm;
mod vocab;
mod wpm;

use aho_corasick::AhoCorasick;
use ggraph_core::error::{Error, Result};

use crate::gguf::GgufHeader;
pub use detokenize::StreamDecoder;
pub use pretokenize::PreTokenizer;
use special::Fragment;
pub use vocab::{SpecialTokens, TokenAttr, UgmOptions, Vocab, VocabKind, WpmOptions};

/// A vocabulary ready to encode and decode.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    specials: Option<AhoCorasick>,
    /// Every token's piece, special tokens rendered, end to end; token
    /// `i`'s is `pieces[piece_ends[i - 1]..piece_ends[i]]`.
    pieces: Vec<u8>,
    piece_ends: Vec<u32>,
    /// The unigram model's tries (a `t5` vocabulary).
    unigram: Option<ugm::Ugm>,
}

impl Tokenizer {
    /// A tokenizer over `vocab`; finds its special tokens and renders every
    /// token's piece once, up front.
    pub fn new(vocab: Vocab) -> Tokenizer {
        let specials = special::finder(&vocab);
        let mut pieces = Vec::new();
        let mut piece_ends = Vec::with_capacity(vocab.n_tokens());
        for id in 0..vocab.n_tokens() as i32 {
            detokenize::append_piece(&vocab, id, &mut pieces);
            piece_ends.push(pieces.len() as u32);
        }
        let unigram = match &vocab.kind {
            VocabKind::Ugm(opts) => Some(ugm::Ugm::new(&vocab, opts, vocab.add_space_prefix)),
            _ => None,
        };
        Tokenizer {
            vocab,
            specials,
            pieces,
            piece_ends,
            unigram,
        }
    }

    /// The tokenizer of a GGUF header's vocabulary.
    pub fn from_header(h: &GgufHeader) -> Result<Tokenizer> {
        Ok(Tokenizer::new(Vocab::from_header(h)?))
    }

    /// The vocabulary: special tokens, flags, pieces by id.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Tokens in the vocabulary (llama.cpp's `llama_vocab_n_tokens`).
    pub fn n_vocab(&self) -> usize {
        self.vocab.n_tokens()
    }

    /// The ids of `text`, as llama.cpp's `llama_tokenize`: with
    /// `add_special`, BOS and EOS where the vocabulary asks for them; with
    /// `parse_special`, control tokens written in the text (`<|im_end|>`)
    /// are those tokens rather than their characters. A runner's prompt
    /// takes both.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<i32>> {
        let v = &self.vocab;
        let frags = special::partition(v, self.specials.as_ref(), text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        // WordPiece always wraps a text in CLS (its BOS) and SEP, whatever
        // the add_* flags say, as llama.cpp's tokenizer does
        let wpm = matches!(v.kind, VocabKind::Wpm(_));
        if add_special && (v.add_bos || wpm) {
            out.extend(v.special.bos);
        }
        match &v.kind {
            VocabKind::Spm => {
                let mut prev_special = true;
                for f in &frags {
                    match f {
                        Fragment::Text(r) => {
                            let mut s = String::with_capacity(r.len() + 4);
                            if v.add_space_prefix && prev_special {
                                s.push('\u{2581}');
                            }
                            for c in text[r.clone()].chars() {
                                s.push(if c == ' ' { '\u{2581}' } else { c });
                            }
                            spm::tokenize(v, &s, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(*id);
                            prev_special = true;
                        }
                    }
                }
            }
            VocabKind::Bpe(pre) => {
                let mut session = bpe::BpeSession::default();
                let mut word = String::new();
                for f in &frags {
                    match f {
                        Fragment::Text(r) => {
                            let s = if pre.escape_spaces {
                                std::borrow::Cow::Owned(text[r.clone()].replace(' ', "\u{2581}"))
                            } else {
                                std::borrow::Cow::Borrowed(&text[r.clone()])
                            };
                            for w in pre.split(&s)? {
                                word.clear();
                                if pre.byte_level {
                                    byte_level::encode(s[w].as_bytes(), &mut word);
                                } else {
                                    word.push_str(&s[w]);
                                }
                                session.tokenize_word(v, pre, &word, &mut out);
                            }
                        }
                        Fragment::Token(id) => out.push(*id),
                    }
                }
            }
            VocabKind::Ugm(_) => {
                let model = self.unigram.as_ref().ok_or_else(|| {
                    Error::InvalidArgument("a unigram vocabulary without its model".into())
                })?;
                for f in &frags {
                    match f {
                        Fragment::Text(r) => model.tokenize(v, &text[r.clone()], &mut out)?,
                        Fragment::Token(id) => out.push(*id),
                    }
                }
            }
            VocabKind::Wpm(opts) => {
                for f in &frags {
                    match f {
                        Fragment::Text(r) => wpm::tokenize(v, *opts, &text[r.clone()], &mut out),
                        Fragment::Token(id) => out.push(*id),
                    }
                }
            }
        }
        match add_special {
            true if wpm => out.extend(v.special.sep),
            true if v.add_eos => out.extend(v.special.eos),
            _ => {}
        }
        Ok(out)
    }

    /// A token's piece: the bytes it stands for. Control and unknown tokens
    /// give their text with `special`, nothing without it.
    pub fn piece(&self, id: i32, special: bool) -> Result<&[u8]> {
        if !self.vocab.in_range(id) {
            return Err(Error::InvalidArgument(format!(
                "token {id} is outside the {}-token vocabulary",
                self.n_vocab()
            )));
        }
        let hidden = TokenAttr::UNKNOWN.with(TokenAttr::CONTROL);
        if !special && self.vocab.attr(id).has(hidden) {
            return Ok(&[]);
        }
        let i = id as usize;
        let start = if i == 0 {
            0
        } else {
            self.piece_ends[i - 1] as usize
        };
        Ok(&self.pieces[start..self.piece_ends[i] as usize])
    }

    /// The text of `ids`, as llama.cpp's `llama_detokenize`: with
    /// `remove_special`, a leading BOS and trailing EOS the vocabulary adds
    /// are dropped; with `unparse_special`, control tokens are written out.
    /// Bytes that are not UTF-8 become U+FFFD.
    pub fn decode(
        &self,
        ids: &[i32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<String> {
        let text = self.decode_bytes(ids, remove_special, unparse_special)?;
        Ok(String::from_utf8_lossy(&text).into_owned())
    }

    /// [`Tokenizer::decode`]'s bytes, before they are read as UTF-8 (a
    /// token may hold part of a character).
    pub fn decode_bytes(
        &self,
        ids: &[i32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>> {
        let v = &self.vocab;
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special && v.add_bos && ids.first().is_some_and(|&i| Some(i) == v.special.bos) {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && v.add_eos && ids.last().is_some_and(|&i| Some(i) == v.special.eos) {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            let mut p = self.piece(id, unparse_special)?;
            if remove_space {
                p = p.strip_prefix(b" ").unwrap_or(p);
            }
            remove_space = false;
            text.extend_from_slice(p);
        }
        if v.clean_spaces {
            detokenize::clean_spaces(&mut text);
        }
        Ok(text)
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: i32) -> bool {
        self.vocab.is_eog(id)
    }

    /// The text of the BOS and EOS tokens, as chat templates are given
    /// them (empty when the vocabulary has none).
    pub fn bos_eos_text(&self) -> (String, String) {
        let text = |id: Option<i32>| {
            id.and_then(|i| self.vocab.text_of(i))
                .unwrap_or("")
                .to_string()
        };
        (text(self.vocab.special.bos), text(self.vocab.special.eos))
    }

    /// What goes between the texts of a pair (a reranker's query and
    /// document) written as one text: the EOS token's text where the
    /// vocabulary adds EOS, then the SEP token's where it adds SEP, as
    /// llama.cpp's `llama-embedding` and server join them (encoded with
    /// special tokens parsed, they become those tokens).
    pub fn pair_separator(&self) -> String {
        let v = &self.vocab;
        let text = |add: bool, id: Option<i32>| match add {
            true => id.and_then(|i| v.text_of(i)).unwrap_or(""),
            false => "",
        };
        let eos = text(v.add_eos, v.special.eos);
        let sep = text(v.add_sep, v.special.sep);
        format!("{eos}{sep}")
    }
}

#[cfg(test)]
mod tests;
