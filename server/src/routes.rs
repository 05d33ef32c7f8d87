//! The HTTP routes: requests read ([`crate::request`]), jobs handed to
//! the engine, its events written back as OpenAI's JSON or SSE chunks.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream};
use ggraph_model::sampling::{GrammarVocab, TokenSampler};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::engine::{Event, Finish, Job, Refused};
use crate::request::{self, ApiError, GenRequest};
use crate::{Ready, Server};

pub fn router(server: Server) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/metrics", get(metrics))
        .route("/slots", get(slots))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .with_state(server)
}

fn error(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(e.body())).into_response();
    if e.status == 503 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// A JSON answer, or the error's.
fn json_or_error(r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => error(e),
    }
}

fn loading() -> ApiError {
    ApiError {
        status: 503,
        message: "Loading model".into(),
    }
}

fn ready(server: &Server) -> Result<&Ready, ApiError> {
    server.state().ok_or_else(loading)
}

fn json_body(bytes: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad(format!("the body is not JSON: {e}")))
}

async fn health(State(server): State<Server>) -> Response {
    match server.state() {
        Some(r) if r.engine.is_running() => axum::Json(json!({"status": "ok"})).into_response(),
        Some(_) => error(ApiError {
            status: 500,
            message: "the engine has stopped".into(),
        }),
        None => error(loading()),
    }
}

async fn models(State(server): State<Server>) -> Response {
    let name = &server.inner.model_name;
    let meta = server.state().map(|r| {
        json!({"n_vocab": r.engine.tokenizer.n_vocab(), "n_ctx_slot": r.engine.n_ctx_slot,
               "slots": r.engine.n_slots})
    });
    axum::Json(json!({
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "ggraph", "meta": meta}]
    }))
    .into_response()
}

/// Prometheus' text format, with llama-server's names (so its dashboards
/// read it).
async fn metrics(State(server): State<Server>) -> Response {
    let Some(r) = server.state() else {
        return error(loading());
    };
    use std::sync::atomic::Ordering::Relaxed;
    let c = &r.engine.counters;
    let ratio = c.cells_used.load(Relaxed) as f64 / r.engine.n_ctx.max(1) as f64;
    let rows = [
        (
            "prompt_tokens_total",
            "counter",
            "Prompt tokens decoded.",
            c.prompt_tokens.load(Relaxed) as f64,
        ),
        (
            "tokens_predicted_total",
            "counter",
            "Tokens generated.",
            c.generated_tokens.load(Relaxed) as f64,
        ),
        (
            "requests_done_total",
            "counter",
            "Requests finished.",
            c.jobs_done.load(Relaxed) as f64,
        ),
        (
            "kv_cache_usage_ratio",
            "gauge",
            "Cells of the KV cache in use, over all of them.",
            ratio,
        ),
        (
            "kv_cache_tokens",
            "gauge",
            "Cells of the KV cache in use.",
            c.cells_used.load(Relaxed) as f64,
        ),
        (
            "requests_processing",
            "gauge",
            "Requests in a slot.",
            c.busy.load(Relaxed) as f64,
        ),
        (
            "requests_deferred",
            "gauge",
            "Requests waiting for a slot.",
            c.waiting.load(Relaxed) as f64,
        ),
    ];
    let mut text = String::new();
    for (name, kind, help, value) in rows {
        text.push_str(&format!(
            "# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n"
        ));
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        text,
    )
        .into_response()
}

/// Each slot: whether it runs a request, and that request's counts.
async fn slots(State(server): State<Server>) -> Response {
    let Some(r) = server.state() else {
        return error(loading());
    };
    let list: Vec<Value> = r
        .engine
        .counters
        .slots
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(id, s)| {
            json!({"id": id, "n_ctx": r.engine.n_ctx_slot, "is_processing": s.is_some(),
                   "n_prompt_tokens": s.map_or(0, |x| x.0), "n_decoded": s.map_or(0, |x| x.1)})
        })
        .collect();
    axum::Json(Value::Array(list)).into_response()
}

async fn tokenize(State(server): State<Server>, body: Bytes) -> Response {
    let run = || -> Result<Value, ApiError> {
        let r = ready(&server)?;
        let b = json_body(&body)?;
        let text = b
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad("'content' must be a string"))?;
        let add_special = b
            .get("add_special")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let parse_special = b
            .get("parse_special")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let t = &r.engine.tokenizer;
        let ids = t
            .encode(text, add_special, parse_special)
            .map_err(|e| ApiError::bad(e.to_string()))?;
        if b.get("with_pieces")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            let pieces: Vec<Value> = ids
                .iter()
                .map(|&id| {
                    let p = t.piece(id, true).unwrap_or(&[]);
                    json!({"id": id, "piece": String::from_utf8_lossy(p)})
                })
                .collect();
            return Ok(json!({"tokens": pieces}));
        }
        Ok(json!({"tokens": ids}))
    };
    json_or_error(run())
}

async fn detokenize(State(server): State<Server>, body: Bytes) -> Response {
    let run = || -> Result<Value, ApiError> {
        let r = ready(&server)?;
        let b = json_body(&body)?;
        let t = &r.engine.tokenizer;
        let ids: Vec<i32> = b
            .get("tokens")
            .and_then(Value::as_array)
            .ok_or_else(|| ApiError::bad("'tokens' must be an array of token ids"))?
            .iter()
            .map(|v| {
                v.as_i64()
                    .filter(|&i| (0..t.n_vocab() as i64).contains(&i))
                    .map(|i| i as i32)
                    .ok_or_else(|| {
                        ApiError::bad(format!("'tokens': {v} is not a token of the vocabulary"))
                    })
            })
            .collect::<Result<_, _>>()?;
        let text = t
            .decode(&ids, false, false)
            .map_err(|e| ApiError::bad(e.to_string()))?;
        Ok(json!({"content": text}))
    };
    json_or_error(run())
}

/// Which endpoint a generation answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

async fn chat_completions(State(server): State<Server>, body: Bytes) -> Response {
    generate(server, body, Kind::Chat).await
}

async fn completions(State(server): State<Server>, body: Bytes) -> Response {
    generate(server, body, Kind::Completion).await
}

/// The sampler a request asks for: its chain, and its grammar compiled
/// over the vocabulary (indexed on the first request that needs it).
fn sampler(r: &Ready, req: &GenRequest) -> Result<TokenSampler, ApiError> {
    let t = &r.engine.tokenizer;
    let chain = req
        .params
        .chain(t.n_vocab(), Some(t))
        .map_err(|e| ApiError::bad(request::field_names(&e.to_string())))?;
    let Some(source) = &req.grammar else {
        return Ok(TokenSampler::new(chain));
    };
    let vocab = r
        .grammar_vocab
        .get_or_init(|| GrammarVocab::new(t).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| ApiError::bad(e.clone()))?;
    let g = vocab
        .compile(source)
        .map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(TokenSampler::constrained(chain, Box::new(g)))
}

async fn generate(server: Server, body: Bytes, kind: Kind) -> Response {
    let prepared = (|| {
        let r = ready(&server)?;
        let b = json_body(&body)?;
        let t = &r.engine.tokenizer;
        let req = match kind {
            Kind::Chat => {
                request::chat(&b, r.template.as_ref(), t, &r.defaults, r.engine.n_ctx_slot)?
            }
            Kind::Completion => request::completion(&b, t, &r.defaults, r.engine.n_ctx_slot)?,
        };
        let sampler = sampler(r, &req)?;
        let (tx, rx) = unbounded_channel();
        let job = Job {
            prompt: req.prompt.clone(),
            sampler,
            n_predict: req.n_predict.unwrap_or(usize::MAX),
            stop: req.stop.clone(),
            ignore_eos: req.ignore_eos,
            n_probs: req.logprobs.unwrap_or(0),
            events: tx,
        };
        r.engine.submit(job).map_err(|e| match e {
            Refused::Busy => ApiError {
                status: 503,
                message: "every slot is busy and the queue is full: try again".into(),
            },
            Refused::Stopped => ApiError {
                status: 500,
                message: "the engine has stopped".into(),
            },
        })?;
        Ok::<_, ApiError>((req, rx, r.engine.tokenizer.clone()))
    })();
    let (req, rx, tokenizer) = match prepared {
        Ok(p) => p,
        Err(e) => return error(e),
    };
    let answer = Answer {
        kind,
        id: format!(
            "{}-{}",
            if kind == Kind::Chat {
                "chatcmpl"
            } else {
                "cmpl"
            },
            next_id()
        ),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: server.inner.model_name.clone(),
        logprobs: req.logprobs,
        tokenizer,
    };
    if req.stream {
        stream_answer(answer, rx, req.include_usage).into_response()
    } else {
        whole_answer(answer, rx).await
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static ID: AtomicU64 = AtomicU64::new(1);
    ID.fetch_add(1, Ordering::Relaxed)
}

/// What every chunk of an answer repeats.
struct Answer {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    logprobs: Option<usize>,
    tokenizer: std::sync::Arc<ggraph_model::tokenizer::Tokenizer>,
}

impl Answer {
    fn piece(&self, id: i32) -> String {
        String::from_utf8_lossy(self.tokenizer.piece(id, true).unwrap_or(&[])).into_owned()
    }

    /// One token's log-probabilities in OpenAI's chat shape.
    fn logprob(&self, id: i32, p: f32, probs: &[(i32, f32)]) -> Value {
        let entry = |id: i32, p: f32| {
            let piece = self.piece(id);
            json!({"token": piece, "logprob": (p as f64).ln().max(-9999.0), "bytes": piece.as_bytes()})
        };
        let mut v = entry(id, p);
        v["top_logprobs"] = Value::Array(probs.iter().map(|&(t, q)| entry(t, q)).collect());
        v
    }

    fn usage(prompt: usize, generated: usize) -> Value {
        json!({"prompt_tokens": prompt, "completion_tokens": generated,
               "total_tokens": prompt + generated})
    }

    fn chunk(&self, choice: Value) -> Value {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
               "choices": [choice]})
    }

    fn text_choice(&self, text: &str, finish: Option<Finish>, logprobs: Option<Value>) -> Value {
        let finish = finish.map(Finish::as_str);
        match self.kind {
            Kind::Chat => json!({"index": 0, "delta": {"content": text},
                                 "logprobs": logprobs.map(|l| json!({"content": [l]})),
                                 "finish_reason": finish}),
            Kind::Completion => json!({"index": 0, "text": text, "logprobs": logprobs,
                                       "finish_reason": finish}),
        }
    }
}

async fn whole_answer(answer: Answer, mut rx: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token {
                id,
                text: t,
                p,
                probs,
            } => {
                text.push_str(&t);
                if answer.logprobs.is_some() {
                    logprobs.push(answer.logprob(id, p, &probs));
                }
            }
            Event::Done {
                finish,
                prompt_tokens,
                generated_tokens,
                tail,
                ..
            } => {
                text.push_str(&tail);
                let lp = answer.logprobs.map(|_| json!({"content": logprobs}));
                let choice = match answer.kind {
                    Kind::Chat => json!({"index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": lp, "finish_reason": finish.as_str()}),
                    Kind::Completion => json!({"index": 0, "text": text, "logprobs": lp,
                        "finish_reason": finish.as_str()}),
                };
                let object = match answer.kind {
                    Kind::Chat => "chat.completion",
                    Kind::Completion => "text_completion",
                };
                return axum::Json(json!({
                    "id": answer.id, "object": object, "created": answer.created,
                    "model": answer.model, "choices": [choice],
                    "usage": Answer::usage(prompt_tokens, generated_tokens)
                }))
                .into_response();
            }
            Event::Failed(msg) => {
                return error(ApiError {
                    status: 500,
                    message: msg,
                });
            }
        }
    }
    error(ApiError {
        status: 500,
        message: "the engine ended the request without an answer".into(),
    })
}

/// SSE: a first chunk (the assistant's role, for chat), a chunk a token,
/// a last one with the finish reason, the usage if asked, `[DONE]`.
fn stream_answer(
    answer: Answer,
    rx: UnboundedReceiver<Event>,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let first = (answer.kind == Kind::Chat).then(|| {
        answer.chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": ""},
                            "logprobs": null, "finish_reason": null}),
        )
    });
    let state = (answer, rx, first, Vec::<SseEvent>::new(), false);
    let events = stream::unfold(
        state,
        move |(answer, mut rx, mut first, mut queued, mut done)| async move {
            loop {
                if let Some(f) = first.take() {
                    let ev = SseEvent::default().data(f.to_string());
                    return Some((Ok(ev), (answer, rx, first, queued, done)));
                }
                if !queued.is_empty() {
                    let ev = queued.remove(0);
                    return Some((Ok(ev), (answer, rx, first, queued, done)));
                }
                if done {
                    return None;
                }
                let data = |v: Value| SseEvent::default().data(v.to_string());
                match rx.recv().await {
                    Some(Event::Token { id, text, p, probs }) => {
                        let lp = answer.logprobs.map(|_| answer.logprob(id, p, &probs));
                        queued.push(data(answer.chunk(answer.text_choice(&text, None, lp))));
                    }
                    Some(Event::Done {
                        finish,
                        prompt_tokens,
                        generated_tokens,
                        tail,
                        ..
                    }) => {
                        queued.push(data(answer.chunk(answer.text_choice(
                            &tail,
                            Some(finish),
                            None,
                        ))));
                        if include_usage {
                            let mut u = answer.chunk(Value::Null);
                            u["choices"] = json!([]);
                            u["usage"] = Answer::usage(prompt_tokens, generated_tokens);
                            queued.push(data(u));
                        }
                        queued.push(SseEvent::default().data("[DONE]"));
                        done = true;
                    }
                    Some(Event::Failed(msg)) => {
                        let e = ApiError {
                            status: 500,
                            message: msg,
                        };
                        queued.push(data(e.body()));
                        done = true;
                    }
                    None => {
                        done = true;
                    }
                }
            }
        },
    );
    Sse::new(events)
}
