//! gpt-oss's Harmony answers split into their channels as they stream.
//!
//! After the chat template's `<|start|>assistant`, gpt-oss writes one or
//! more messages, each a header, `<|message|>`, its text and an end:
//!
//! ```text
//! <|channel|>analysis<|message|>The user asks ...<|end|>
//! <|start|>assistant<|channel|>final<|message|>Paris.<|return|>
//! ```
//!
//! The header names the channel (`analysis`: the reasoning; `final`: the
//! answer; `commentary`: tool calls and preambles, with ` to=...` and
//! `<|constrain|>` after the name); `<|end|>` ends a message, `<|return|>`
//! and `<|call|>` the turn. [`HarmonySplitter`] takes the text of each
//! generated token with its special tokens written out (the tokenizer's
//! pieces with `special` on) and gives back the message text it completes,
//! tagged with its channel; headers and markers are never shown.

/// A Harmony channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Channel {
    /// The model's reasoning (`analysis`).
    Analysis,
    /// The answer (`final`); also text outside any message.
    Final,
    /// Tool calls and preambles (`commentary`).
    Commentary,
    /// A channel Harmony does not name.
    Other(String),
}

impl Channel {
    fn named(name: &str) -> Channel {
        match name {
            "analysis" => Channel::Analysis,
            "final" => Channel::Final,
            "commentary" => Channel::Commentary,
            other => Channel::Other(other.to_string()),
        }
    }
}

/// Text of one channel, as much as a token completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The channel of the message the text is in.
    pub channel: Channel,
    /// The message's text (never a header or a marker).
    pub text: String,
}

const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
const ENDS: [&str; 3] = ["<|end|>", "<|return|>", "<|call|>"];
/// A header longer than this is not one: its text is shown as the answer.
const MAX_HEADER: usize = 1024;

/// Splits a streamed Harmony answer into channels ([module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct HarmonySplitter {
    /// Bytes not yet given back: a header, or message text that may end
    /// in the first bytes of a marker or of a character.
    pending: Vec<u8>,
    /// The channel of the message being read; `None` in a header.
    body: Option<Channel>,
}

impl HarmonySplitter {
    /// A splitter at the start of the assistant's turn (in a header).
    pub fn new() -> HarmonySplitter {
        HarmonySplitter::default()
    }

    /// The text `piece` (a token's bytes, special tokens written out)
    /// completes, by channel.
    pub fn push(&mut self, piece: &[u8]) -> Vec<Segment> {
        self.pending.extend_from_slice(piece);
        let mut out = Vec::new();
        loop {
            match &self.body {
                None => {
                    let Some(at) = find(&self.pending, MESSAGE) else {
                        if self.pending.len() > MAX_HEADER {
                            // no header after all: the text is the answer
                            self.body = Some(Channel::Final);
                            continue;
                        }
                        break;
                    };
                    let header = String::from_utf8_lossy(&self.pending[..at]).into_owned();
                    self.pending.drain(..at + MESSAGE.len());
                    self.body = Some(channel_of(&header));
                }
                Some(channel) => {
                    let end = ENDS
                        .iter()
                        .filter_map(|m| find(&self.pending, m).map(|at| (at, m.len())))
                        .min();
                    let channel = channel.clone();
                    match end {
                        Some((at, len)) => {
                            let text: Vec<u8> = self.pending.drain(..at + len).take(at).collect();
                            push_text(&mut out, channel, &String::from_utf8_lossy(&text));
                            self.body = None;
                        }
                        None => {
                            let keep = held_back(&self.pending);
                            let upto = self.pending.len() - keep;
                            let text: Vec<u8> = self.pending.drain(..upto).collect();
                            push_text(&mut out, channel, &String::from_utf8_lossy(&text));
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// What is still held when the stream ends: the rest of an open
    /// message, or text that never had a header (shown as the answer).
    pub fn finish(&mut self) -> Vec<Segment> {
        let text = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
        let channel = self.body.take().unwrap_or(Channel::Final);
        let mut out = Vec::new();
        push_text(&mut out, channel, &text);
        out
    }
}

/// The channel a header names (its last `<|channel|>`, up to a space or
/// the next marker); the answer when it names none.
fn channel_of(header: &str) -> Channel {
    let Some(at) = header.rfind(CHANNEL) else {
        return Channel::Final;
    };
    let name = &header[at + CHANNEL.len()..];
    let name = name.split([' ', '<']).next().unwrap_or("").trim();
    Channel::named(name)
}

fn push_text(out: &mut Vec<Segment>, channel: Channel, text: &str) {
    if !text.is_empty() {
        out.push(Segment {
            channel,
            text: text.to_string(),
        });
    }
}

/// Where `needle` first occurs in `haystack`.
pub(crate) fn find(haystack: &[u8], needle: &str) -> Option<usize> {
    let needle = needle.as_bytes();
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Bytes at the end of `text` to hold back: the start of a marker that
/// may be completed by the next piece, or of a character.
fn held_back(text: &[u8]) -> usize {
    let marker = ENDS
        .iter()
        .flat_map(|m| (1..m.len()).rev().map(move |n| &m.as_bytes()[..n]))
        .filter(|prefix| text.ends_with(prefix))
        .map(|prefix| prefix.len())
        .max()
        .unwrap_or(0);
    marker.max(incomplete_char(text))
}

/// Bytes of a UTF-8 character begun at the end of `text` and not yet
/// finished.
pub(crate) fn incomplete_char(text: &[u8]) -> usize {
    for back in 1..=text.len().min(3) {
        let b = text[text.len() - back];
        if b & 0xC0 != 0x80 {
            let need = match b {
                0xF0..=0xF7 => 4,
                0xE0..=0xEF => 3,
                0xC0..=0xDF => 2,
                _ => 1,
            };
            return if need > back { back } else { 0 };
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pieces` through a splitter, the segments joined by channel in
    /// order of appearance.
    fn split(pieces: &[&[u8]]) -> Vec<(Channel, String)> {
        let mut s = HarmonySplitter::new();
        let mut out: Vec<(Channel, String)> = Vec::new();
        let mut segments: Vec<Segment> = pieces.iter().flat_map(|p| s.push(p)).collect();
        segments.extend(s.finish());
        for seg in segments {
            match out.last_mut() {
                Some((c, t)) if *c == seg.channel => t.push_str(&seg.text),
                _ => out.push((seg.channel, seg.text)),
            }
        }
        out
    }

    #[test]
    fn analysis_then_final_token_by_token() {
        let pieces: Vec<&[u8]> = vec![
            b"<|channel|>",
            b"analysis",
            b"<|message|>",
            b"The user",
            b" asks.",
            b"<|end|>",
            b"<|start|>",
            b"assistant",
            b"<|channel|>",
            b"final",
            b"<|message|>",
            b"Paris",
            b".",
            b"<|return|>",
        ];
        assert_eq!(
            split(&pieces),
            [
                (Channel::Analysis, "The user asks.".to_string()),
                (Channel::Final, "Paris.".to_string())
            ]
        );
    }

    #[test]
    fn a_commentary_header_with_a_recipient_and_a_format() {
        let text: &[u8] = b"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>";
        assert_eq!(
            split(&[text]),
            [(Channel::Commentary, "{\"city\":\"Oslo\"}".to_string())]
        );
    }

    #[test]
    fn markers_and_characters_split_across_pieces_are_held() {
        // "é" is C3 A9, split between two pieces; "<|end|>" in three
        let pieces: Vec<&[u8]> = vec![
            b"<|channel|>final<|message|>caf",
            b"\xC3",
            b"\xA9 <|",
            b"end",
            b"|>",
        ];
        let mut s = HarmonySplitter::new();
        let shown: Vec<Vec<Segment>> = pieces.iter().map(|p| s.push(p)).collect();
        assert_eq!(shown[1], []);
        assert_eq!(shown[2][0].text, "é ");
        assert!(shown[3].is_empty());
        assert!(s.finish().is_empty());
        assert_eq!(split(&pieces), [(Channel::Final, "café ".to_string())]);
    }

    #[test]
    fn text_without_a_header_is_the_answer() {
        assert_eq!(
            split(&[b"Just text."]),
            [(Channel::Final, "Just text.".to_string())]
        );
        let long = vec![b'x'; MAX_HEADER + 1];
        let mut s = HarmonySplitter::new();
        assert_eq!(s.push(&long)[0].channel, Channel::Final);
    }

    #[test]
    fn an_unfinished_message_comes_out_at_the_end() {
        assert_eq!(
            split(&[b"<|channel|>analysis<|message|>Thinking", b" still"]),
            [(Channel::Analysis, "Thinking still".to_string())]
        );
    }
}
