//! Byte-level BPE over one pre-tokenized word, as llama.cpp's
//! `llm_tokenizer_bpe_session`: the word's characters are merged pair by
//! pair, the pair of lowest merge rank first (the leftmost on a tie),
//! until no adjacent pair has a merge.
//!
//! Merges are looked up by the ids of their two parts, so a symbol must be
//! a token to merge further; llama.cpp looks them up by text, which only
//! differs for vocabularies whose merges make texts that are no tokens.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::pretokenize::PreTokenizer;
use super::vocab::Vocab;

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    /// The token this symbol's text is, or -1.
    id: i32,
    prev: i32,
    next: i32,
}

/// A candidate merge: ordered by rank, then by position.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    rank: u32,
    left: u32,
    right: u32,
    /// The lengths when the pair was found: a pair whose symbols changed
    /// since is stale.
    left_len: u32,
    right_len: u32,
    merged: i32,
}

/// The working state, kept between words to reuse its memory.
#[derive(Default)]
pub(crate) struct BpeSession {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Reverse<Pair>>,
}

impl BpeSession {
    /// The tokens of `word` (in the byte-level alphabet, or raw UTF-8
    /// with `▁` for spaces when the pre-tokenizer is not byte-level),
    /// appended to `out`.
    pub fn tokenize_word(&mut self, v: &Vocab, pre: &PreTokenizer, word: &str, out: &mut Vec<i32>) {
        let whole = v.ignore_merges || (pre.whole_newlines && word.bytes().all(|b| b == b'\n'));
        if whole && let Some(id) = v.id_of(word) {
            out.push(id);
            return;
        }
        self.symbols.clear();
        self.queue.clear();
        for (i, (start, c)) in word.char_indices().enumerate() {
            let len = c.len_utf8();
            let id = v.id_of(&word[start..start + len]).unwrap_or(-1);
            self.symbols.push(Symbol {
                start: start as u32,
                len: len as u32,
                id,
                prev: i as i32 - 1,
                next: if start + len == word.len() {
                    -1
                } else {
                    i as i32 + 1
                },
            });
        }
        for i in 1..self.symbols.len() {
            self.add_pair(v, i as i32 - 1, i as i32);
        }
        while let Some(Reverse(p)) = self.queue.pop() {
            let (l, r) = (p.left as usize, p.right as usize);
            if self.symbols[l].len != p.left_len || self.symbols[r].len != p.right_len {
                continue;
            }
            let right = self.symbols[r];
            let left = &mut self.symbols[l];
            left.len += right.len;
            left.id = p.merged;
            left.next = right.next;
            let prev = left.prev;
            self.symbols[r].len = 0;
            if right.next >= 0 {
                self.symbols[right.next as usize].prev = l as i32;
            }
            self.add_pair(v, prev, l as i32);
            self.add_pair(v, l as i32, right.next);
        }
        let mut i = if self.symbols.is_empty() { -1 } else { 0 };
        while i >= 0 {
            let s = self.symbols[i as usize];
            if s.id >= 0 {
                out.push(s.id);
            } else {
                // a symbol that is no token: its bytes, where a byte is one
                let text = &word.as_bytes()[s.start as usize..(s.start + s.len) as usize];
                for &b in text {
                    let id = if pre.byte_level {
                        if b.is_ascii() {
                            v.id_of(std::str::from_utf8(&[b]).unwrap_or(""))
                        } else {
                            None
                        }
                    } else {
                        v.id_of(&format!("<0x{b:02X}>"))
                    };
                    out.extend(id);
                }
            }
            i = s.next;
        }
    }

    fn add_pair(&mut self, v: &Vocab, left: i32, right: i32) {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (self.symbols[left as usize], self.symbols[right as usize]);
        if l.id < 0 || r.id < 0 {
            return;
        }
        if let Some(&(rank, merged)) = v.merges.get(&(l.id, r.id)) {
            self.queue.push(Reverse(Pair {
                rank,
                left: left as u32,
                right: right as u32,
                left_len: l.len,
                right_len: r.len,
                merged,
            }));
        }
    }
}
