//! `ggraph serve`: an OpenAI-compatible HTTP server over one
//! [`Context`](ggraph_model::context::Context), as llama-server serves
//! one: `POST /v1/chat/completions` (the model's chat template; streamed
//! with SSE ending in `data: [DONE]`), `POST /v1/completions`,
//! `POST /completion` (llama-server's own shape), `GET /v1/models`,
//! `POST /tokenize`, `POST /detokenize`, `GET /health` (503 while the
//! model loads), `GET /metrics` (Prometheus), `GET /slots` and
//! `POST /slots/{id}?action=erase`, `GET /props`; for a context that
//! computes embeddings (`--embeddings`, `--reranking`, an encoder),
//! `POST /v1/embeddings`, `POST /embedding` and `POST /v1/rerank`
//! instead of generations. Each request is a slot
//! of the [`engine`]: continuous batching over the context's sequences, each with
//! its own sampler chain, seed and grammar, and each slot keeping its
//! cells as a prompt cache for the next request that starts the same way.
//! Errors are OpenAI's shape, `{"error": {"code", "message", "type"}}`.
//!
//! To embed it in a program of one's own:
//!
//! ```no_run
//! # async fn embed(ctx: ggraph_model::context::Context,
//! #                tokenizer: std::sync::Arc<ggraph_model::tokenizer::Tokenizer>)
//! #                -> std::io::Result<()> {
//! use ggraph_server::engine::{Engine, EngineOptions};
//! use ggraph_server::{Ready, Server, ServerOptions};
//!
//! let server = Server::new("my-model", ServerOptions::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! tokio::spawn(ggraph_server::serve(listener, server.clone()));
//! // /health answers 503 until the model is ready
//! let engine = Engine::start(ctx, tokenizer, EngineOptions::default());
//! server.ready(Ready::new(engine, None, Default::default()));
//! # Ok(()) }
//! ```
//!
//! [`router`] gives the routes alone, to merge into an axum app of one's
//! own; [`engine::Engine`] alone runs jobs without HTTP.

mod embeddings;
pub mod engine;
mod native;
pub mod request;
mod routes;
mod submit;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ggraph_model::chat_template::ChatTemplate;
use ggraph_model::sampling::{GrammarVocab, SamplingParams};

use engine::Engine;

/// What the routes need once the model is loaded.
pub struct Ready {
    /// The engine over the model's context.
    pub engine: Engine,
    /// The model's chat template (none: chat requests are refused).
    pub template: Option<ChatTemplate>,
    /// The sampling defaults (the command line's, then the model's
    /// `general.sampling.*`).
    pub defaults: SamplingParams,
    /// The vocabulary indexed for grammars, made on the first request
    /// that asks for one.
    pub grammar_vocab: OnceLock<Result<GrammarVocab, String>>,
}

impl Ready {
    /// The routes' state over `engine`, with the model's chat template
    /// (if it has one) and the sampling defaults.
    pub fn new(engine: Engine, template: Option<ChatTemplate>, defaults: SamplingParams) -> Ready {
        Ready {
            engine,
            template,
            defaults,
            grammar_vocab: OnceLock::new(),
        }
    }
}

/// What the HTTP side enforces.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Requests must carry `Authorization: Bearer KEY` (or `X-Api-Key`);
    /// `/health` and `/v1/models` need none, as with llama-server.
    pub api_key: Option<String>,
    /// A request that waits this long for its next token (in the queue,
    /// reading its prompt, or generating) is cancelled: 408, or an error
    /// event on a stream.
    pub timeout: Duration,
    /// Bytes a request body may have (413 above).
    pub body_limit: usize,
    /// The model's file, as `/props` reports it.
    pub model_path: Option<String>,
}

impl Default for ServerOptions {
    fn default() -> ServerOptions {
        ServerOptions {
            api_key: None,
            timeout: Duration::from_secs(600),
            body_limit: 16 << 20,
            model_path: None,
        }
    }
}

/// The server: a name for `/v1/models`, and the loaded model once ready.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Shared>,
}

struct Shared {
    model_name: String,
    options: ServerOptions,
    ready: OnceLock<Ready>,
}

impl Server {
    /// A server for the model called `model_name`, loading.
    pub fn new(model_name: impl Into<String>, options: ServerOptions) -> Server {
        Server {
            inner: Arc::new(Shared {
                model_name: model_name.into(),
                options,
                ready: OnceLock::new(),
            }),
        }
    }

    /// The model is loaded: requests go to `ready.engine` from now on.
    pub fn ready(&self, ready: Ready) {
        let _ = self.inner.ready.set(ready);
    }

    fn state(&self) -> Option<&Ready> {
        self.inner.ready.get()
    }
}

/// The routes, over `server`.
pub fn router(server: Server) -> axum::Router {
    routes::router(server)
}

/// Serves `server` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, server: Server) -> std::io::Result<()> {
    axum::serve(listener, router(server)).await
}
