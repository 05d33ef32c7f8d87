//! Chat templates: the Jinja of a GGUF's `tokenizer.chat_template`,
//! rendered as llama.cpp renders it (its `common/chat.cpp` on its own
//! Jinja engine, `common/jinja/`) for a conversation of plain role/content
//! messages and no tools.
//!
//! What llama.cpp does, and so what [`ChatTemplate`] does:
//!
//! - The source: `\r\n` and `\r` become `\n` and one trailing newline is
//!   dropped; `trim_blocks` and `lstrip_blocks` are on; the Hugging Face
//!   `{% generation %}` tags are ignored. llama.cpp's two patches of known
//!   templates (gpt-oss's and Mistral's `[TOOL_CALLS]` content checks) are
//!   applied to the source the same way.
//! - The messages: `developer` becomes `system` (except in gpt-oss
//!   templates, which have `<|channel|>`). A template that never reads the
//!   system message's content (probed once, when the template is made, as
//!   llama.cpp's `caps_get` does) gets the first system message merged into
//!   the next one (`system + "\n" + next`), or dropped when it is alone:
//!   gemma-2's raises on a system role, so its system prompt is merged
//!   into the first user turn instead.
//! - The context: `messages`, `bos_token`, `eos_token`,
//!   `enable_thinking = true`, `date_string` (`09 Mar 2025`) and
//!   `datetime` (`Mar 09 2025`) of the local time, and
//!   `add_generation_prompt`, only when it is true (undefined otherwise).
//!   No `tools`.
//! - The functions and filters: `raise_exception(msg)` fails the render
//!   with `Jinja Exception: msg`; `strftime_now(format)` formats the local
//!   time; `tojson` writes `, ` and `: ` separators and keeps non-ASCII text;
//!   `trim` and the Python string methods `strip`, `split` and their kin
//!   follow llama.cpp (ASCII whitespace; `split()` splits at spaces); the
//!   other Python methods (`startswith`, `items`, ...) come from
//!   `minijinja-contrib`'s pycompat. Booleans print as `True`/`False` and
//!   none as `None`.
//! - The result: when the vocabulary adds BOS itself, a BOS the template
//!   wrote at the start is removed (and EOS at the end likewise):
//!   [`ChatTemplate::with_added_tokens`].
//! - Two of llama.cpp's per-family handlers change a plain conversation:
//!   gpt-oss's (without a generation prompt, the last `<|return|>` becomes
//!   `<|end|>`) and Ministral 3's (system and assistant content as a list
//!   of one text block). Its other handlers differ only with tools,
//!   reasoning content or a continued message, which ggraph does not pass.
//!   Nor does it convert string content to typed blocks for templates that
//!   take only those: none of the templates llama.cpp ships does.
//!
//! A template is arbitrary input, so the work is bounded: every render has
//! a fuel budget (instructions and bytes made, scaled by the size of the
//! messages) and a recursion limit, so that a runaway loop ends in an error
//! rather than a hang; printing a list or map, `string`, `trim` and
//! `tojson` pay for every item first and refuse values nested too deep;
//! `str.format` takes `{}` placeholders only, as llama.cpp's does.
//!
//! Two holes remain in minijinja 3.1's fuel, both out of reach of a
//! template that llama.cpp renders: a list added to itself in a loop
//! (`{% set ns.l = ns.l + ns.l %}` 33 times) is copied out (2^33 items)
//! before it is paid for, and a list repeated lazily (`[x] * 10**8`, which
//! llama.cpp refuses) is turned into text by `~` and by minijinja's string
//! filters (`lower`, `replace`, ...) without paying for its items.

mod builtins;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ggraph_core::error::{Error, Result};
use minijinja::value::{Enumerator, Object, ObjectRepr, Value};
use minijinja::{Environment, ErrorKind, UndefinedBehavior};

/// The local date and time a render sees (`date_string`, `strftime_now`).
pub use chrono::NaiveDateTime;

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ... (`developer` is read as `system`)
    pub role: String,
    /// The message's text, which the template reads as `message.content`.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role` saying `content`; the role is not checked here.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A parsed chat template with the BOS and EOS texts of its vocabulary.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The Jinja text it was made from.
    source: String,
    bos_token: String,
    eos_token: String,
    supports_system_role: bool,
    /// gpt-oss keeps the `developer` role
    keeps_developer_role: bool,
    /// llama.cpp's gpt-oss handler: without a generation prompt, the last
    /// `<|return|>` becomes `<|end|>`
    gpt_oss: bool,
    /// llama.cpp's Ministral 3 handler: system and assistant content as a
    /// list of one text block
    ministral_3: bool,
    /// StepFun: message text is trimmed before rendering
    trims_content: bool,
    strip_bos: bool,
    strip_eos: bool,
}

/// The name of the one template in the environment, as errors show it.
const NAME: &str = "chat_template";

/// Fuel of every render (about 64 bytes of data or one instruction each):
/// real templates need a few thousand per message, so this is far more
/// than any of them uses, and it bounds a hostile template to a fraction of
/// a second and about 128 MiB.
const BASE_FUEL: u64 = 2_000_000;
/// Fuel added per byte of message text, for conversations far longer than
/// the base budget covers.
const FUEL_PER_CONTENT_BYTE: u64 = 2;
/// The nesting depth of blocks, macro calls and expressions. minijinja
/// caps it at 500; less keeps the stack small on threads with small stacks.
const RECURSION_LIMIT: usize = 200;

impl ChatTemplate {
    /// Parses `source` (the Jinja text of `tokenizer.chat_template`).
    /// `bos_token` and `eos_token` are the texts of the vocabulary's BOS and
    /// EOS tokens (`""` when it has none), as the template sees them.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let original = source.to_string();
        let source = prepare_source(source);
        let keeps_developer_role = source.contains("<|channel|>");
        // common_chat_try_specialized_template's first two tests, in order
        let ministral_3 = ["[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]"]
            .iter()
            .all(|m| source.contains(m))
            && !source.contains("[CALL_ID]");
        let gpt_oss = !ministral_3 && source.contains("<|channel|>");
        let trims_content =
            source.contains("You have access to the following functions in JSONSchema format");
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                // prepare_source has dropped the trailing newline already
                .keep_trailing_newline(true)
                .build()
                .map_err(|e| template_error("has a syntax configuration error", &e))?,
        );
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_debug(false);
        builtins::install(&mut env);
        env.add_template_owned(NAME, source)
            .map_err(|e| template_error("does not parse", &e))?;
        let mut template = ChatTemplate {
            env,
            source: original,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            supports_system_role: true,
            keeps_developer_role,
            gpt_oss,
            ministral_3,
            trims_content,
            strip_bos: false,
            strip_eos: false,
        };
        template.supports_system_role = template.probe_system_role();
        Ok(template)
    }

    /// The Jinja text the template was made from (as llama-server's
    /// `/props` shows it).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// As llama.cpp with a model: when the vocabulary adds BOS to a prompt
    /// itself (`tokenizer.ggml.add_bos_token`), a BOS at the start of the
    /// rendered text is removed, so that the prompt does not get two; when
    /// it adds EOS, an EOS at the end is removed. Both are off by default
    /// (llama.cpp with a template and no model).
    pub fn with_added_tokens(mut self, add_bos: bool, add_eos: bool) -> ChatTemplate {
        self.strip_bos = add_bos;
        self.strip_eos = add_eos;
        self
    }

    /// Whether the template is gpt-oss's Harmony format (llama.cpp's
    /// gpt-oss handler): the answer comes in channels, which
    /// [`crate::harmony::HarmonySplitter`] splits.
    pub fn is_harmony(&self) -> bool {
        self.gpt_oss
    }

    /// Whether the template reads a system message's content; when it does
    /// not, a leading system message is merged into the next one.
    pub fn supports_system_role(&self) -> bool {
        self.supports_system_role
    }

    /// Renders `messages`, with the assistant's header after them when
    /// `add_generation_prompt`, at the local time of now.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_at(
            messages,
            add_generation_prompt,
            chrono::Local::now().naive_local(),
        )
    }

    /// [`render`](Self::render) at the given local date and time.
    pub fn render_at(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        now: NaiveDateTime,
    ) -> Result<String> {
        let messages = self.prepare_messages(messages);
        let content_bytes: usize = messages.iter().map(|m| m.content.len()).sum();
        let fuel =
            BASE_FUEL.saturating_add((content_bytes as u64).saturating_mul(FUEL_PER_CONTENT_BYTE));

        let mut env = self.env.clone();
        env.set_fuel(Some(fuel));
        builtins::install_clock(&mut env, now);

        let mut ctx: Vec<(&str, Value)> = vec![
            (
                "messages",
                messages
                    .iter()
                    .map(|m| self.message_value(m))
                    .collect::<Vec<_>>()
                    .into(),
            ),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
            ("enable_thinking", Value::from(true)),
            ("datetime", Value::from(now.format("%b %d %Y").to_string())),
            (
                "date_string",
                Value::from(now.format("%d %b %Y").to_string()),
            ),
        ];
        if add_generation_prompt {
            ctx.push(("add_generation_prompt", Value::from(true)));
        }
        let template = env
            .get_template(NAME)
            .map_err(|e| template_error("is missing", &e))?;
        let mut out = template
            .render(Value::from_pairs(ctx))
            .map_err(|e| template_error("failed to render", &e))?;

        if self.strip_bos && out.starts_with(&self.bos_token) {
            out.drain(..self.bos_token.len());
        }
        if self.strip_eos && out.ends_with(&self.eos_token) {
            out.truncate(out.len() - self.eos_token.len());
        }
        if self.gpt_oss
            && !add_generation_prompt
            && let Some(at) = out.rfind("<|return|>")
        {
            out.replace_range(at..at + "<|return|>".len(), "<|end|>");
        }
        Ok(out)
    }

    /// A message as the template sees it: `{role, content}`.
    fn message_value(&self, m: &ChatMessage) -> Value {
        let text = Value::from(m.content.as_str());
        let content = if self.ministral_3 && (m.role == "system" || m.role == "assistant") {
            Value::from(vec![Value::from_pairs([
                ("type", Value::from("text")),
                ("text", text),
            ])])
        } else {
            text
        };
        Value::from_pairs([("role", Value::from(m.role.as_str())), ("content", content)])
    }

    /// llama.cpp's workarounds on the messages, before they reach the
    /// template.
    fn prepare_messages(&self, messages: &[ChatMessage]) -> Vec<ChatMessage> {
        let mut out: Vec<ChatMessage> = messages.to_vec();
        if self.trims_content {
            for m in &mut out {
                m.content = trim_ascii_whitespace(&m.content).to_string();
            }
        }
        if !self.keeps_developer_role {
            for m in &mut out {
                if m.role == "developer" {
                    m.role = "system".to_string();
                }
            }
        }
        if !self.supports_system_role && out.first().is_some_and(|m| m.role == "system") {
            let system = out.remove(0);
            if let Some(next) = out.first_mut() {
                next.content = format!("{}\n{}", system.content, next.content);
            }
        }
        out
    }

    /// llama.cpp's system-role capability (`caps_get` in
    /// `common/jinja/caps.cpp`): render [system, user] and see whether the
    /// template read `messages[0].content`. A render that fails still
    /// counts what it read before failing.
    fn probe_system_role(&self) -> bool {
        let read = Arc::new(AtomicBool::new(false));
        let system = Value::from_object(ProbedMessage {
            role: "system",
            content: "System message",
            content_read: read.clone(),
        });
        let user = Value::from_pairs([
            ("role", Value::from("user")),
            ("content", Value::from("User message")),
        ]);
        let mut env = self.env.clone();
        env.set_fuel(Some(BASE_FUEL));
        builtins::install_clock(&mut env, chrono::Local::now().naive_local());
        let ctx = Value::from_pairs([
            ("messages", Value::from(vec![system, user])),
            ("tools", Value::from(Vec::<Value>::new())),
            ("bos_token", Value::from("")),
            ("eos_token", Value::from("")),
            ("add_generation_prompt", Value::from(true)),
        ]);
        if let Ok(template) = env.get_template(NAME) {
            // errors are part of the probe: only what was read counts
            let _ = template.render(ctx);
        }
        read.load(Ordering::Relaxed)
    }
}

/// A message of the system-role probe that notes when its content is read.
#[derive(Debug)]
struct ProbedMessage {
    role: &'static str,
    content: &'static str,
    content_read: Arc<AtomicBool>,
}

impl Object for ProbedMessage {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "role" => Some(Value::from(self.role)),
            "content" => {
                self.content_read.store(true, Ordering::Relaxed);
                Some(Value::from(self.content))
            }
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["role", "content"])
    }
}

/// The source as llama.cpp's lexer and `common_chat_templates_init` see it.
fn prepare_source(source: &str) -> String {
    let mut s = source.replace("\r\n", "\n").replace('\r', "\n");
    if source.ends_with('\n') {
        s.pop();
    }
    // llama.cpp's temporary patches of two templates' content checks
    if s.contains("<|channel|>") && s.contains("in message.content or") {
        s = s.replace(
            "{%- if \"<|channel|>analysis<|message|>\" in message.content or \
             \"<|channel|>final<|message|>\" in message.content %}",
            "{%- if false %}",
        );
    }
    if s.contains("[TOOL_CALLS]") && s.contains("if (message['content'] is none or") {
        s = s.replace(
            "{%- if (message['content'] is none or message['content'] == '' or \
             message['content']|length == 0) and (message['tool_calls'] is not defined or \
             message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
            "{%- if false %}",
        );
    }
    ignore_generation_tags(&s)
}

/// `{% generation %}` and `{% endgeneration %}` (Hugging Face's marks of
/// the assistant's text) are no-ops in llama.cpp; here they become an
/// `if true` block with the same whitespace control.
fn ignore_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        match parse_generation_tag(tag) {
            Some((len, end, lead, trail)) => {
                out.push_str("{%");
                out.push_str(lead);
                out.push_str(if end { " endif " } else { " if true " });
                out.push_str(trail);
                out.push_str("%}");
                rest = &tag[len..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `{%-? (end)?generation -?%}` at the start of `tag`: its length, whether
/// it ends the block, and its whitespace-control marks.
fn parse_generation_tag(tag: &str) -> Option<(usize, bool, &'static str, &'static str)> {
    let mut rest = tag.strip_prefix("{%")?;
    let lead = if let Some(r) = rest.strip_prefix('-') {
        rest = r;
        "-"
    } else {
        ""
    };
    rest = rest.trim_start_matches([' ', '\t', '\n']);
    let end = if let Some(r) = rest.strip_prefix("endgeneration") {
        rest = r;
        true
    } else {
        rest = rest.strip_prefix("generation")?;
        false
    };
    rest = rest.trim_start_matches([' ', '\t', '\n']);
    let trail = if let Some(r) = rest.strip_prefix('-') {
        rest = r;
        "-"
    } else {
        ""
    };
    rest = rest.strip_prefix("%}")?;
    Some((tag.len() - rest.len(), end, lead, trail))
}

/// C's `isspace` in the C locale, which llama.cpp trims with.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

fn trim_ascii_whitespace(s: &str) -> &str {
    s.trim_matches(is_c_space)
}

/// A minijinja error as ours: what failed, where, and why (with the
/// errors it wraps).
fn template_error(what: &str, e: &minijinja::Error) -> Error {
    let mut msg = format!("chat template {what}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    if e.kind() == ErrorKind::OutOfFuel {
        msg.push_str(
            " (the template did more work than any chat template needs: \
             a runaway loop, or a hostile template)",
        );
    }
    Error::InvalidArgument(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> NaiveDateTime {
        chrono::NaiveDate::from_ymd_opt(2025, 3, 9)
            .and_then(|d| d.and_hms_opt(14, 15, 16))
            .unwrap()
    }

    fn user(text: &str) -> Vec<ChatMessage> {
        vec![ChatMessage::new("user", text)]
    }

    #[test]
    fn a_syntax_error_is_an_error() {
        let err = ChatTemplate::new("{% for m in messages %}{{ m.content }}", "", "").unwrap_err();
        assert!(err.to_string().contains("does not parse"), "{err}");
    }

    #[test]
    fn an_unknown_filter_is_an_error() {
        let err = ChatTemplate::new("{{ messages | no_such_filter }}", "", "")
            .and_then(|t| t.render_at(&user("hi"), false, at()))
            .unwrap_err();
        assert!(err.to_string().contains("no_such_filter"), "{err}");
    }

    #[test]
    fn raise_exception_is_an_error_with_its_message() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'system' %}{{ raise_exception('Need a system prompt!') }}{% endif %}",
            "",
            "",
        )
        .unwrap();
        let err = t.render_at(&user("hi"), true, at()).unwrap_err();
        assert!(
            err.to_string()
                .contains("Jinja Exception: Need a system prompt!"),
            "{err}"
        );
    }

    #[test]
    fn a_runaway_loop_runs_out_of_fuel() {
        let t = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ i * j }}{% endfor %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let err = t.render_at(&user("hi"), true, at()).unwrap_err();
        assert!(err.to_string().contains("runaway loop"), "{err}");
    }

    #[test]
    fn doubling_a_string_runs_out_of_fuel_before_memory() {
        let t = ChatTemplate::new(
            "{% set ns = namespace(s='abcdefgh') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
            "",
            "",
        )
        .unwrap();
        let err = t.render_at(&user("hi"), true, at()).unwrap_err();
        assert!(err.to_string().contains("runaway loop"), "{err}");
    }

    #[test]
    fn deep_recursion_is_an_error() {
        let t = ChatTemplate::new(
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "",
            "",
        )
        .unwrap();
        assert!(t.render_at(&user("hi"), true, at()).is_err());
    }

    #[test]
    fn add_generation_prompt_is_undefined_when_false() {
        let t = ChatTemplate::new(
            "{{ add_generation_prompt is defined }}|{{ enable_thinking }}|{{ none }}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render_at(&user("hi"), false, at()).unwrap(),
            "False|True|None"
        );
        assert_eq!(
            t.render_at(&user("hi"), true, at()).unwrap(),
            "True|True|None"
        );
    }

    #[test]
    fn the_date_comes_from_the_clock() {
        let t = ChatTemplate::new(
            "{{ date_string }}|{{ datetime }}|{{ strftime_now('%Y-%m-%d %H:%M') }}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render_at(&user("hi"), false, at()).unwrap(),
            "09 Mar 2025|Mar 09 2025|2025-03-09 14:15"
        );
        let err = ChatTemplate::new("{{ strftime_now('%Q') }}", "", "")
            .and_then(|t| t.render_at(&user("hi"), false, at()))
            .unwrap_err();
        assert!(err.to_string().contains("strftime_now"), "{err}");
    }

    #[test]
    fn a_template_that_ignores_system_content_gets_it_merged() {
        let t = ChatTemplate::new(
            "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
             {% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}",
            "",
            "",
        )
        .unwrap();
        assert!(!t.supports_system_role());
        let msgs = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ];
        assert_eq!(
            t.render_at(&msgs, false, at()).unwrap(),
            "[user:Be brief.\nHi]"
        );
        assert_eq!(t.render_at(&msgs[..1], false, at()).unwrap(), "");
    }

    #[test]
    fn developer_is_system() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let msgs = [ChatMessage::new("developer", "x")];
        assert_eq!(t.render_at(&msgs, false, at()).unwrap(), "system:x");
    }

    #[test]
    fn added_tokens_are_stripped_when_the_vocabulary_adds_them() {
        let t = ChatTemplate::new("{{ bos_token }}x{{ eos_token }}", "<s>", "</s>").unwrap();
        assert_eq!(t.render_at(&user("hi"), false, at()).unwrap(), "<s>x</s>");
        let t = t.with_added_tokens(true, true);
        assert_eq!(t.render_at(&user("hi"), false, at()).unwrap(), "x");
    }

    #[test]
    fn source_newlines_and_generation_tags_are_as_llama_cpp_reads_them() {
        let t = ChatTemplate::new(
            "{% for m in messages %}\r\n{%- generation -%}\r\n{{ m.content }}{% endgeneration %}\r\n{% endfor %}\n",
            "",
            "",
        )
        .unwrap();
        assert_eq!(t.render_at(&user("hi"), false, at()).unwrap(), "hi");
    }

    #[test]
    fn tojson_and_python_methods_follow_llama_cpp() {
        let t = ChatTemplate::new(
            "{{ {'a': [1, 2.5, true, none], 'é': 'x\"y'} | tojson }}|{{ tojson('é', ensure_ascii=true) }}|\
             {{ ' a b '.split() | tojson }}|{{ '\u{3000}x '.strip() | tojson }}|{{ 'a,b'.startswith('a') }}|\
             {{ {'k': 1}.items() | list | length }}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render_at(&user("hi"), false, at()).unwrap(),
            "{\"a\": [1, 2.5, true, null], \"é\": \"x\\\"y\"}|\"\\u00e9\"|\
             [\"\", \"a\", \"b\", \"\"]|\"\u{3000}x\"|True|1"
        );
    }

    #[test]
    fn tojson_of_a_cycle_is_an_error() {
        let t = ChatTemplate::new(
            "{% set ns = namespace(x=1) %}{% set ns.x = ns %}{{ ns | tojson }}",
            "",
            "",
        )
        .unwrap();
        assert!(t.render_at(&user("hi"), false, at()).is_err());
    }
}
