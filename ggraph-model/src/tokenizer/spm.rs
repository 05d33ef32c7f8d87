//! SentencePiece-style merging, as llama.cpp's `llm_tokenizer_spm_session`:
//! the text's characters are merged pair by pair while the pair's text is
//! a piece, the pair whose piece scores highest first (the leftmost on a
//! tie); what is left that is no piece becomes byte pieces (`<0xXX>`).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::vocab::Vocab;

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

struct Pair {
    score: f32,
    left: u32,
    right: u32,
    len: u32,
}

impl PartialEq for Pair {
    fn eq(&self, o: &Pair) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Pair {}
impl PartialOrd for Pair {
    fn partial_cmp(&self, o: &Pair) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pair {
    /// Greater is merged first: higher score, then lower position.
    fn cmp(&self, o: &Pair) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then(Reverse(self.left).cmp(&Reverse(o.left)))
    }
}

/// The tokens of `text` (spaces already `▁`), appended to `out`.
pub(crate) fn tokenize(v: &Vocab, text: &str, out: &mut Vec<i32>) {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        symbols.push(Symbol {
            start: start as u32,
            len: len as u32,
            prev: i as i32 - 1,
            next: if start + len == text.len() {
                -1
            } else {
                i as i32 + 1
            },
        });
    }
    let mut queue = BinaryHeap::new();
    let add = |queue: &mut BinaryHeap<Pair>, symbols: &[Symbol], left: i32, right: i32| {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (symbols[left as usize], symbols[right as usize]);
        let piece = &text[l.start as usize..(l.start + l.len + r.len) as usize];
        if let Some(id) = v.id_of(piece) {
            queue.push(Pair {
                score: v.tokens[id as usize].score,
                left: left as u32,
                right: right as u32,
                len: l.len + r.len,
            });
        }
    };
    for i in 1..symbols.len() {
        add(&mut queue, &symbols, i as i32 - 1, i as i32);
    }
    while let Some(p) = queue.pop() {
        let (l, r) = (p.left as usize, p.right as usize);
        if symbols[l].len == 0 || symbols[r].len == 0 || symbols[l].len + symbols[r].len != p.len {
            continue;
        }
        let right = symbols[r];
        symbols[l].len += right.len;
        symbols[l].next = right.next;
        symbols[r].len = 0;
        if right.next >= 0 {
            symbols[right.next as usize].prev = l as i32;
        }
        let prev = symbols[l].prev;
        add(&mut queue, &symbols, prev, l as i32);
        add(&mut queue, &symbols, l as i32, right.next);
    }
    let mut i = if symbols.is_empty() { -1 } else { 0 };
    while i >= 0 {
        let s = symbols[i as usize];
        let piece = &text[s.start as usize..(s.start + s.len) as usize];
        match v.id_of(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece.as_bytes() {
                    // llama.cpp fails on a byte with no piece; the unknown
                    // token stands in for it here
                    if let Some(id) = v.byte_token(b).or(v.special.unk) {
                        out.push(id);
                    }
                }
            }
        }
        i = s.next;
    }
}
