//! llama-server's own completion endpoint (`POST /completion`, and
//! `/completions`, as llama-server routes them): not OpenAI's shape but
//! llama-server's, which its web UI and many clients speak. `content` and
//! the token ids; `stop_type` (`eos`, `word`, `limit`) and the
//! `stopping_word`; `tokens_cached`, `tokens_evaluated`, `truncated` and
//! `timings`; `completion_probabilities` with `n_probs`. Streamed, each
//! event carries one token's text, ids and probabilities, the last one the
//! whole summary with `"stop": true` (no `[DONE]`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use ggraph_model::tokenizer::Tokenizer;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::Server;
use crate::engine::{Event, Finish, Timings};
use crate::request::ApiError;
use crate::submit::{Kind, Submitted, Wait, error, next_event, piece, submit, timed_out};

/// What every event of one answer repeats.
struct Native {
    model: String,
    tokenizer: Arc<Tokenizer>,
    /// The prompt as text (llama-server's `prompt` field).
    prompt: String,
    prompt_tokens: usize,
    n_probs: usize,
    return_tokens: bool,
}

impl Native {
    /// One token's probabilities, as llama-server lists them.
    fn probs(&self, id: i32, p: f32, top: &[(i32, f32)]) -> Value {
        let entry = |id: i32, p: f32| {
            let text = piece(&self.tokenizer, id);
            json!({"id": id, "token": text, "bytes": text.as_bytes(),
                   "logprob": (p as f64).ln().max(-9999.0)})
        };
        let mut v = entry(id, p);
        v["top_logprobs"] = Value::Array(top.iter().map(|&(t, q)| entry(t, q)).collect());
        v
    }

    /// The last event's (or the whole answer's) summary.
    fn summary(&self, content: &str, ids: &[i32], finish: &Finish, t: &Timings) -> Value {
        let decoded = t.prompt_tokens - t.cached_tokens;
        json!({
            "index": 0, "content": content, "tokens": if self.return_tokens { ids } else { &[] },
            "stop": true, "model": self.model, "prompt": self.prompt,
            "tokens_predicted": t.generated_tokens, "tokens_evaluated": t.prompt_tokens,
            "tokens_cached": t.cached_tokens, "truncated": *finish == Finish::Context,
            "stop_type": finish.stop_type(),
            "stopping_word": match finish { Finish::Word(w) => w.as_str(), _ => "" },
            "timings": {"cache_n": t.cached_tokens, "prompt_n": decoded, "prompt_ms": t.prompt_ms,
                        "predicted_n": t.generated_tokens, "predicted_ms": t.gen_ms},
        })
    }
}

/// `POST /completion`.
pub async fn completion(
    State(server): State<Server>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Submitted { req, rx, tokenizer } = match submit(&server, &body, Kind::Native) {
        Ok(s) => s,
        Err(e) => return error(e),
    };
    let prompt = tokenizer
        .decode(&req.prompt, false, false)
        .unwrap_or_default();
    let native = Native {
        model: server.inner.model_name.clone(),
        tokenizer,
        prompt,
        prompt_tokens: req.prompt.len(),
        n_probs: req.logprobs.unwrap_or(0),
        return_tokens: req.return_tokens,
    };
    let timeout = server.inner.options.timeout;
    if req.stream {
        streamed(native, rx, timeout).into_response()
    } else {
        whole(native, rx, timeout).await
    }
}

async fn whole(native: Native, mut rx: UnboundedReceiver<Event>, timeout: Duration) -> Response {
    let (mut content, mut ids, mut probs) = (String::new(), Vec::new(), Vec::new());
    loop {
        match next_event(&mut rx, timeout).await {
            Wait::Event(Event::Token {
                id,
                text,
                p,
                probs: top,
            }) => {
                content.push_str(&text);
                ids.push(id);
                if native.n_probs > 0 {
                    probs.push(native.probs(id, p, &top));
                }
            }
            Wait::Event(Event::Done {
                finish,
                tail,
                timings,
            }) => {
                content.push_str(&tail);
                let mut v = native.summary(&content, &ids, &finish, &timings);
                if native.n_probs > 0 {
                    v["completion_probabilities"] = Value::Array(probs);
                }
                return axum::Json(v).into_response();
            }
            Wait::Event(Event::Failed(message)) => {
                return error(ApiError {
                    status: 500,
                    message,
                });
            }
            Wait::TimedOut => return error(timed_out(timeout)),
            Wait::Closed => {
                return error(ApiError {
                    status: 500,
                    message: "the engine ended the request without an answer".into(),
                });
            }
        }
    }
}

/// SSE: an event a token, then the summary; an error event if it fails.
fn streamed(
    native: Native,
    rx: UnboundedReceiver<Event>,
    timeout: Duration,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let state = (native, rx, 0usize, false);
    let events = stream::unfold(state, move |(native, mut rx, n, done)| async move {
        if done {
            return None;
        }
        let data = |v: Value| SseEvent::default().data(v.to_string());
        let (ev, n, done) = match next_event(&mut rx, timeout).await {
            Wait::Event(Event::Token { id, text, p, probs }) => {
                let mut v = json!({"index": 0, "content": text, "tokens": [id], "stop": false,
                                   "tokens_predicted": n + 1,
                                   "tokens_evaluated": native.prompt_tokens});
                if native.n_probs > 0 {
                    v["completion_probabilities"] = json!([native.probs(id, p, &probs)]);
                }
                (data(v), n + 1, false)
            }
            Wait::Event(Event::Done {
                finish,
                tail,
                timings,
            }) => (data(native.summary(&tail, &[], &finish, &timings)), n, true),
            Wait::Event(Event::Failed(message)) => {
                let e = ApiError {
                    status: 500,
                    message,
                };
                (data(e.body()), n, true)
            }
            Wait::TimedOut => (data(timed_out(timeout).body()), n, true),
            Wait::Closed => return None,
        };
        Some((Ok(ev), (native, rx, n, done)))
    });
    Sse::new(events)
}
