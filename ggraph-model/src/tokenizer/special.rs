//! Special tokens found in text before it is tokenised, as llama.cpp's
//! `tokenizer_st_partition`: for each special token, longest first, every
//! stretch of text not yet claimed is cut at each of its occurrences, left
//! to right. The order matters: a longer token claims its text before a
//! shorter one that overlaps it.

use std::ops::Range;

use aho_corasick::AhoCorasick;

use super::vocab::{TokenAttr, Vocab};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(i32),
}

/// What `isspace` takes for space in the C locale.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The special tokens' texts, in [`Vocab::special_order`], to find which
/// occur at all in one pass.
pub(crate) fn finder(v: &Vocab) -> Option<AhoCorasick> {
    if v.special_order.is_empty() {
        return None;
    }
    AhoCorasick::new(
        v.special_order
            .iter()
            .map(|&id| v.tokens[id as usize].text.as_bytes()),
    )
    .ok()
}

/// `text` as stretches of text and special tokens. With `parse_special`
/// false, control and unknown tokens stay text; user-defined tokens are
/// always found (as llama.cpp and HF tokenizers do).
pub(crate) fn partition(
    v: &Vocab,
    finder: Option<&AhoCorasick>,
    text: &str,
    parse_special: bool,
) -> Vec<Fragment> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut frags = vec![Fragment::Text(0..text.len())];
    let Some(finder) = finder else {
        return frags;
    };
    let mut present = vec![false; v.special_order.len()];
    for m in finder.find_overlapping_iter(text) {
        present[m.pattern().as_usize()] = true;
    }
    let skip = TokenAttr::CONTROL.with(TokenAttr::UNKNOWN);
    for (k, &id) in v.special_order.iter().enumerate() {
        let attr = v.attr(id);
        if !present[k] || (!parse_special && attr.has(skip)) {
            continue;
        }
        let needle = v.tokens[id as usize].text.as_str();
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text(r) = f else {
                next.push(f);
                continue;
            };
            let mut start = r.start;
            while let Some(at) = text[start..r.end].find(needle) {
                let at = start + at;
                let mut left_end = at;
                if attr.has(TokenAttr::LSTRIP) {
                    while left_end > start && c_space(text.as_bytes()[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > start {
                    next.push(Fragment::Text(start..left_end));
                }
                next.push(Fragment::Token(id));
                start = at + needle.len();
                if attr.has(TokenAttr::RSTRIP) {
                    while start < r.end && c_space(text.as_bytes()[start]) {
                        start += 1;
                    }
                }
            }
            if start < r.end {
                next.push(Fragment::Text(start..r.end));
            }
        }
        frags = next;
    }
    frags
}
