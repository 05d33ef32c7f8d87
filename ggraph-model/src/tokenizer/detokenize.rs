//! Tokens back to text, as llama.cpp's `token_to_piece` and `detokenize`:
//! each token's piece (spaces for `▁`, bytes for byte tokens and for the
//! byte-level alphabet), and the vocabulary's space cleaning. Pieces are
//! bytes: a character may span several tokens.

use super::byte_level;
use super::vocab::{TokenAttr, Vocab, VocabKind};

const SPACE_MARK: &str = "\u{2581}";

fn byte_of_piece(text: &str) -> u8 {
    // `<0xXX>`: llama.cpp reads the two hex digits with strtol (0 when
    // they are not hex)
    text.get(3..5)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

/// The bytes of a byte-level BPE piece; a character outside the byte
/// alphabet is spelled out as llama.cpp does.
fn byte_level_bytes(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match byte_level::char_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut utf8 = [0u8; 4];
                for b in c.encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// A token's piece with special tokens rendered (their text), appended
/// to `out`.
pub(crate) fn append_piece(v: &Vocab, id: i32, out: &mut Vec<u8>) {
    let t = &v.tokens[id as usize];
    let special = TokenAttr::UNKNOWN
        .with(TokenAttr::CONTROL)
        .with(TokenAttr::USER_DEFINED);
    if t.attr.has(special) {
        out.extend_from_slice(t.text.as_bytes());
    } else if t.attr.has(TokenAttr::NORMAL) {
        match &v.kind {
            VocabKind::Bpe(pre) if pre.byte_level => byte_level_bytes(&t.text, out),
            VocabKind::Bpe(pre) if !pre.escape_spaces => out.extend_from_slice(t.text.as_bytes()),
            _ => out.extend_from_slice(t.text.replace(SPACE_MARK, " ").as_bytes()),
        }
    } else if t.attr.has(TokenAttr::BYTE) {
        out.push(byte_of_piece(&t.text));
    }
}

/// llama.cpp's `clean_up_tokenization_spaces`: no space before `?!.,`, none
/// around a lone apostrophe, none before `'s`, `'m`, `'re`, `'ve`. The
/// passes work in place on the bytes, as llama.cpp's do.
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    let t = text;
    let n1 = t.len();
    let mut total = usize::from(n1 > 0);
    for i in 1..n1 {
        let x = t[i];
        if t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        t[total] = x;
        total += 1;
    }
    let n2 = total;
    total = usize::from(n2 > 0);
    let mut i = 1;
    while i < n2 {
        let x = t[i];
        if x == b'\'' && i + 1 < n2 && t[i - 1] == b' ' && t[i + 1] == b' ' {
            total -= 1;
            i += 1;
            t[i] = 0;
        }
        t[total] = x;
        total += 1;
        i += 1;
    }
    let n3 = total;
    total = usize::from(n3 > 0);
    for i in 1..n3 {
        let x = t[i];
        if t[i - 1] == b' ' && x == b'\'' && i + 1 < n3 {
            let x1 = t[i + 1];
            if matches!(x1, b's' | b'm') {
                total -= 1;
            } else if i + 2 < n3 {
                let x2 = t[i + 2];
                if matches!(x1, b'r' | b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);
}

/// Text produced token by token, released only in whole characters: a
/// token that ends inside a UTF-8 sequence is held until the tokens after
/// it complete the sequence.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// A decoder holding no bytes.
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// The text that `bytes` completes (possibly empty). Bytes that can
    /// never be valid UTF-8 come out as U+FFFD rather than blocking the
    /// stream.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // valid_up_to is a char boundary
                    out.push_str(std::str::from_utf8(&self.pending[..good]).unwrap_or(""));
                    match e.error_len() {
                        // an incomplete sequence at the end: wait for more
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{fffd}');
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// What is still held, as text (an unfinished sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_cleaning_follows_llama_cpp() {
        let clean = |s: &str| {
            let mut b = s.as_bytes().to_vec();
            clean_spaces(&mut b);
            String::from_utf8(b).unwrap()
        };
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("it ' s"), "it's");
        assert_eq!(clean("he 's here , we 're"), "he's here, we're");
        assert_eq!(clean("don 't"), "don 't");
        assert_eq!(clean(""), "");
    }

    #[test]
    fn a_split_character_waits_for_its_last_byte() {
        let mut d = StreamDecoder::new();
        let euro = "€".as_bytes();
        assert_eq!(d.push(b"a"), "a");
        assert_eq!(d.push(&euro[..1]), "");
        assert_eq!(d.push(&euro[1..2]), "");
        assert_eq!(d.push(&euro[2..]), "€");
        assert_eq!(d.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(d.push(&euro[..2]), "");
        assert_eq!(d.finish(), "\u{fffd}");
    }
}
