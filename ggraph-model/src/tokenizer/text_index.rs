//! Token text to id without a second copy of every text: an
//! open-addressing table of ids, hashed by their text. A text can be
//! looked up in parts (a merge's left and right), with no allocation.

/// FNV-1a over the parts in turn: the hash of the parts is the hash of
/// their concatenation.
fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    // FNV's low bits mix poorly; the table takes them
    h ^ (h >> 29)
}

fn equals(text: &str, parts: &[&[u8]]) -> bool {
    let mut rest = text.as_bytes();
    for p in parts {
        match rest.strip_prefix(*p) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

#[derive(Clone, Debug, Default)]
pub(crate) struct TextIndex {
    /// Token ids, -1 for an empty slot; the length is a power of two.
    slots: Vec<i32>,
}

impl TextIndex {
    /// The index of the texts of `tokens`; of two equal texts the later id wins,
    /// as llama.cpp's map keeps it.
    pub fn new<T: AsRef<str>>(tokens: &[T]) -> TextIndex {
        let n = (tokens.len() * 2).next_power_of_two().max(16);
        let mut index = TextIndex { slots: vec![-1; n] };
        for (id, t) in tokens.iter().enumerate() {
            let mask = index.slots.len() - 1;
            let text = t.as_ref();
            let mut at = hash(&[text.as_bytes()]) as usize & mask;
            loop {
                let s = index.slots[at];
                if s < 0 || tokens[s as usize].as_ref() == text {
                    index.slots[at] = id as i32;
                    break;
                }
                at = (at + 1) & mask;
            }
        }
        index
    }

    /// The id of the text that is `parts` joined.
    pub fn find<T: AsRef<str>>(&self, tokens: &[T], parts: &[&[u8]]) -> Option<i32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = hash(parts) as usize & mask;
        loop {
            let s = self.slots[at];
            if s < 0 {
                return None;
            }
            if equals(tokens[s as usize].as_ref(), parts) {
                return Some(s);
            }
            at = (at + 1) & mask;
        }
    }
}
