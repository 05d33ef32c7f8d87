//! `ggraph serve` as a client meets it, over HTTP on loopback: the
//! endpoints, answers equal to the library's own generation at
//! temperature 0, concurrent streamed requests each equal to the same
//! request alone (continuous batching changes no token), a client that
//! goes away frees its slot, and bad requests get 400 naming the field.
//! On the real model (SmolLM2 Q8_0, `GGRAPH_REAL_GGUF`, as scripts/test
//! sets it; skipped without it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::Pooling;
use ggraph::model::chat_template::ChatMessage;
use ggraph::model::embedding::{Normalize, embed};
use ggraph::model::generation::{self, Hooks, Request};
use ggraph::model::sampling::{SamplingParams, TokenSampler};
use ggraph::runner;
use serde_json::{Value, json};

struct Serve {
    child: Child,
    addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn model_path() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("GGRAPH_REAL_GGUF") else {
        eprintln!("serve: GGRAPH_REAL_GGUF unset: not checked (scripts/test sets it)");
        return None;
    };
    Some(PathBuf::from(dir).join("Q8_0.gguf"))
}

/// Starts `ggraph serve` on a free port and waits until it is ready.
fn serve(model: &Path, args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ggraph"))
        .arg("serve")
        .arg(model)
        .args(["--port", "0"])
        // the host's CPU unless the test names remote devices
        .args(if args.contains(&"--rpc") {
            &[][..]
        } else {
            &["--cpu-only"][..]
        })
        .args(args)
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let addr = loop {
        let line = lines
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("serve ended:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split("ready on http://").nth(1) {
            break rest.split(':').take(2).collect::<Vec<_>>().join(":");
        }
    };
    // keep draining stderr so the server never blocks on it
    std::thread::spawn(move || for _ in lines {});
    Serve { child, addr }
}

/// One HTTP/1.1 request; the status and the body (chunked bodies joined).
fn http(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    http_with(addr, method, path, body, "")
}

/// [`http`] with more header lines (each ending in `\r\n`).
fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         {headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let (status, text) = http(addr, "POST", path, Some(&body.to_string()));
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: {text}")),
    )
}

/// The `data:` payloads of an SSE body.
fn sse(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// The text a streamed completion carried, and its finish reason.
fn streamed_text(body: &str) -> (String, Option<String>) {
    let mut text = String::new();
    let mut finish = None;
    for d in sse(body) {
        if d == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&d).unwrap();
        if let Some(c) = v["choices"].get(0) {
            text.push_str(
                c["text"]
                    .as_str()
                    .or(c["delta"]["content"].as_str())
                    .unwrap_or(""),
            );
            if let Some(f) = c["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
        }
    }
    (text, finish)
}

#[test]
fn the_endpoints_answer_as_openai_and_llama_server_shape_them() {
    let Some(model) = model_path() else { return };
    let s = serve(&model, &["-np", "2", "--alias", "smollm2"]);
    let (status, body) = http(&s.addr, "GET", "/health", None);
    assert_eq!((status, body.as_str()), (200, "{\"status\":\"ok\"}"));
    let (status, models) = http(&s.addr, "GET", "/v1/models", None);
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["id"], "smollm2");

    // llama-server's /props: slots, the model's file and template, the
    // sampling defaults (llama.cpp's unless the GGUF sets its own)
    let (status, props) = http(&s.addr, "GET", "/props", None);
    assert_eq!(status, 200);
    let props: Value = serde_json::from_str(&props).unwrap();
    assert_eq!(props["total_slots"], 2, "{props}");
    assert!(
        props["model_path"].as_str().unwrap().ends_with("Q8_0.gguf"),
        "{props}"
    );
    assert!(
        props["chat_template"]
            .as_str()
            .unwrap()
            .contains("im_start"),
        "{props}"
    );
    let params = &props["default_generation_settings"]["params"];
    assert_eq!(params["top_k"], 40, "{props}");
    assert_eq!(params["samplers"][0], "penalties", "{props}");
    // a generative model's server computes no embeddings (501)
    let (status, e) = post(&s.addr, "/v1/embeddings", json!({"input": "hi"}));
    assert_eq!(status, 501, "{e}");

    let (status, t) = post(&s.addr, "/tokenize", json!({"content": "Hello world"}));
    assert_eq!(status, 200);
    let (status, d) = post(&s.addr, "/detokenize", json!({"tokens": t["tokens"]}));
    assert_eq!((status, d["content"].as_str()), (200, Some("Hello world")));

    // at temperature 0 the chat answer is the library's greedy answer
    let question = "What is 2+2?";
    let (status, chat) = post(
        &s.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": question}], "temperature": 0,
               "max_tokens": 40}),
    );
    assert_eq!(status, 200, "{chat}");
    let answer = chat["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(answer, library_answer(&model, question, 40));
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    let usage = &chat["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );

    // streamed: the same text, a usage chunk, [DONE]
    let body = json!({"messages": [{"role": "user", "content": question}], "temperature": 0,
                      "max_tokens": 40, "stream": true, "stream_options": {"include_usage": true}});
    let (status, text) = http(
        &s.addr,
        "POST",
        "/v1/chat/completions",
        Some(&body.to_string()),
    );
    assert_eq!(status, 200);
    let (streamed, finish) = streamed_text(&text);
    assert_eq!(
        (streamed.as_str(), finish.as_deref()),
        (answer, Some("stop"))
    );
    let data = sse(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    // the same prompt again: its slot's cache held all of it but the
    // last token, which is decoded again for its logits
    let usage: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    let prompt_tokens = usage["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        usage["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
        Some(prompt_tokens - 1),
        "{usage}"
    );

    // a stop string ends the text before it
    let (_, c) = post(
        &s.addr,
        "/v1/completions",
        json!({"prompt": "The capital of France is", "temperature": 0, "max_tokens": 16,
               "stop": ["."]}),
    );
    assert_eq!(c["choices"][0]["text"], " Paris");
    assert_eq!(c["choices"][0]["finish_reason"], "stop");

    // llama-server's own /completion: the same text, its stop fields,
    // token probabilities; streamed, an event a token and a last summary
    let (status, n) = post(
        &s.addr,
        "/completion",
        json!({"prompt": "The capital of France is", "temperature": 0, "n_predict": 16,
               "stop": ["."], "n_probs": 2, "return_tokens": true}),
    );
    assert_eq!(status, 200, "{n}");
    assert_eq!(n["content"], " Paris", "{n}");
    assert_eq!(
        (
            n["stop"].as_bool(),
            n["stop_type"].as_str(),
            n["stopping_word"].as_str()
        ),
        (Some(true), Some("word"), Some(".")),
        "{n}"
    );
    let predicted = n["tokens_predicted"].as_u64().unwrap() as usize;
    assert_eq!(n["tokens"].as_array().map(Vec::len), Some(predicted), "{n}");
    let probs = n["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), predicted, "{n}");
    assert_eq!(probs[0]["top_logprobs"].as_array().map(Vec::len), Some(2));
    assert_eq!(probs[0]["id"], n["tokens"][0], "{n}");
    let body = json!({"prompt": "Once upon a time", "temperature": 0, "n_predict": 6,
                      "stream": true, "ignore_eos": true});
    let (status, text) = http(&s.addr, "POST", "/completion", Some(&body.to_string()));
    assert_eq!(status, 200);
    let events: Vec<Value> = sse(&text)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    let last = events.last().unwrap();
    assert_eq!(
        (last["stop"].as_bool(), last["stop_type"].as_str()),
        (Some(true), Some("limit")),
        "{text}"
    );
    assert_eq!(events.len(), 7, "six tokens and the summary: {text}");
    let streamed: String = events
        .iter()
        .filter_map(|e| e["content"].as_str())
        .collect();
    let (_, whole) = post(
        &s.addr,
        "/completion",
        json!({"prompt": "Once upon a time", "temperature": 0, "n_predict": 6, "ignore_eos": true}),
    );
    assert_eq!(
        whole["content"].as_str(),
        Some(streamed.as_str()),
        "{whole}"
    );

    // JSON mode: the answer is a JSON object
    let (status, j) = post(
        &s.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "A person as JSON"}], "seed": 3,
               "max_tokens": 200,
               "response_format": {"type": "json_schema", "json_schema": {"schema": {
                   "type": "object", "properties": {"name": {"type": "string"}},
                   "required": ["name"], "additionalProperties": false}}}}),
    );
    assert_eq!(status, 200, "{j}");
    let content = j["choices"][0]["message"]["content"].as_str().unwrap();
    let v: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {content}"));
    assert!(v["name"].is_string(), "{v}");

    // logprobs: the token's and its alternatives', as OpenAI lists them
    let (_, lp) = post(
        &s.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": question}], "temperature": 0,
               "max_tokens": 3, "logprobs": true, "top_logprobs": 2}),
    );
    let first = &lp["choices"][0]["logprobs"]["content"][0];
    assert!(first["logprob"].as_f64().is_some_and(|l| l <= 0.0), "{lp}");
    assert_eq!(
        first["top_logprobs"].as_array().map(Vec::len),
        Some(2),
        "{lp}"
    );
}

/// The library's greedy answer to `question` (the chat template, the
/// temperature-0 chain), as `llama --chat --temp 0` gives it.
fn library_answer(path: &Path, question: &str, n: usize) -> String {
    let model = runner::load_on_host(path.to_str().unwrap()).unwrap();
    let t = model.tokenizer().unwrap();
    let text = model
        .chat_template(&t)
        .unwrap()
        .render(&[ChatMessage::new("user", question)], true)
        .unwrap();
    let prompt = t.encode(&text, true, true).unwrap();
    let chain = SamplingParams::greedy()
        .chain(t.n_vocab(), Some(&t))
        .unwrap();
    let mut ctx = Context::new(
        model.clone(),
        ContextParams {
            n_ctx: 4096,
            ..ContextParams::default()
        },
    )
    .unwrap();
    let req = Request {
        n_predict: n,
        ..Request::default()
    };
    generation::generate(
        &mut ctx,
        &prompt,
        &mut TokenSampler::new(chain),
        Some(&t),
        &req,
        Hooks::default(),
    )
    .unwrap()
    .text
}

/// A step whose two most likely tokens are this close (in log
/// probability) may go either way when the batch around it changes: the
/// kernels' float order does (tests/real_gguf.rs measures the spread: 0.06
/// on F16).
const CLOSE_CALL: f64 = 0.25;

/// Each streamed token and the gap between its two most likely
/// candidates' log probabilities.
fn streamed_steps(body: &str) -> Vec<(String, f64)> {
    let mut steps = Vec::new();
    for d in sse(body) {
        if d == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&d).unwrap();
        let lp = &v["choices"][0]["logprobs"];
        if lp.is_null() {
            continue;
        }
        let entry = lp.get("content").map_or(lp, |c| &c[0]);
        let top = entry["top_logprobs"].as_array().unwrap();
        let gap = top[0]["logprob"].as_f64().unwrap() - top[1]["logprob"].as_f64().unwrap();
        steps.push((entry["token"].as_str().unwrap().to_string(), gap));
    }
    steps
}

#[test]
fn eight_concurrent_streams_each_get_what_they_get_alone() {
    let Some(q8) = model_path() else { return };
    let model = q8.with_file_name("F16.gguf");
    // four slots for eight requests: half wait in the queue
    let s = serve(&model, &["-np", "4", "-c", "256"]);
    let prompts = [
        "The capital of France is",
        "Once upon a time",
        "List three colors:",
        "1, 2, 3,",
        "The best way to learn",
        "def fibonacci(n):",
        "Water boils at",
        "My favourite animal is",
    ];
    let body = |p: &str| {
        json!({"prompt": p, "temperature": 0, "max_tokens": 16, "logprobs": 2, "stream": true,
               "cache_prompt": false, "ignore_eos": true})
        .to_string()
    };
    let ask = |addr: &str, p: &str| {
        let (status, text) = http(addr, "POST", "/v1/completions", Some(&body(p)));
        assert_eq!(status, 200, "{text}");
        assert_eq!(sse(&text).last().map(String::as_str), Some("[DONE]"));
        streamed_steps(&text)
    };
    let alone: Vec<_> = prompts.iter().map(|p| ask(&s.addr, p)).collect();
    let together: Vec<_> = std::thread::scope(|sc| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| {
                let addr = s.addr.clone();
                sc.spawn(move || ask(&addr, p))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut compared = 0;
    for (p, (a, t)) in prompts.iter().zip(alone.iter().zip(&together)) {
        assert_eq!(a.len(), 16, "{p:?}: {a:?}");
        // up to the first close call, every token is the same
        let decisive = a
            .iter()
            .position(|(_, gap)| *gap < CLOSE_CALL)
            .unwrap_or(a.len());
        let same = a.iter().zip(t).take_while(|(x, y)| x.0 == y.0).count();
        assert!(same >= decisive, "{p:?}: alone {a:?}\ntogether {t:?}");
        compared += decisive;
    }
    assert!(compared >= 48, "only {compared} decisive steps compared");
}

#[test]
fn a_client_that_goes_away_frees_its_slot_and_bad_requests_name_the_field() {
    let Some(model) = model_path() else { return };
    let s = serve(&model, &["-np", "1", "-c", "256"]);
    // a long stream, abandoned after its first bytes
    {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        let body = json!({"prompt": "Once upon a time", "max_tokens": 200, "stream": true,
                          "ignore_eos": true})
        .to_string();
        write!(
            c,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut first = [0u8; 64];
        c.read_exact(&mut first).unwrap();
    }
    // the only slot is free again: the next request is answered
    let (status, c) = post(
        &s.addr,
        "/v1/completions",
        json!({"prompt": "Hi", "max_tokens": 2, "temperature": 0}),
    );
    assert_eq!(status, 200, "{c}");
    // no slot runs anything; the only cells held are the last request's
    // (its slot's prompt cache), until the slot is erased
    let (_, slots) = http(&s.addr, "GET", "/slots", None);
    let slots: Value = serde_json::from_str(&slots).unwrap();
    assert_eq!(slots[0]["is_processing"], false, "{slots}");
    let cached = slots[0]["n_cached"].as_u64().unwrap();
    assert!(cached > 0, "{slots}");
    let (status, metrics) = http(&s.addr, "GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(
        metrics.contains(&format!("llamacpp:kv_cache_tokens {cached}\n")),
        "{metrics}"
    );
    let (status, erased) = post(&s.addr, "/slots/0?action=erase", json!({}));
    assert_eq!((status, erased["n_erased"].as_u64()), (200, Some(cached)));
    let (_, metrics) = http(&s.addr, "GET", "/metrics", None);
    assert!(
        metrics.contains("llamacpp:kv_cache_tokens 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("llamacpp:requests_processing 0\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("llamacpp:prompt_tokens_total 0\n"),
        "{metrics}"
    );

    for (path, body, says) in [
        (
            "/v1/chat/completions",
            json!({"messages": []}),
            "'messages'",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": "hi"}),
            "'messages'",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "top_p": 7}),
            "'top_p'",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "temperature": "hot"}),
            "'temperature'",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": -5}),
            "'max_tokens'",
        ),
        ("/v1/completions", json!({"prompt": [999999]}), "'prompt'"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
                   "reasoning_format": "thoughts"}),
            "'reasoning_format'",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "logit_bias": {"abc": 1}}),
            "'logit_bias'",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "response_format": {"type": "xml"}}),
            "xml",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "grammar": "root ::= nothing"}),
            "nothing",
        ),
        (
            "/v1/completions",
            json!({"prompt": "word ".repeat(400)}),
            "context",
        ),
    ] {
        let (status, e) = post(&s.addr, path, body.clone());
        assert_eq!(status, 400, "{body}: {e}");
        let msg = e["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(says), "{body}: {msg}");
    }
    let (status, raw) = http(&s.addr, "POST", "/v1/completions", Some("{not json"));
    assert_eq!(status, 400, "{raw}");

    // what the server does not do is 501, not ignored
    for (path, body, says) in [
        ("/v1/completions", json!({"prompt": "x", "n": 2}), "'n'"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
                   "tools": [{"type": "function", "function": {"name": "f"}}]}),
            "'tools'",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "image_url",
        ),
        ("/slots/0?action=save", json!({}), "save"),
    ] {
        let (status, e) = post(&s.addr, path, body.clone());
        assert_eq!(status, 501, "{body}: {e}");
        assert_eq!(e["error"]["type"], "not_supported_error", "{e}");
        let msg = e["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(says), "{body}: {msg}");
    }
    // an unknown endpoint, a wrong method, a body over the limit: each in
    // OpenAI's error shape
    for (method, path, status, says) in [
        ("GET", "/v2/nothing", 404, "/v2/nothing"),
        ("GET", "/v1/completions", 405, "GET"),
    ] {
        let (got, e) = http(&s.addr, method, path, None);
        let e: Value = serde_json::from_str(&e).unwrap();
        assert_eq!(got, status, "{e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(says),
            "{e}"
        );
    }
    let mut c = TcpStream::connect(&s.addr).unwrap();
    write!(
        c,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    c.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");
}

/// The official client (`openai` from PyPI, `scripts/openai-client`;
/// `GGRAPH_OPENAI_PYTHON` names its python, as scripts/test sets it):
/// chat and completions, streamed and not, JSON schema, a bad request.
#[test]
fn the_official_openai_client_works_against_it() {
    let Some(model) = model_path() else { return };
    let Some(python) = std::env::var_os("GGRAPH_OPENAI_PYTHON") else {
        eprintln!("serve: GGRAPH_OPENAI_PYTHON unset: the openai client is not run");
        return;
    };
    let s = serve(&model, &["-np", "2", "--alias", "smollm2"]);
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve/openai_client.py");
    let out = Command::new(python)
        .arg(script)
        .arg(format!("http://{}/v1", s.addr))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).unwrap();
    let answer = library_answer(&model, "What is 2+2?", 40);
    assert_eq!(r["chat"], answer.as_str());
    assert_eq!(r["chat_finish"], "stop");
    assert_eq!(r["chat_stream"], answer.as_str());
    assert_eq!(r["chat_stream_finish"], "stop");
    assert_eq!(r["chat_stream_usage"], r["chat_usage"]);
    assert_eq!(r["completion"], " Paris");
    let person: Value = serde_json::from_str(r["json"].as_str().unwrap()).unwrap();
    assert!(
        person["name"].is_string() && person["age"].is_i64(),
        "{person}"
    );
    assert_eq!(r["bad"][0], 400, "{r}");
    assert!(r["bad"][1].as_str().unwrap().contains("top_p"), "{r}");
    assert_eq!(r["models"], json!(["smollm2"]));
}

/// A request the server must refuse or cancel: no API key (401), and one
/// that waits in the queue longer than `--timeout` (408).
#[test]
fn an_api_key_is_required_and_a_request_waits_no_longer_than_the_timeout() {
    let Some(model) = model_path() else { return };
    let s = serve(
        &model,
        &[
            "-np",
            "1",
            "-c",
            "4096",
            "--api-key",
            "k3y",
            "--timeout",
            "1",
        ],
    );
    let body = json!({"prompt": "Hi", "max_tokens": 2}).to_string();
    // /health and /v1/models stay open, as llama-server's
    assert_eq!(http(&s.addr, "GET", "/health", None).0, 200);
    assert_eq!(http(&s.addr, "GET", "/v1/models", None).0, 200);
    for headers in ["", "Authorization: Bearer nope\r\n"] {
        let (status, e) = http_with(&s.addr, "POST", "/v1/completions", Some(&body), headers);
        assert_eq!(status, 401, "{e}");
        assert!(e.contains("authentication_error"), "{e}");
    }
    for headers in ["Authorization: Bearer k3y\r\n", "X-Api-Key: k3y\r\n"] {
        let (status, e) = http_with(&s.addr, "POST", "/v1/completions", Some(&body), headers);
        assert_eq!(status, 200, "{e}");
    }
    // a long stream holds the only slot; the next request waits in the
    // queue past the timeout and is answered 408
    let mut long = TcpStream::connect(&s.addr).unwrap();
    let long_body = json!({"prompt": "Once upon a time", "max_tokens": 4000, "stream": true,
                           "ignore_eos": true})
    .to_string();
    write!(
        long,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3y\r\n\
         Content-Length: {}\r\n\r\n{long_body}",
        long_body.len()
    )
    .unwrap();
    let mut first = [0u8; 64];
    long.read_exact(&mut first).unwrap();
    let (status, e) = http_with(
        &s.addr,
        "POST",
        "/v1/completions",
        Some(&body),
        "Authorization: Bearer k3y\r\n",
    );
    assert_eq!(status, 408, "{e}");
    assert!(e.contains("timeout"), "{e}");
    drop(long);
}

/// With one unified cache (`--kv-unified`) a slot may take more than its
/// share of the context; when the cache fills, the fullest request ends
/// with "length" and the others go on; idle slots' caches give way.
#[test]
fn a_unified_cache_lends_a_slot_the_whole_context_and_a_full_cache_ends_a_request() {
    let Some(model) = model_path() else { return };
    // 2 x 64 = 128 cells: either slot may fill them all
    let s = serve(&model, &["-np", "2", "-c", "64", "--kv-unified"]);
    let long_prompt = "one two three four five six seven eight nine ten ".repeat(9);
    let (status, r) = post(
        &s.addr,
        "/v1/completions",
        json!({"prompt": long_prompt, "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(status, 200, "{r}");
    let prompt_tokens = r["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!((64..120).contains(&prompt_tokens), "{r}");

    // two requests that want 2 x 150 cells of 128: both are answered
    let ask = |addr: &str, p: &str| {
        post(
            addr,
            "/v1/completions",
            json!({"prompt": p, "max_tokens": 140, "ignore_eos": true, "temperature": 0}),
        )
    };
    let answers: Vec<(u16, Value)> = std::thread::scope(|sc| {
        let a = sc.spawn(|| ask(&s.addr, "The history of the Roman empire"));
        let b = sc.spawn(|| ask(&s.addr, "A recipe for bread"));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    let mut held = Vec::new();
    for (status, r) in &answers {
        assert_eq!(*status, 200, "{r}");
        assert_eq!(r["choices"][0]["finish_reason"], "length", "{r}");
        held.push(r["usage"]["total_tokens"].as_u64().unwrap());
    }
    // neither got its 140 tokens: a slot holds 128 cells at most, and the
    // first to find the cache full (both running) ended well before that
    held.sort();
    assert!(held[1] <= 128 && held[0] < 100, "{answers:?}");
    let (_, metrics) = http(&s.addr, "GET", "/metrics", None);
    let used: u64 = metric(&metrics, "llamacpp:kv_cache_tokens") as u64;
    assert!(used <= 128, "{metrics}");
    // idle slots' caches make room for the next request
    let (status, r) = post(
        &s.addr,
        "/v1/completions",
        json!({"prompt": long_prompt, "max_tokens": 8, "temperature": 0, "cache_prompt": false}),
    );
    assert_eq!(status, 200, "{r}");
}

/// A metric's value in Prometheus' text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// The server process's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb * 1024
}

/// A few hundred short requests from four clients, a third of them
/// abandoned at random (before an answer, or mid-stream): then no slot
/// runs, erasing the slots empties the cache, every request was answered
/// or cancelled, and the process has not grown.
#[test]
fn a_soak_of_short_requests_with_random_cancellations_leaks_nothing() {
    let Some(model) = model_path() else { return };
    let s = serve(&model, &["-np", "4", "-c", "128"]);
    let prompts = [
        "Hi",
        "The capital of France is",
        "Once upon a time there was",
        "List three colors:",
        "1, 2, 3,",
    ];
    let round = |from: u64, n: u64| {
        std::thread::scope(|sc| {
            for client in 0..4u64 {
                let addr = s.addr.clone();
                sc.spawn(move || {
                    // a small deterministic generator per client
                    let mut x = from * 7919 + client * 104_729 + 1;
                    let mut next = move || {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x
                    };
                    for _ in 0..n {
                        let p = prompts[(next() % 5) as usize];
                        let stream = next() % 2 == 0;
                        let body = json!({"prompt": p, "max_tokens": 1 + next() % 8,
                                          "stream": stream, "seed": next() % 1000})
                        .to_string();
                        match next() % 3 {
                            // abandoned: right after sending, or after the
                            // first bytes of the answer
                            0 => {
                                let mut c = TcpStream::connect(&addr).unwrap();
                                write!(
                                    c,
                                    "POST /v1/completions HTTP/1.1\r\nHost: x\r\n\
                                     Content-Length: {}\r\n\r\n{body}",
                                    body.len()
                                )
                                .unwrap();
                                if next() % 2 == 0 {
                                    let mut b = [0u8; 16];
                                    let _ = c.read(&mut b);
                                }
                            }
                            _ => {
                                let (status, text) =
                                    http(&addr, "POST", "/v1/completions", Some(&body));
                                assert_eq!(status, 200, "{text}");
                            }
                        }
                    }
                });
            }
        })
    };
    round(1, 15);
    let pid = s.child.id();
    let warm = rss(pid);
    round(2, 60);
    // the engine notices the last abandoned requests within a step
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = http(&s.addr, "GET", "/metrics", None).1;
        if metric(&metrics, "llamacpp:requests_processing") == 0.0
            && metric(&metrics, "llamacpp:requests_deferred") == 0.0
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        metric(&metrics, "llamacpp:requests_processing"),
        0.0,
        "{metrics}"
    );
    let done = metric(&metrics, "llamacpp:requests_done_total");
    let dropped = metric(&metrics, "llamacpp:requests_dropped_total");
    assert!(done + dropped <= 300.0 && done >= 150.0, "{metrics}");
    for slot in 0..4 {
        let (status, e) = post(&s.addr, &format!("/slots/{slot}?action=erase"), json!({}));
        assert_eq!(status, 200, "{e}");
    }
    let (_, metrics) = http(&s.addr, "GET", "/metrics", None);
    assert_eq!(
        metric(&metrics, "llamacpp:kv_cache_tokens"),
        0.0,
        "{metrics}"
    );
    let grown = rss(pid).saturating_sub(warm);
    assert!(
        grown < 24 << 20,
        "grew {grown} bytes over 240 requests (from {warm})"
    );
}

/// A remote device (a stock ggml-rpc-server) that goes away mid-service:
/// the requests it touches fail with 500 and a message, the server keeps
/// answering, and once the device is back it is recovered (weights
/// uploaded again) and requests give what they gave before.
#[test]
fn a_lost_device_fails_its_requests_and_is_recovered() {
    use ggraph::rpc::local_server::{LocalServer, server_binary};
    let Some(model) = model_path() else { return };
    if !server_binary().exists() {
        assert!(
            std::env::var("GGRAPH_REQUIRE_RPC").as_deref() != Ok("1"),
            "no {}: run scripts/rpc-server",
            server_binary().display()
        );
        eprintln!("SKIPPED: no ggml-rpc-server (scripts/rpc-server builds it)");
        return;
    }
    let mut rpc = LocalServer::start(1, None).unwrap();
    let endpoint = rpc.endpoint().to_string();
    let s = serve(
        &model,
        &["-np", "1", "-c", "256", "--rpc", &endpoint, "-ngl", "99"],
    );
    let body = json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
                      "cache_prompt": false});
    let (status, before) = post(&s.addr, "/v1/completions", body.clone());
    assert_eq!(status, 200, "{before}");

    let port = rpc.port();
    rpc.kill();
    let (status, e) = post(&s.addr, "/v1/completions", body.clone());
    assert_eq!(status, 500, "{e}");
    assert!(!e["error"]["message"].as_str().unwrap().is_empty(), "{e}");
    // the server still answers what needs no device
    assert_eq!(http(&s.addr, "GET", "/v1/models", None).0, 200);

    let _back = LocalServer::start_on(port, 1, None).unwrap();
    let mut answer = None;
    for _ in 0..20 {
        let (status, r) = post(&s.addr, "/v1/completions", body.clone());
        if status == 200 {
            answer = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let after = answer.expect("the device recovered within 10 s");
    assert_eq!(after["choices"][0]["text"], before["choices"][0]["text"]);
}

/// A hybrid model (Granite 4.0-H's Mamba-2 layers keep recurrent state per
/// slot; the architecture fixture, no real model needed): concurrent
/// requests get the tokens they get alone; a slot's state cannot be cut
/// back, so a prompt that shares only part of a slot's cache is read
/// afresh, while one that continues the whole cache reuses it and gives
/// the tokens of reading it all.
#[test]
fn a_hybrid_model_serves_concurrent_slots_and_reuses_whole_caches_only() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ggraph-model/tests/fixtures/arch/granitehybrid.gguf");
    let s = serve(&model, &["-np", "3", "-c", "128"]);
    let prompts: [Vec<i32>; 3] = [
        vec![1, 51, 88, 125, 162, 199, 236, 273, 25, 62],
        vec![1, 200, 150, 100, 50, 20, 10, 30, 40],
        vec![1, 7, 14, 21, 28, 35, 42],
    ];
    let ask = |addr: &str, prompt: &[i32], n: usize| -> (Vec<i64>, i64) {
        let (status, v) = post(
            addr,
            "/completion",
            json!({"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": true,
                   "ignore_eos": true}),
        );
        assert_eq!(status, 200, "{v}");
        let ids = v["tokens"].as_array().unwrap();
        let ids = ids.iter().map(|t| t.as_i64().unwrap()).collect();
        (ids, v["tokens_cached"].as_i64().unwrap())
    };
    let alone: Vec<_> = prompts.iter().map(|p| ask(&s.addr, p, 8).0).collect();
    let together: Vec<_> = std::thread::scope(|sc| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| {
                let addr = s.addr.clone();
                sc.spawn(move || ask(&addr, p, 8).0)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(alone, together);
    assert!(alone.iter().all(|a| a.len() == 8));

    // the same prompt again: its slot holds it and 7 of the 8 tokens
    // generated, one more than the new prompt shares, and cannot cut
    // its state back: read afresh, the same tokens
    let (again, cached) = ask(&s.addr, &prompts[0], 8);
    assert_eq!((again.clone(), cached), (alone[0].clone(), 0));
    // the prompt and all 8 tokens: a continuation of the whole cache
    // (the prompt and the 7 tokens decoded), which is kept
    let mut longer = prompts[0].clone();
    longer.extend(alone[0].iter().map(|&t| t as i32));
    let (cont, cached) = ask(&s.addr, &longer, 4);
    assert_eq!(cached, longer.len() as i64 - 1, "the whole cache kept");
    // asked again it shares all but its last token with the slot's
    // cache: read afresh, with the tokens the kept state gave
    let (read, cached) = ask(&s.addr, &longer, 4);
    assert_eq!((read, cached), (cont, 0));
}

/// The real embedding model (all-MiniLM-L6-v2, `GGRAPH_REAL_EMBEDDING`,
/// as scripts/test sets it; skipped without it).
fn embedding_model_path() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("GGRAPH_REAL_EMBEDDING") else {
        eprintln!(
            "serve: GGRAPH_REAL_EMBEDDING unset: embeddings not checked (scripts/test sets it)"
        );
        return None;
    };
    Some(PathBuf::from(dir).join("Q8_0.gguf"))
}

fn arch_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ggraph-model/tests/fixtures/arch")
        .join(format!("{name}.gguf"))
}

/// The library's embeddings of `texts`, normalised as the server's are.
fn library_embeddings(path: &Path, texts: &[&str], pooling: Option<Pooling>) -> Vec<Vec<f32>> {
    let tokenizer = runner::open_model(path.to_str().unwrap())
        .unwrap()
        .tokenizer()
        .unwrap();
    let inputs: Vec<Vec<i32>> = texts
        .iter()
        .map(|t| tokenizer.encode(t, true, true).unwrap())
        .collect();
    library_embeddings_of(path, &inputs, pooling)
}

/// The same of token ids.
fn library_embeddings_of(
    path: &Path,
    inputs: &[Vec<i32>],
    pooling: Option<Pooling>,
) -> Vec<Vec<f32>> {
    let desc = runner::open_model(path.to_str().unwrap()).unwrap();
    let model = ggraph::model::loaded::Model::load(
        &desc,
        &[],
        ggraph_cpu::CpuDevice::new(),
        &Default::default(),
        ggraph::model::loaded::LoadMode::Real,
        None,
    )
    .unwrap();
    let params = ContextParams {
        n_ctx: 4096,
        n_batch: 2048,
        n_ubatch: 512,
        n_seq_max: 64,
        embeddings: true,
        pooling,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(std::sync::Arc::new(model), params).unwrap();
    let norm = match pooling {
        Some(Pooling::Rank) => Normalize::None,
        _ => Normalize::PNorm(2),
    };
    embed(&mut ctx, inputs, norm).unwrap()
}

fn vectors(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

/// An embedding model served: `/v1/embeddings` gives the library's
/// vectors (as floats, and as base64 through the official client), many
/// inputs in one request; `/embedding` llama-server's shape; bad inputs
/// are 400s naming what is wrong; generations are refused.
#[test]
fn an_embedding_model_serves_the_librarys_vectors() {
    let Some(model) = embedding_model_path() else {
        return;
    };
    let s = serve(&model, &[]);
    let texts = [
        "The cat sits on the mat.",
        "A cat is sitting on a rug.",
        "Stocks fell.",
    ];
    let want = library_embeddings(&model, &texts, None);
    let (status, r) = post(
        &s.addr,
        "/v1/embeddings",
        json!({"input": texts, "model": "x"}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["object"], "list");
    assert_eq!(r["model"], "x");
    let got: Vec<Vec<f32>> = vectors(
        &r["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["embedding"].clone())
            .collect::<Value>(),
    );
    assert_eq!(got, want);
    let n_tokens = r["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(n_tokens > 20, "{r}");
    // token ids as input
    let ids: Vec<i32> = runner::open_model(model.to_str().unwrap())
        .unwrap()
        .tokenizer()
        .unwrap()
        .encode(texts[2], true, true)
        .unwrap();
    // (alone in its decode: the bits follow the batch, as llama.cpp's do)
    let alone = library_embeddings(&model, &texts[2..], None);
    let (_, r) = post(&s.addr, "/v1/embeddings", json!({"input": ids}));
    assert_eq!(vectors(&json!([r["data"][0]["embedding"]]))[0], alone[0]);
    // llama-server's own shape: a list of rows per input
    let (status, r) = post(&s.addr, "/embedding", json!({"content": texts[2]}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(vectors(&r[0]["embedding"])[0], alone[0]);

    for (body, named) in [
        (json!({"input": []}), "must not be empty"),
        (json!({"input": {"a": 1}}), "must be a string"),
        (json!({"nothing": 1}), "\"input\""),
        (json!({"input": "x", "encoding_format": "hex"}), "base64"),
        (json!({"input": [1, 99999]}), "vocabulary"),
        (json!({"input": "word ".repeat(600)}), "tokens"),
    ] {
        let (status, r) = post(&s.addr, "/v1/embeddings", body.clone());
        assert_eq!(status, 400, "{body}: {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(named), "{body}: {msg}");
    }
    let (_, r) = post(
        &s.addr,
        "/v1/embeddings",
        json!({"input": "word ".repeat(600)}),
    );
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("602 tokens") && msg.contains("512"), "{msg}");
    let (status, r) = post(
        &s.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(status, 501, "{r}");
    // it still serves after the bad requests
    let (status, _) = post(&s.addr, "/v1/embeddings", json!({"input": "ok"}));
    assert_eq!(status, 200);

    let Some(python) = std::env::var_os("GGRAPH_OPENAI_PYTHON") else {
        eprintln!("serve: GGRAPH_OPENAI_PYTHON unset: the openai client is not run");
        return;
    };
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve/openai_embeddings.py");
    let out = Command::new(python)
        .arg(script)
        .arg(format!("http://{}/v1", s.addr))
        .args(texts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(vectors(&r["base64"]), want);
    assert_eq!(vectors(&r["float"]), want);
    let alone = library_embeddings(&model, &texts[..1], None);
    assert_eq!(vectors(&json!([r["one"]]))[0], alone[0]);
    assert_eq!(r["usage"][0], n_tokens);
    assert_eq!(r["empty"][0], 400, "{r}");
}

/// A reranker served with `--reranking`: `/v1/rerank` scores each
/// document as the library does, highest first, in Jina's shape and
/// TEI's; a model without a classifier head fails at load; a generative
/// model asked for embeddings answers 501 as llama-server does.
#[test]
fn a_reranker_serves_scores_and_a_generative_model_refuses_embeddings() {
    let reranker = arch_fixture("bert_rank");
    let s = serve(&reranker, &["--reranking"]);
    let docs = ["hello world", "the a of", "I hello it"];
    // the pairs as the server joins them for this vocabulary (it adds BOS,
    // not EOS or SEP): BOS, the query, the document
    let vocab = runner::open_model(reranker.to_str().unwrap())
        .unwrap()
        .tokenizer()
        .unwrap();
    let v = vocab.vocab();
    assert!(v.add_bos && !v.add_eos && !v.add_sep);
    let pairs: Vec<Vec<i32>> = docs
        .iter()
        .map(|d| {
            let mut ids = vec![v.special.bos.unwrap()];
            ids.extend(vocab.encode("hello", false, false).unwrap());
            ids.extend(vocab.encode(d, false, false).unwrap());
            ids
        })
        .collect();
    let want = library_embeddings_of(&reranker, &pairs, Some(Pooling::Rank));
    let (status, r) = post(
        &s.addr,
        "/v1/rerank",
        json!({"query": "hello", "documents": docs, "top_n": 2}),
    );
    assert_eq!(status, 200, "{r}");
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let mut order: Vec<(usize, f32)> = want.iter().map(|v| v[0]).enumerate().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (got, (i, score)) in results.iter().zip(&order) {
        assert_eq!(got["index"], *i, "{r}");
        assert_eq!(
            got["relevance_score"].as_f64().unwrap() as f32,
            *score,
            "{r}"
        );
    }
    let (_, r) = post(
        &s.addr,
        "/rerank",
        json!({"query": "hello", "texts": docs, "return_text": true}),
    );
    assert_eq!(r.as_array().unwrap().len(), 3, "{r}");
    assert_eq!(r[0]["text"], docs[order[0].0], "{r}");
    assert!(r[0]["score"].is_number(), "{r}");
    let (status, r) = post(&s.addr, "/v1/rerank", json!({"documents": docs}));
    assert_eq!(status, 400, "{r}");
    let (status, r) = post(
        &s.addr,
        "/v1/rerank",
        json!({"query": "q", "documents": []}),
    );
    assert_eq!(status, 400, "{r}");
    drop(s);

    // a model without the head cannot rerank: it fails at load, naming it
    let out = Command::new(env!("CARGO_BIN_EXE_ggraph"))
        .args(["serve", arch_fixture("bert").to_str().unwrap()])
        .args(["--port", "0", "--cpu-only", "--reranking"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("classifier"), "{err}");

    // a generative model was not started for embeddings
    let s = serve(&arch_fixture("qwen3"), &[]);
    for path in ["/v1/embeddings", "/embedding"] {
        let (status, r) = post(&s.addr, path, json!({"input": "hello"}));
        assert_eq!(status, 501, "{r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains("--embeddings"), "{msg}");
    }
    let (status, r) = post(
        &s.addr,
        "/v1/rerank",
        json!({"query": "a", "documents": ["b"]}),
    );
    assert_eq!(status, 501, "{r}");
}
