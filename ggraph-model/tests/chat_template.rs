//! Chat templates render byte for byte as llama.cpp renders them: every
//! case of fixtures/chat_templates/rendered.json, which llama.cpp's own
//! `common_chat_templates_apply` wrote (see `make-fixtures` there).

use ggraph_model::chat_template::{ChatMessage, ChatTemplate, NaiveDateTime};
use ggraph_model::serde_json::{self, Value};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/chat_templates/rendered.json"
);

fn fixtures() -> Value {
    let text = std::fs::read_to_string(FIXTURES).expect("rendered.json is readable");
    serde_json::from_str(&text).expect("rendered.json is JSON")
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("'{key}' is a string in {v}"))
}

/// The message raised by `raise_exception`, out of llama.cpp's error text.
fn raised_message(llama_error: &str) -> Option<&str> {
    let at = llama_error.rfind("Jinja Exception: ")?;
    Some(llama_error[at + "Jinja Exception: ".len()..].trim_end())
}

/// Where two texts first differ, for a readable failure.
fn first_difference(ours: &str, theirs: &str) -> String {
    let at = ours
        .bytes()
        .zip(theirs.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    let show = |s: &str| {
        let mut from = at.saturating_sub(40).min(s.len());
        while !s.is_char_boundary(from) {
            from -= 1;
        }
        let mut to = (at + 40).min(s.len());
        while !s.is_char_boundary(to) {
            to += 1;
        }
        format!("{:?}", &s[from..to])
    };
    format!(
        "first difference at byte {at}: ours {} | llama.cpp {}",
        show(ours),
        show(theirs)
    )
}

#[test]
fn every_fixture_renders_as_llama_cpp_renders_it() {
    let fx = fixtures();
    let now = NaiveDateTime::parse_from_str(text(&fx, "now"), "%Y-%m-%dT%H:%M:%S")
        .expect("'now' is a date and time");
    let sets = &fx["message_sets"];
    let templates = fx["templates"].as_array().expect("templates is a list");
    assert!(templates.len() >= 7, "{} templates", templates.len());

    let mut failures = Vec::new();
    let (mut rendered, mut errors) = (0, 0);
    for t in templates {
        let name = text(t, "name");
        let template = match ChatTemplate::new(text(t, "source"), text(t, "bos"), text(t, "eos")) {
            Ok(template) => template.with_added_tokens(
                t["add_bos"].as_bool().unwrap_or(false),
                t["add_eos"].as_bool().unwrap_or(false),
            ),
            Err(e) => {
                failures.push(format!("{name}: does not parse: {e}"));
                continue;
            }
        };
        if let Some(llama) = t["caps"]["supports_system_role"].as_bool()
            && template.supports_system_role() != llama
        {
            failures.push(format!(
                "{name}: supports_system_role is {}, llama.cpp found {llama}",
                template.supports_system_role()
            ));
        }
        for case in t["cases"].as_array().expect("cases is a list") {
            let set = text(case, "messages");
            let add_generation_prompt = case["add_generation_prompt"].as_bool().unwrap_or(false);
            let messages: Vec<ChatMessage> = sets[set]
                .as_array()
                .unwrap_or_else(|| panic!("message set '{set}' is a list"))
                .iter()
                .map(|m| ChatMessage::new(text(m, "role"), text(m, "content")))
                .collect();
            let what = format!("{name} / {set} / add_generation_prompt={add_generation_prompt}");
            let ours = template.render_at(&messages, add_generation_prompt, now);
            match (&ours, case.get("rendered"), case.get("error")) {
                (Ok(ours), Some(theirs), _) => {
                    let theirs = theirs.as_str().expect("rendered is a string");
                    if ours == theirs {
                        rendered += 1;
                    } else {
                        failures.push(format!("{what}: {}", first_difference(ours, theirs)));
                    }
                }
                (Err(ours), None, Some(theirs)) => {
                    let theirs = theirs.as_str().expect("error is a string");
                    match raised_message(theirs) {
                        Some(raised) if !ours.to_string().contains(raised) => {
                            failures
                                .push(format!("{what}: our error does not say {raised:?}: {ours}"));
                        }
                        _ => errors += 1,
                    }
                }
                (Ok(ours), None, Some(theirs)) => failures.push(format!(
                    "{what}: llama.cpp fails ({theirs}), we render {ours:?}"
                )),
                (Err(ours), Some(theirs), _) => failures.push(format!(
                    "{what}: llama.cpp renders {theirs}, we fail: {ours}"
                )),
                _ => failures.push(format!("{what}: the case has neither rendered nor error")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from llama.cpp:\n{}",
        failures.len(),
        failures.len() + rendered + errors,
        failures.join("\n")
    );
    eprintln!(
        "{rendered} cases render as llama.cpp renders them, {errors} fail as they fail there"
    );
    // the fixtures hold both kinds of case
    assert!(
        rendered > 0 && errors > 0,
        "{rendered} rendered, {errors} errors"
    );
}

#[test]
fn the_real_gguf_template_is_in_the_fixtures() {
    let fx = fixtures();
    let templates = fx["templates"].as_array().expect("templates is a list");
    let gguf = templates
        .iter()
        .find(|t| t["from"] == "gguf")
        .expect("a template read from a GGUF");
    assert!(text(gguf, "source").contains("<|im_start|>"));
    assert_eq!(text(gguf, "bos"), "<|im_start|>");
    assert_eq!(text(gguf, "eos"), "<|im_end|>");
}

/// The fuel of a render grows with the conversation: a long one through
/// every fixture template renders (or fails as its short form does), it
/// does not run out.
#[test]
fn a_long_conversation_does_not_run_out_of_fuel() {
    let fx = fixtures();
    let now = NaiveDateTime::parse_from_str(text(&fx, "now"), "%Y-%m-%dT%H:%M:%S")
        .expect("'now' is a date and time");
    let turn = "All work and no play makes Jack a dull boy. ".repeat(40);
    let mut messages = vec![ChatMessage::new("system", "You are a helpful assistant.")];
    for _ in 0..500 {
        messages.push(ChatMessage::new("user", turn.as_str()));
        messages.push(ChatMessage::new("assistant", turn.as_str()));
    }
    messages.push(ChatMessage::new("user", "And now?"));
    for t in fx["templates"].as_array().expect("templates is a list") {
        let name = text(t, "name");
        let short_renders = t["cases"]
            .as_array()
            .expect("cases is a list")
            .iter()
            .any(|c| c["messages"] == "system_user_assistant_user" && c.get("rendered").is_some());
        if !short_renders {
            continue;
        }
        let template = ChatTemplate::new(text(t, "source"), text(t, "bos"), text(t, "eos"))
            .expect("the fixture template parses");
        let out = template
            .render_at(&messages, true, now)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(out.len() > 1000 * turn.len(), "{name}: {} bytes", out.len());
    }
}

/// Templates written to exhaust time, memory or the stack: each ends,
/// quickly, in an error or a bounded output, never a panic or a hang.
#[test]
fn hostile_templates_end_quickly() {
    let hostile = [
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "{{ 'a' * 1000000000000 }}",
        "{{ range(1000000000000000000) | length }}",
        "{{ messages * 100000000 }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% set ns = namespace(x=1) %}{% set ns.x = ns %}{{ ns }}{{ ns | tojson }}",
        "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(0) }}",
        "{{ 'a' | indent(1000000000000) }}",
        "{{ 'a' | center(1000000000000) }}",
        "{{ '{:>1000000000}'.format(1) }}",
        "{{ '%1000000000d' | format(1) }}",
        "{{ 'abc'.replace('', 'x' * 1000000) }}",
        "{{ ('x' * 1000000).split('') }}",
        "{{ range(100000) | batch(1000000000000) | list | length }}",
        "{{ range(100000) | tojson(indent=1000000000000) }}",
        "{{ range(100000) | list | tojson(indent=100000) }}",
        "{{ 9223372036854775807 + 1 }}{{ -9223372036854775807 - 10 }}{{ 10 // 0 }}",
        "{{ 2 ** 100000000 }}",
        "{{ 1e308 * 1e308 }}{{ (1e308 * 1e308) | int }}",
        "{{ strftime_now('%Y' * 10000) }}",
        "{{ raise_exception() }}{{ raise_exception(none) }}",
        "{{ messages[9223372036854775807] }}{{ messages[-9223372036854775807:] }}",
    ];
    let deep_brackets = format!("{{{{ {}1{} }}}}", "[".repeat(5000), "]".repeat(5000));
    let deep_ifs = format!(
        "{}x{}",
        "{% if true %}".repeat(5000),
        "{% endif %}".repeat(5000)
    );
    let deep_parens = format!("{{{{ {}1{} }}}}", "(".repeat(100000), ")".repeat(100000));
    let messages = [ChatMessage::new("user", "Hi")];
    for source in hostile.iter().copied().chain([
        deep_brackets.as_str(),
        deep_ifs.as_str(),
        deep_parens.as_str(),
    ]) {
        let start = std::time::Instant::now();
        let result =
            ChatTemplate::new(source, "<s>", "</s>").and_then(|t| t.render(&messages, true));
        let took = start.elapsed();
        let shown: String = source.chars().take(80).collect();
        assert!(took.as_secs_f64() < 10.0, "{shown}: {took:?}");
        if let Ok(out) = result {
            assert!(out.len() < 1 << 28, "{shown}: {} bytes", out.len());
        }
    }
}
