//! GPT-2's byte-level alphabet: every byte as a printable character, so
//! that any text is a string of vocabulary characters. Bytes that print
//! (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) stand for themselves; the others take
//! the characters from U+0100 on, in byte order.

use std::sync::OnceLock;

fn prints(b: u8) -> bool {
    matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff)
}

struct Tables {
    to_char: [char; 256],
    /// By character code, up to the last one used (U+0143).
    from_char: [Option<u8>; 0x144],
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let mut to_char = ['\0'; 256];
        let mut from_char = [None; 0x144];
        let mut next = 0x100u32;
        for b in 0..=255u8 {
            let code = if prints(b) {
                b as u32
            } else {
                next += 1;
                next - 1
            };
            // codes stop at U+0143: all are chars
            to_char[b as usize] = char::from_u32(code).unwrap_or('\u{fffd}');
            from_char[code as usize] = Some(b);
        }
        Tables { to_char, from_char }
    })
}

/// The character that stands for byte `b`.
pub fn byte_char(b: u8) -> char {
    tables().to_char[b as usize]
}

/// The byte a character stands for, `None` for characters outside the
/// alphabet.
pub fn char_byte(c: char) -> Option<u8> {
    tables().from_char.get(c as usize).copied().flatten()
}

/// `bytes` spelled in the alphabet.
pub fn encode(bytes: &[u8], out: &mut String) {
    out.extend(bytes.iter().map(|&b| byte_char(b)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_and_space_is_g_dot() {
        for b in 0..=255u8 {
            assert_eq!(char_byte(byte_char(b)), Some(b));
        }
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(char_byte('€'), None);
    }
}
