//! The HTTP routes: requests read ([`crate::request`]), jobs handed to
//! the engine ([`crate::submit`]), its events written back as OpenAI's
//! JSON or SSE chunks (llama-server's own `/completion`: [`crate::native`];
//! embeddings and reranking: [`crate::embeddings`]).

use std::convert::Infallible;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream};
use ggraph_model::harmony::{Channel, Segment};
use ggraph_model::reasoning::ReasoningSplitter;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::Server;
use crate::engine::{Event, Finish, Timings};
use crate::request::ApiError;
use crate::submit::{
    Kind, Submitted, Wait, error, json_body, json_or_error, loading, next_event, next_id, piece,
    ready, submit, timed_out,
};
use crate::{embeddings, native};

pub fn router(server: Server) -> Router {
    let limit = server.inner.options.body_limit;
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/metrics", get(metrics))
        .route("/slots", get(slots))
        .route("/slots/{id}", post(slot_action))
        .route("/props", get(props).post(props_change))
        .route("/embedding", post(embeddings::embeddings_native))
        .route("/embeddings", post(embeddings::embeddings_native))
        .route("/v1/embeddings", post(embeddings::embeddings_oai))
        .route("/rerank", post(embeddings::rerank))
        .route("/reranking", post(embeddings::rerank))
        .route("/v1/rerank", post(embeddings::rerank))
        .route("/v1/reranking", post(embeddings::rerank))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/v1/completions", post(completions))
        .route("/completions", post(native::completion))
        .route("/completion", post(native::completion))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(server.clone(), guard))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(server)
}

/// Endpoints anyone may call when an API key is set (as llama-server's).
const PUBLIC: [&str; 4] = ["/health", "/v1/health", "/models", "/v1/models"];

/// Before any route: a body announced over the limit is 413 at once
/// (not read first); with `--api-key`, a request without the key is 401.
async fn guard(State(server): State<Server>, req: Request, next: Next) -> Response {
    let options = &server.inner.options;
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(n) = announced
        && n > options.body_limit as u64
    {
        return error(ApiError {
            status: 413,
            message: format!(
                "the request body is {n} bytes: the server takes {} at most",
                options.body_limit
            ),
        });
    }
    let Some(key) = &options.api_key else {
        return next.run(req).await;
    };
    if PUBLIC.contains(&req.uri().path()) || carries_key(req.headers(), key) {
        return next.run(req).await;
    }
    error(ApiError {
        status: 401,
        message: "Invalid API Key".into(),
    })
}

fn carries_key(headers: &HeaderMap, key: &str) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    bearer.or(x_api_key).is_some_and(|k| k.trim() == key)
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(ApiError {
        status: 404,
        message: format!("no endpoint {method} {}", uri.path()),
    })
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    error(ApiError {
        status: 405,
        message: format!("{} does not take {method}", uri.path()),
    })
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
    let rate = |tokens: &std::sync::atomic::AtomicU64, us: &std::sync::atomic::AtomicU64| {
        let us = us.load(Relaxed);
        if us == 0 {
            0.0
        } else {
            tokens.load(Relaxed) as f64 * 1e6 / us as f64
        }
    };
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
            "prompt_seconds_total",
            "counter",
            "Seconds reading prompts.",
            c.prompt_us.load(Relaxed) as f64 / 1e6,
        ),
        (
            "tokens_predicted_seconds_total",
            "counter",
            "Seconds generating.",
            c.gen_us.load(Relaxed) as f64 / 1e6,
        ),
        (
            "prompt_tokens_seconds",
            "gauge",
            "Prompt tokens decoded a second, on average.",
            rate(&c.prompt_tokens, &c.prompt_us),
        ),
        (
            "predicted_tokens_seconds",
            "gauge",
            "Tokens generated a second, on average.",
            rate(&c.generated_tokens, &c.gen_us),
        ),
        (
            "requests_dropped_total",
            "counter",
            "Requests failed or cancelled.",
            c.jobs_dropped.load(Relaxed) as f64,
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

/// llama-server's `GET /props`: the slots, the model's file and chat
/// template, and the sampling defaults requests start from.
async fn props(State(server): State<Server>) -> Response {
    let Some(r) = server.state() else {
        return error(loading());
    };
    let d = &r.defaults;
    let samplers: Vec<&str> = d.samplers.iter().map(|s| s.name()).collect();
    let params = json!({
        "n_predict": -1, "seed": d.seed, "temperature": d.temp,
        "dynatemp_range": d.dynatemp_range, "dynatemp_exponent": d.dynatemp_exponent,
        "top_k": d.top_k, "top_p": d.top_p, "min_p": d.min_p,
        "xtc_probability": d.xtc_probability, "xtc_threshold": d.xtc_threshold,
        "typical_p": d.typ_p, "repeat_last_n": d.penalty_last_n,
        "repeat_penalty": d.penalty_repeat, "presence_penalty": d.penalty_present,
        "frequency_penalty": d.penalty_freq, "dry_multiplier": d.dry_multiplier,
        "dry_base": d.dry_base, "dry_allowed_length": d.dry_allowed_length,
        "dry_penalty_last_n": d.dry_penalty_last_n,
        "dry_sequence_breakers": d.dry_sequence_breakers, "mirostat": d.mirostat,
        "mirostat_tau": d.mirostat_tau, "mirostat_eta": d.mirostat_eta,
        "top_n_sigma": d.top_n_sigma, "stop": [], "max_tokens": -1, "ignore_eos": false,
        "stream": false, "n_probs": d.n_probs, "min_keep": d.min_keep, "grammar": "",
        "samplers": samplers,
    });
    axum::Json(json!({
        "default_generation_settings": {
            "id": 0, "id_task": -1, "n_ctx": r.engine.n_ctx_slot, "speculative": false,
            "is_processing": false, "params": params, "prompt": "",
        },
        "total_slots": r.engine.n_slots,
        "model_path": server.inner.options.model_path.clone().unwrap_or_default(),
        "chat_template": r.template.as_ref().map_or("", |t| t.source()),
        "modalities": {"vision": false, "audio": false},
        "build_info": format!("ggraph {}", env!("CARGO_PKG_VERSION")),
        "is_sleeping": false,
    }))
    .into_response()
}

/// `POST /props`: llama-server changes its properties only when started
/// with `--props`; this server never does.
async fn props_change() -> Response {
    error(ApiError {
        status: 501,
        message: "this server does not change its properties over HTTP".into(),
    })
}

/// The embedding endpoints: a generative model's server answers 501, as
/// llama-server without `--embeddings` does.
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
            json!({"id": id, "n_ctx": r.engine.n_ctx_slot, "is_processing": s.processing,
                   "n_prompt_tokens": s.prompt_tokens, "n_decoded": s.generated_tokens,
                   "n_cached": s.cached_tokens})
        })
        .collect();
    axum::Json(Value::Array(list)).into_response()
}

/// `POST /slots/{id}?action=erase`: an idle slot gives up its cells.
async fn slot_action(State(server): State<Server>, Path(id): Path<String>, uri: Uri) -> Response {
    let action = uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("action="));
    let r = match ready(&server) {
        Ok(r) => r,
        Err(e) => return error(e),
    };
    let Ok(slot) = id.parse::<usize>() else {
        return error(ApiError::bad(format!("'{id}' is not a slot id")));
    };
    match action {
        Some("erase") => match r.engine.erase(slot).await {
            Ok(n) => axum::Json(json!({"id_slot": slot, "n_erased": n})).into_response(),
            Err(e) => error(ApiError::bad(e)),
        },
        Some(other) => error(ApiError {
            status: 501,
            message: format!("slot action '{other}' is not supported (erase)"),
        }),
        None => error(ApiError::bad("'action' is missing (erase)")),
    }
}

async fn tokenize(State(server): State<Server>, body: Result<Bytes, BytesRejection>) -> Response {
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

async fn detokenize(State(server): State<Server>, body: Result<Bytes, BytesRejection>) -> Response {
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

async fn chat_completions(
    State(server): State<Server>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(server, body, Kind::Chat).await
}

async fn completions(
    State(server): State<Server>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(server, body, Kind::Completion).await
}

async fn generate(server: Server, body: Result<Bytes, BytesRejection>, kind: Kind) -> Response {
    let Submitted { req, rx, tokenizer } = match submit(&server, &body, kind) {
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
        reasoning: req.reasoning.clone(),
    };
    let timeout = server.inner.options.timeout;
    if req.stream {
        stream_answer(answer, rx, req.include_usage, timeout).into_response()
    } else {
        whole_answer(answer, rx, timeout).await
    }
}

/// What every chunk of an answer repeats.
struct Answer {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    logprobs: Option<usize>,
    tokenizer: std::sync::Arc<ggraph_model::tokenizer::Tokenizer>,
    /// The answer's reasoning is split from its text (special tokens
    /// written out) into `reasoning_content`, by this splitter.
    reasoning: Option<ReasoningSplitter>,
}

/// An answer's text so far, by where it goes in the message.
#[derive(Default)]
struct ChannelText {
    content: String,
    reasoning: String,
}

impl ChannelText {
    /// The analysis is the reasoning; the final channel and any other
    /// (commentary, without tools) the content.
    fn add(&mut self, segments: Vec<Segment>) {
        for seg in segments {
            match seg.channel {
                Channel::Analysis => self.reasoning.push_str(&seg.text),
                _ => self.content.push_str(&seg.text),
            }
        }
    }
}

impl ChannelText {
    /// A token's text (its special tokens written out, as the engine
    /// gives an answer with reasoning: they mark it) through `splitter`.
    fn of(splitter: &mut ReasoningSplitter, text: &str) -> ChannelText {
        let mut out = ChannelText::default();
        out.add(splitter.push(text.as_bytes()));
        out
    }
}

impl Answer {
    fn piece(&self, id: i32) -> String {
        piece(&self.tokenizer, id)
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

    fn usage(t: &Timings) -> Value {
        json!({"prompt_tokens": t.prompt_tokens, "completion_tokens": t.generated_tokens,
               "total_tokens": t.prompt_tokens + t.generated_tokens,
               "prompt_tokens_details": {"cached_tokens": t.cached_tokens}})
    }

    /// llama-server's `timings`.
    fn timings(t: &Timings) -> Value {
        let decoded = t.prompt_tokens - t.cached_tokens;
        let per = |n: usize, ms: f64| (n > 0).then(|| ms / n as f64);
        let rate = |n: usize, ms: f64| (ms > 0.0).then(|| n as f64 * 1e3 / ms);
        json!({"cache_n": t.cached_tokens, "prompt_n": decoded, "prompt_ms": t.prompt_ms,
               "prompt_per_token_ms": per(decoded, t.prompt_ms),
               "prompt_per_second": rate(decoded, t.prompt_ms),
               "predicted_n": t.generated_tokens, "predicted_ms": t.gen_ms,
               "predicted_per_token_ms": per(t.generated_tokens, t.gen_ms),
               "predicted_per_second": rate(t.generated_tokens, t.gen_ms)})
    }

    fn chunk(&self, choice: Value) -> Value {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion | Kind::Native => "text_completion",
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
               "choices": [choice]})
    }

    /// A Harmony chat chunk's choice: the delta's `content` and
    /// `reasoning_content` where the token gave them text; `None` when
    /// there is nothing to send (a header's token, no log-probabilities,
    /// not the last chunk).
    fn channel_choice(
        &self,
        part: &ChannelText,
        finish: Option<&Finish>,
        logprobs: Option<Value>,
    ) -> Option<Value> {
        let mut delta = json!({});
        if !part.content.is_empty() {
            delta["content"] = json!(part.content);
        }
        if !part.reasoning.is_empty() {
            delta["reasoning_content"] = json!(part.reasoning);
        }
        if delta.as_object().is_some_and(|d| d.is_empty()) && logprobs.is_none() && finish.is_none()
        {
            return None;
        }
        Some(json!({"index": 0, "delta": delta,
                    "logprobs": logprobs.map(|l| json!({"content": [l]})),
                    "finish_reason": finish.map(Finish::as_str)}))
    }

    fn text_choice(&self, text: &str, finish: Option<&Finish>, logprobs: Option<Value>) -> Value {
        let finish = finish.map(Finish::as_str);
        match self.kind {
            Kind::Chat => json!({"index": 0, "delta": {"content": text},
                                 "logprobs": logprobs.map(|l| json!({"content": [l]})),
                                 "finish_reason": finish}),
            Kind::Completion | Kind::Native => json!({"index": 0, "text": text,
                                                     "logprobs": logprobs, "finish_reason": finish}),
        }
    }
}

async fn whole_answer(
    answer: Answer,
    mut rx: UnboundedReceiver<Event>,
    timeout: Duration,
) -> Response {
    let mut text = String::new();
    let mut splitter = answer.reasoning.clone();
    let mut channels = ChannelText::default();
    let mut logprobs = Vec::new();
    loop {
        let ev = match next_event(&mut rx, timeout).await {
            Wait::Event(ev) => ev,
            Wait::Closed => break,
            Wait::TimedOut => return error(timed_out(timeout)),
        };
        match ev {
            Event::Token {
                id,
                text: t,
                p,
                probs,
            } => {
                match &mut splitter {
                    Some(sp) => channels.add(sp.push(t.as_bytes())),
                    None => text.push_str(&t),
                }
                if answer.logprobs.is_some() {
                    logprobs.push(answer.logprob(id, p, &probs));
                }
            }
            Event::Done {
                finish,
                tail,
                timings,
            } => {
                let mut message = json!({"role": "assistant"});
                match &mut splitter {
                    Some(sp) => {
                        channels.add(sp.push(tail.as_bytes()));
                        channels.add(sp.finish());
                        message["content"] = json!(channels.content);
                        if !channels.reasoning.is_empty() {
                            message["reasoning_content"] = json!(channels.reasoning);
                        }
                    }
                    None => {
                        text.push_str(&tail);
                        message["content"] = json!(text);
                    }
                }
                let lp = answer.logprobs.map(|_| json!({"content": logprobs}));
                let choice = match answer.kind {
                    Kind::Chat => json!({"index": 0, "message": message,
                        "logprobs": lp, "finish_reason": finish.as_str()}),
                    Kind::Completion | Kind::Native => {
                        json!({"index": 0, "text": text, "logprobs": lp,
                        "finish_reason": finish.as_str()})
                    }
                };
                let object = match answer.kind {
                    Kind::Chat => "chat.completion",
                    Kind::Completion | Kind::Native => "text_completion",
                };
                return axum::Json(json!({
                    "id": answer.id, "object": object, "created": answer.created,
                    "model": answer.model, "choices": [choice],
                    "usage": Answer::usage(&timings), "timings": Answer::timings(&timings)
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
    timeout: Duration,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let first = (answer.kind == Kind::Chat).then(|| {
        answer.chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": ""},
                            "logprobs": null, "finish_reason": null}),
        )
    });
    let splitter = answer.reasoning.clone();
    let state = (answer, rx, first, Vec::<SseEvent>::new(), false, splitter);
    let events = stream::unfold(
        state,
        move |(answer, mut rx, mut first, mut queued, mut done, mut splitter)| async move {
            loop {
                if let Some(f) = first.take() {
                    let ev = SseEvent::default().data(f.to_string());
                    return Some((Ok(ev), (answer, rx, first, queued, done, splitter)));
                }
                if !queued.is_empty() {
                    let ev = queued.remove(0);
                    return Some((Ok(ev), (answer, rx, first, queued, done, splitter)));
                }
                if done {
                    return None;
                }
                let data = |v: Value| SseEvent::default().data(v.to_string());
                match next_event(&mut rx, timeout).await {
                    Wait::Event(Event::Token { id, text, p, probs }) => {
                        let lp = answer.logprobs.map(|_| answer.logprob(id, p, &probs));
                        let choice = match &mut splitter {
                            Some(sp) => {
                                let part = ChannelText::of(sp, &text);
                                answer.channel_choice(&part, None, lp)
                            }
                            None => Some(answer.text_choice(&text, None, lp)),
                        };
                        if let Some(choice) = choice {
                            queued.push(data(answer.chunk(choice)));
                        }
                    }
                    Wait::Event(Event::Done {
                        finish,
                        tail,
                        timings,
                    }) => {
                        let choice = match &mut splitter {
                            Some(sp) => {
                                let mut rest = ChannelText::of(sp, &tail);
                                rest.add(sp.finish());
                                answer.channel_choice(&rest, Some(&finish), None)
                            }
                            None => None,
                        };
                        let choice = choice
                            .unwrap_or_else(|| answer.text_choice(&tail, Some(&finish), None));
                        let mut last = answer.chunk(choice);
                        last["timings"] = Answer::timings(&timings);
                        queued.push(data(last));
                        if include_usage {
                            let mut u = answer.chunk(Value::Null);
                            u["choices"] = json!([]);
                            u["usage"] = Answer::usage(&timings);
                            queued.push(data(u));
                        }
                        queued.push(SseEvent::default().data("[DONE]"));
                        done = true;
                    }
                    Wait::Event(Event::Failed(msg)) => {
                        let e = ApiError {
                            status: 500,
                            message: msg,
                        };
                        queued.push(data(e.body()));
                        done = true;
                    }
                    Wait::TimedOut => {
                        queued.push(data(timed_out(timeout).body()));
                        done = true;
                    }
                    Wait::Closed => {
                        done = true;
                    }
                }
            }
        },
    );
    Sse::new(events)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ggraph_model::make::{make_vocab, vocab_header};
    use ggraph_model::reasoning::{GEMMA4_THOUGHT, ReasoningFormat};
    use ggraph_model::tokenizer::Tokenizer;
    use tokio::sync::mpsc::unbounded_channel;

    use super::*;

    /// gpt-oss's answer as token ids of a small vocabulary whose last
    /// tokens are Harmony's markers and a few words.
    fn harmony_answer() -> (Arc<Tokenizer>, Vec<i32>) {
        let words = [
            "<|start|>",
            "assistant",
            "<|channel|>",
            "analysis",
            "final",
            "<|message|>",
            "<|end|>",
            "<|return|>",
            "Think.",
            "Paris.",
        ];
        let mut tokens = make_vocab(300);
        tokens.extend(words.iter().map(|w| w.to_string()));
        let tokenizer = Tokenizer::from_header(&vocab_header(tokens).unwrap()).unwrap();
        let id = |w: &str| 300 + words.iter().position(|x| *x == w).unwrap() as i32;
        let ids = [
            "<|channel|>",
            "analysis",
            "<|message|>",
            "Think.",
            "<|end|>",
            "<|start|>",
            "assistant",
            "<|channel|>",
            "final",
            "<|message|>",
            "Paris.",
        ]
        .map(id)
        .to_vec();
        (Arc::new(tokenizer), ids)
    }

    fn answer(tokenizer: Arc<Tokenizer>, format: ReasoningFormat) -> Answer {
        Answer {
            kind: Kind::Chat,
            id: "chatcmpl-1".into(),
            created: 0,
            model: "m".into(),
            logprobs: None,
            tokenizer,
            reasoning: Some(ReasoningSplitter::new(format, "")),
        }
    }

    /// The engine's events for `ids`: each token's text with its special
    /// tokens written out, as for a Harmony request.
    fn events(tokenizer: &Tokenizer, ids: &[i32]) -> UnboundedReceiver<Event> {
        let (tx, rx) = unbounded_channel();
        for &id in ids {
            let piece = tokenizer.piece(id, true).unwrap();
            let _ = tx.send(Event::Token {
                id,
                text: String::from_utf8(piece.to_vec()).unwrap(),
                p: 0.0,
                probs: Vec::new(),
            });
        }
        let _ = tx.send(Event::Done {
            finish: Finish::Eos,
            tail: String::new(),
            timings: Timings::default(),
        });
        rx
    }

    async fn body(r: Response) -> Value {
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_harmony_answer_puts_its_analysis_in_reasoning_content() {
        let (tokenizer, ids) = harmony_answer();
        let rx = events(&tokenizer, &ids);
        let harmony = answer(tokenizer, ReasoningFormat::Harmony);
        let r = whole_answer(harmony, rx, Duration::from_secs(5)).await;
        let message = &body(r).await["choices"][0]["message"];
        assert_eq!(message["content"], "Paris.");
        assert_eq!(message["reasoning_content"], "Think.");
    }

    /// Gemma 4's answer: `<|channel>thought`, the reasoning, `<channel|>`,
    /// the answer (its markers special tokens of its vocabulary).
    #[tokio::test]
    async fn a_gemma4_answer_puts_its_thought_channel_in_reasoning_content() {
        let words = ["<|channel>", "thought", "Think.", "<channel|>", "Paris."];
        let mut tokens = make_vocab(300);
        tokens.extend(words.iter().map(|w| w.to_string()));
        let tokenizer = Tokenizer::from_header(&vocab_header(tokens).unwrap()).unwrap();
        let ids: Vec<i32> = (300..305).collect();
        let rx = events(&tokenizer, &ids);
        let gemma4 = answer(Arc::new(tokenizer), GEMMA4_THOUGHT);
        let r = whole_answer(gemma4, rx, Duration::from_secs(5)).await;
        let message = &body(r).await["choices"][0]["message"];
        assert_eq!(message["content"], "Paris.");
        assert_eq!(message["reasoning_content"], "Think.");
    }

    #[tokio::test]
    async fn a_streamed_harmony_answer_sends_reasoning_and_content_deltas() {
        let (tokenizer, ids) = harmony_answer();
        let rx = events(&tokenizer, &ids);
        let harmony = answer(tokenizer, ReasoningFormat::Harmony);
        let sse = stream_answer(harmony, rx, false, Duration::from_secs(5));
        let text = String::from_utf8(
            axum::body::to_bytes(sse.into_response().into_body(), usize::MAX)
                .await
                .unwrap()
                .to_vec(),
        )
        .unwrap();
        let chunks: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
        // the role, the reasoning, the answer, the finish
        assert_eq!(deltas.len(), 4, "{deltas:?}");
        assert_eq!(deltas[1]["reasoning_content"], "Think.");
        assert_eq!(deltas[2]["content"], "Paris.");
        assert_eq!(chunks[3]["choices"][0]["finish_reason"], "stop");
    }
}
