//! A chat model's reasoning split from its answer as the answer streams,
//! in the format its chat template teaches it: gpt-oss's Harmony channels
//! ([`crate::harmony`]), or reasoning between two tags, which llama-server
//! takes out of the content the same way: Gemma 4's `<|channel>thought`
//! ... `<channel|>`, and the `<think>` ... `</think>` of DeepSeek-R1, Qwen3
//! and their kin.
//!
//! [`ReasoningSplitter`] takes the text of each generated token with its
//! special tokens written out and gives back the text it completes,
//! tagged as reasoning ([`Channel::Analysis`]) or answer
//! ([`Channel::Final`]); the tags themselves are never shown.

use crate::chat_template::ChatTemplate;
use crate::harmony::{Channel, HarmonySplitter, Segment, find, incomplete_char};

/// How a chat template's model writes its reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// gpt-oss's Harmony channels: `analysis` is the reasoning.
    Harmony,
    /// Reasoning between an opening and a closing tag, before (or between)
    /// the answer's text.
    Tagged {
        /// The tag that opens the reasoning (`<think>`).
        open: &'static str,
        /// The tag that closes it (`</think>`).
        close: &'static str,
    },
}

/// Gemma 4's thought channel.
pub const GEMMA4_THOUGHT: ReasoningFormat = ReasoningFormat::Tagged {
    open: "<|channel>thought",
    close: "<channel|>",
};

/// DeepSeek-R1's and Qwen3's thinking tags.
pub const THINK_TAGS: ReasoningFormat = ReasoningFormat::Tagged {
    open: "<think>",
    close: "</think>",
};

impl ReasoningFormat {
    /// The format the template's answers come in, if they carry
    /// reasoning: Harmony for gpt-oss's template, Gemma 4's thought
    /// channel or thinking tags where the template writes them.
    pub fn of_template(template: &ChatTemplate) -> Option<ReasoningFormat> {
        let source = template.source();
        if template.is_harmony() {
            Some(ReasoningFormat::Harmony)
        } else if source.contains("<|channel>") && source.contains("<channel|>") {
            Some(GEMMA4_THOUGHT)
        } else if source.contains("<think>") && source.contains("</think>") {
            Some(THINK_TAGS)
        } else {
            None
        }
    }
}

/// Splits a streamed answer into reasoning and answer ([module
/// docs](self)).
#[derive(Clone, Debug)]
pub enum ReasoningSplitter {
    /// Harmony's channels.
    Harmony(HarmonySplitter),
    /// Reasoning between tags.
    Tagged(TagSplitter),
}

impl ReasoningSplitter {
    /// A splitter for an answer in `format` to the rendered `prompt`: a
    /// prompt that ends with the opening tag (a template that opens the
    /// reasoning itself) starts it in the reasoning.
    pub fn new(format: ReasoningFormat, prompt: &str) -> ReasoningSplitter {
        match format {
            ReasoningFormat::Harmony => ReasoningSplitter::Harmony(HarmonySplitter::new()),
            ReasoningFormat::Tagged { open, close } => {
                let mut s = TagSplitter::new(open, close);
                if prompt.trim_end().ends_with(open) {
                    s.in_reasoning = true;
                    s.at_start = true;
                }
                ReasoningSplitter::Tagged(s)
            }
        }
    }

    /// The text `piece` (a token's bytes, special tokens written out)
    /// completes, by channel.
    pub fn push(&mut self, piece: &[u8]) -> Vec<Segment> {
        match self {
            ReasoningSplitter::Harmony(s) => s.push(piece),
            ReasoningSplitter::Tagged(s) => s.push(piece),
        }
    }

    /// What is still held when the stream ends.
    pub fn finish(&mut self) -> Vec<Segment> {
        match self {
            ReasoningSplitter::Harmony(s) => s.finish(),
            ReasoningSplitter::Tagged(s) => s.finish(),
        }
    }
}

/// Splits text on an opening and a closing tag: what is between them is
/// reasoning (the spaces right after the opening tag dropped, as
/// llama.cpp's parsers drop them), the rest the answer; a closing tag with
/// no reasoning open is dropped.
#[derive(Clone, Debug)]
pub struct TagSplitter {
    open: &'static str,
    close: &'static str,
    /// Bytes not yet given back: text that may end in the first bytes of
    /// a tag or of a character.
    pending: Vec<u8>,
    in_reasoning: bool,
    /// Right after an opening tag: spaces are not yet text.
    at_start: bool,
}

impl TagSplitter {
    /// A splitter outside the reasoning.
    pub fn new(open: &'static str, close: &'static str) -> TagSplitter {
        TagSplitter {
            open,
            close,
            pending: Vec::new(),
            in_reasoning: false,
            at_start: false,
        }
    }

    fn channel(&self) -> Channel {
        match self.in_reasoning {
            true => Channel::Analysis,
            false => Channel::Final,
        }
    }

    /// The text `piece` completes, by channel.
    pub fn push(&mut self, piece: &[u8]) -> Vec<Segment> {
        self.pending.extend_from_slice(piece);
        let mut out = Vec::new();
        loop {
            if self.at_start {
                let spaces = self.pending.iter().take_while(|b| b.is_ascii_whitespace());
                let n = spaces.count();
                self.pending.drain(..n);
                if self.pending.is_empty() {
                    break;
                }
                self.at_start = false;
            }
            // inside, the closing tag; outside, the opening one or a stray
            // closing one
            let tags: &[&str] = match self.in_reasoning {
                true => &[self.close],
                false => &[self.open, self.close],
            };
            let found = tags
                .iter()
                .filter_map(|t| find(&self.pending, t).map(|at| (at, *t)))
                .min();
            let channel = self.channel();
            match found {
                Some((at, tag)) => {
                    let text: Vec<u8> = self.pending.drain(..at + tag.len()).take(at).collect();
                    push_text(&mut out, channel, &text);
                    if tag == self.open {
                        self.in_reasoning = true;
                        self.at_start = true;
                    } else {
                        self.in_reasoning = false;
                    }
                }
                None => {
                    let keep = self.held_back();
                    let upto = self.pending.len() - keep;
                    let text: Vec<u8> = self.pending.drain(..upto).collect();
                    push_text(&mut out, channel, &text);
                    break;
                }
            }
        }
        out
    }

    /// What is still held when the stream ends (an unclosed reasoning
    /// stays reasoning).
    pub fn finish(&mut self) -> Vec<Segment> {
        let text = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        push_text(&mut out, self.channel(), &text);
        out
    }

    /// Bytes at the end of the pending text to hold back: the start of a
    /// tag the next piece may complete, or of a character.
    fn held_back(&self) -> usize {
        let text = &self.pending;
        let tag = [self.open, self.close]
            .iter()
            .flat_map(|t| (1..t.len()).map(move |n| &t.as_bytes()[..n]))
            .filter(|prefix| text.ends_with(prefix))
            .map(|prefix| prefix.len())
            .max()
            .unwrap_or(0);
        tag.max(incomplete_char(text))
    }
}

fn push_text(out: &mut Vec<Segment>, channel: Channel, text: &[u8]) {
    if !text.is_empty() {
        out.push(Segment {
            channel,
            text: String::from_utf8_lossy(text).into_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pieces` through a splitter, the segments joined by channel in
    /// order of appearance.
    fn split(format: ReasoningFormat, prompt: &str, pieces: &[&str]) -> Vec<(Channel, String)> {
        let mut s = ReasoningSplitter::new(format, prompt);
        let mut segments: Vec<Segment> = pieces.iter().flat_map(|p| s.push(p.as_bytes())).collect();
        segments.extend(s.finish());
        let mut out: Vec<(Channel, String)> = Vec::new();
        for seg in segments {
            match out.last_mut() {
                Some((c, t)) if *c == seg.channel => t.push_str(&seg.text),
                _ => out.push((seg.channel, seg.text)),
            }
        }
        out
    }

    fn reasoning(t: &str) -> (Channel, String) {
        (Channel::Analysis, t.to_string())
    }

    fn answer(t: &str) -> (Channel, String) {
        (Channel::Final, t.to_string())
    }

    #[test]
    fn gemma4s_thought_channel_token_by_token() {
        let pieces = [
            "<|channel>",
            "thought",
            "\n",
            "The user",
            " asks.",
            "<channel|>",
            "Paris",
            ".",
        ];
        assert_eq!(
            split(GEMMA4_THOUGHT, "<|turn>model\n", &pieces),
            [reasoning("The user asks."), answer("Paris.")]
        );
    }

    #[test]
    fn an_answer_without_reasoning_is_all_answer() {
        let prompt = "<|turn>model\n<|channel>thought\n<channel|>";
        assert_eq!(
            split(GEMMA4_THOUGHT, prompt, &["Paris", "."]),
            [answer("Paris.")]
        );
        assert_eq!(split(THINK_TAGS, "", &["Hi <", "b>"]), [answer("Hi <b>")]);
    }

    #[test]
    fn a_prompt_that_opens_the_reasoning_starts_in_it() {
        let pieces = ["Hmm", ", easy.", "</th", "ink>", "\n\n4"];
        assert_eq!(
            split(THINK_TAGS, "<|Assistant|><think>\n", &pieces),
            [reasoning("Hmm, easy."), answer("\n\n4")]
        );
    }

    #[test]
    fn tags_and_characters_split_across_pieces_are_held() {
        let mut s = ReasoningSplitter::new(THINK_TAGS, "");
        assert!(s.push(b"<th").is_empty());
        assert!(s.push(b"ink>  ").is_empty());
        assert_eq!(s.push(b"caf\xC3")[0].text, "caf");
        assert_eq!(s.push(b"\xA9</think>ok")[0].text, "é");
        assert!(s.finish().is_empty());
    }

    #[test]
    fn an_unclosed_reasoning_stays_reasoning_and_a_stray_close_is_dropped() {
        assert_eq!(
            split(THINK_TAGS, "", &["<think>still", " thinking"]),
            [reasoning("still thinking")]
        );
        assert_eq!(
            split(GEMMA4_THOUGHT, "", &["Paris.", "<channel|>"]),
            [answer("Paris.")]
        );
    }

    #[test]
    fn the_format_comes_from_the_template() {
        let t = |src: &str| ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let gemma4 = "{% for m in messages %}<|turn>{{ m.content }}<turn|>{% endfor %}\
                      {% if add_generation_prompt %}<|turn>model\n<|channel>thought\n<channel|>{% endif %}";
        assert_eq!(
            ReasoningFormat::of_template(&t(gemma4)),
            Some(GEMMA4_THOUGHT)
        );
        let qwen3 = "{% for m in messages %}{{ m.content }}{% endfor %}<think>\n\n</think>";
        assert_eq!(ReasoningFormat::of_template(&t(qwen3)), Some(THINK_TAGS));
        let plain = "{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(ReasoningFormat::of_template(&t(plain)), None);
    }
}
