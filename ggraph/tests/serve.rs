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
use ggraph::model::chat_template::ChatMessage;
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
        .args(["--port", "0", "--cpu-only"])
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
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
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
    assert!(data[data.len() - 2].contains("\"usage\""), "{text}");

    // a stop string ends the text before it
    let (_, c) = post(
        &s.addr,
        "/v1/completions",
        json!({"prompt": "The capital of France is", "temperature": 0, "max_tokens": 16,
               "stop": ["."]}),
    );
    assert_eq!(c["choices"][0]["text"], " Paris");
    assert_eq!(c["choices"][0]["finish_reason"], "stop");

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

#[test]
fn concurrent_requests_each_get_what_they_get_alone() {
    let Some(q8) = model_path() else { return };
    let model = q8.with_file_name("F16.gguf");
    let s = serve(&model, &["-np", "4", "-c", "512"]);
    let prompts = [
        "The capital of France is",
        "Once upon a time",
        "List three colors:",
        "1, 2, 3,",
    ];
    let body = |p: &str| {
        json!({"prompt": p, "temperature": 0, "max_tokens": 24, "logprobs": 2}).to_string()
    };
    // each token, and its two most likely alternatives' log probabilities
    let steps = |v: &Value| -> Vec<(String, f64)> {
        v["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let top = t["top_logprobs"].as_array().unwrap();
                let gap = top[0]["logprob"].as_f64().unwrap() - top[1]["logprob"].as_f64().unwrap();
                (t["token"].as_str().unwrap().to_string(), gap)
            })
            .collect()
    };
    let ask = |addr: &str, p: &str| {
        let (status, text) = http(addr, "POST", "/v1/completions", Some(&body(p)));
        assert_eq!(status, 200, "{text}");
        steps(&serde_json::from_str(&text).unwrap())
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
        // up to the first close call, every token is the same
        let decisive = a
            .iter()
            .position(|(_, gap)| *gap < CLOSE_CALL)
            .unwrap_or(a.len());
        let same = a.iter().zip(t).take_while(|(x, y)| x.0 == y.0).count();
        assert!(same >= decisive, "{p:?}: alone {a:?}\ntogether {t:?}");
        compared += decisive;
    }
    assert!(compared >= 24, "only {compared} decisive steps compared");
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
    // no slot runs anything, no cell is held
    let (_, slots) = http(&s.addr, "GET", "/slots", None);
    let slots: Value = serde_json::from_str(&slots).unwrap();
    assert_eq!(slots[0]["is_processing"], false, "{slots}");
    let (status, metrics) = http(&s.addr, "GET", "/metrics", None);
    assert_eq!(status, 200);
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
