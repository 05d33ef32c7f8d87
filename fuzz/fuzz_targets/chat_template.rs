//! Chat templates on arbitrary text: a template that does not parse or
//! fails to render is an error, never a panic, and fuel ends runaway
//! loops (scripts/fuzz fails an input slower than 20 s).
//!
//!     scripts/fuzz 600 chat_template
#![no_main]

use ggraph_model::chat_template::{ChatMessage, ChatTemplate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(template) = ChatTemplate::new(source, "<s>", "</s>") else {
        return;
    };
    let messages = [
        ChatMessage::new("system", "You are a helpful assistant."),
        ChatMessage::new("user", "Hello! {{ not a tag }} 你好 🦀\n"),
        ChatMessage::new("assistant", "<think>\nhm\n</think>\n\nHi."),
        ChatMessage::new("user", "Bye"),
    ];
    let Some(now) = fixed_now() else {
        return;
    };
    let _ = template.render_at(&messages, true, now);
    let template = template.with_added_tokens(true, true);
    let _ = template.render_at(&messages[1..2], false, now);
});

/// A fixed date, so that a crash reproduces whatever day it is run.
fn fixed_now() -> Option<ggraph_model::chat_template::NaiveDateTime> {
    ggraph_model::chat_template::NaiveDateTime::parse_from_str(
        "2025-03-09T14:15:16",
        "%Y-%m-%dT%H:%M:%S",
    )
    .ok()
}
