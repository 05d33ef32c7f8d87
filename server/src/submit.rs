//! What every generation endpoint shares: the request read for its kind,
//! its sampler built, the job handed to the engine; then the engine's
//! events awaited under the server's timeout. And the error answers, in
//! OpenAI's shape.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ggraph_model::sampling::{GrammarVocab, TokenSampler};
use ggraph_model::tokenizer::Tokenizer;
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::engine::{Event, Job, Refused};
use crate::request::{self, ApiError, GenRequest};
use crate::{Ready, Server};

/// An error answer: its status and OpenAI's body (503s say when to try
/// again).
pub fn error(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(e.body())).into_response();
    if e.status == 503 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// A JSON answer, or the error's.
pub fn json_or_error(r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => error(e),
    }
}

/// The 503 of a server whose model still loads.
pub fn loading() -> ApiError {
    ApiError {
        status: 503,
        message: "Loading model".into(),
    }
}

/// The loaded model's state, or 503.
pub fn ready(server: &Server) -> Result<&Ready, ApiError> {
    server.state().ok_or_else(loading)
}

/// The body as JSON; a body over the limit is 413.
pub fn json_body(bytes: &Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = bytes.as_ref().map_err(|e| ApiError {
        status: e.status().as_u16(),
        message: if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            "the request body is larger than the server takes".into()
        } else {
            e.body_text()
        },
    })?;
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad(format!("the body is not JSON: {e}")))
}

/// Which endpoint a generation answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// OpenAI's `/v1/chat/completions`.
    Chat,
    /// OpenAI's `/v1/completions`.
    Completion,
    /// llama-server's own `/completion`.
    Native,
}

/// A job the engine took: the request it came from, its events, and the
/// tokenizer to spell its tokens.
pub struct Submitted {
    pub req: GenRequest,
    pub rx: UnboundedReceiver<Event>,
    pub tokenizer: Arc<Tokenizer>,
}

/// Reads a generation request of `kind` and hands its job to the engine.
pub fn submit(
    server: &Server,
    body: &Result<Bytes, BytesRejection>,
    kind: Kind,
) -> Result<Submitted, ApiError> {
    let r = ready(server)?;
    if r.engine.embeddings.is_some() {
        return Err(ApiError {
            status: 501,
            message: "This server computes embeddings (started with --embeddings, --reranking or \
                      for an embedding model): it does not generate"
                .into(),
        });
    }
    let b = json_body(body)?;
    let t = &r.engine.tokenizer;
    let req = match kind {
        Kind::Chat => request::chat(&b, r.template.as_ref(), t, &r.defaults, r.engine.n_ctx_slot)?,
        Kind::Completion | Kind::Native => {
            request::completion(&b, t, &r.defaults, r.engine.n_ctx_slot)?
        }
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
        cache_prompt: req.cache_prompt,
        special_text: req.reasoning.is_some(),
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
    Ok(Submitted {
        req,
        rx,
        tokenizer: r.engine.tokenizer.clone(),
    })
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

/// A number for the next answer's id.
pub fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static ID: AtomicU64 = AtomicU64::new(1);
    ID.fetch_add(1, Ordering::Relaxed)
}

/// What waiting for the engine's next event ends with.
pub enum Wait {
    Event(Event),
    /// The engine dropped the job.
    Closed,
    /// Nothing came within the timeout.
    TimedOut,
}

/// The job's next event, waiting at most `timeout`.
pub async fn next_event(rx: &mut UnboundedReceiver<Event>, timeout: Duration) -> Wait {
    match tokio::time::timeout(timeout, rx.recv()).await {
        Ok(Some(ev)) => Wait::Event(ev),
        Ok(None) => Wait::Closed,
        Err(_) => Wait::TimedOut,
    }
}

/// The 408 of a request that waited past the server's timeout.
pub fn timed_out(timeout: Duration) -> ApiError {
    ApiError {
        status: 408,
        message: format!(
            "no token within the server's timeout ({} s): the request is cancelled",
            timeout.as_secs_f64()
        ),
    }
}

/// A token's spelling, lossily as UTF-8 (a piece may be part of a
/// character).
pub fn piece(tokenizer: &Tokenizer, id: i32) -> String {
    String::from_utf8_lossy(tokenizer.piece(id, true).unwrap_or(&[])).into_owned()
}
