//! WordPiece (`tokenizer.ggml.model = bert`), as llama.cpp's
//! `llm_tokenizer_wpm_session`: the text normalised as BERT's normaliser
//! does (lowercased and its accents stripped where the vocabulary says),
//! split at whitespace and around punctuation, symbols and CJK
//! ideographs; each word, with `▁` before it, taken as the longest
//! vocabulary pieces from its start; a word some position of which no
//! piece starts is the unknown token.

use std::sync::OnceLock;

use regex::Regex;
use unicode_normalization::UnicodeNormalization;

use super::vocab::{Vocab, WpmOptions};

/// The ids of `text` (a fragment between special tokens), appended.
pub(crate) fn tokenize(v: &Vocab, opts: WpmOptions, text: &str, out: &mut Vec<i32>) {
    let max_len = v.max_token_len();
    for word in words(text, opts) {
        let word = format!("\u{2581}{word}");
        let bytes = word.as_bytes();
        let start = out.len();
        let mut i = 0;
        while i < bytes.len() {
            // the longest piece from i (llama.cpp's byte lengths, whole
            // characters only: a piece is valid UTF-8)
            let longest = (i + 1..=bytes.len().min(i + max_len))
                .rev()
                .filter(|&j| word.is_char_boundary(j) && word.is_char_boundary(i))
                .find_map(|j| v.id_of(&word[i..j]).map(|id| (j, id)));
            match longest {
                Some((j, id)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.extend(v.special.unk);
        }
    }
}

/// The words of `text` as llama.cpp's `preprocess` splits them.
fn words(text: &str, opts: WpmOptions) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut flush = |word: &mut String| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    for c in text.chars() {
        let c = if opts.strip_accents {
            c.to_string().nfd().next().unwrap_or(c)
        } else {
            c
        };
        if c.is_whitespace() {
            flush(&mut word);
            continue;
        }
        let class = Class::of(c);
        if c == '\0' || c == '\u{FFFD}' || class == Class::Control {
            continue;
        }
        if opts.strip_accents && class == Class::Mark {
            continue;
        }
        let c = match opts.lowercase {
            true => c.to_lowercase().next().unwrap_or(c),
            false => c,
        };
        let alone = class == Class::Punctuation
            || (class == Class::Symbol && (c as u32) < 0x7F)
            || is_chinese(c as u32);
        if alone {
            flush(&mut word);
            word.push(c);
            flush(&mut word);
        } else {
            word.push(c);
        }
    }
    flush(&mut word);
    words
}

/// The Unicode categories WordPiece tells apart (llama.cpp's flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// `\p{P}`.
    Punctuation,
    /// `\p{S}`.
    Symbol,
    /// `\p{M}`.
    Mark,
    /// `\p{C}` of an assigned character (llama.cpp's table has no flags
    /// for unassigned ones).
    Control,
    Other,
}

impl Class {
    fn of(c: char) -> Class {
        static CLASSES: OnceLock<[(Regex, Class); 4]> = OnceLock::new();
        let classes = CLASSES.get_or_init(|| {
            // the patterns are constants the regex crate accepts (the
            // unit tests run every one): a failure is a bug, not input
            let re = |p: &str| Regex::new(p).expect("a valid Unicode class");
            [
                (re(r"^\p{P}$"), Class::Punctuation),
                (re(r"^\p{S}$"), Class::Symbol),
                (re(r"^\p{M}$"), Class::Mark),
                (re(r"^[\p{Cc}\p{Cf}\p{Co}]$"), Class::Control),
            ]
        });
        let mut buf = [0u8; 4];
        let s = c.encode_utf8(&mut buf);
        classes
            .iter()
            .find(|(re, _)| re.is_match(s))
            .map_or(Class::Other, |(_, class)| *class)
    }
}

/// The CJK ideograph blocks BERT splits one by one (llama.cpp's ranges,
/// with the one it takes from Hugging Face's code as written).
fn is_chinese(c: u32) -> bool {
    [
        (0x04E00, 0x09FFF),
        (0x03400, 0x04DBF),
        (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F),
        (0x2B920, 0x2CEAF),
        (0x0F900, 0x0FAFF),
        (0x2F800, 0x2FA1F),
    ]
    .iter()
    .any(|&(lo, hi)| (lo..=hi).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BGE: WpmOptions = WpmOptions {
        lowercase: true,
        strip_accents: true,
    };

    #[test]
    fn words_split_at_spaces_and_around_punctuation_lowercased_without_accents() {
        assert_eq!(
            words("Héllo, World!  A+b 中文", BGE),
            ["hello", ",", "world", "!", "a", "+", "b", "中", "文"]
        );
        let keep = WpmOptions {
            lowercase: false,
            strip_accents: false,
        };
        assert_eq!(words("Héllo\u{7}x", keep), ["Héllox"]);
    }
}
