//! `ggraph serve`: an OpenAI-compatible HTTP server over one
//! [`Context`](ggraph_model::context::Context), as llama-server serves
//! one: `POST /v1/chat/completions` (the model's chat template; streamed
//! with SSE ending in `data: [DONE]`), `POST /v1/completions`,
//! `GET /v1/models`, `POST /tokenize`, `POST /detokenize`, `GET /health`
//! (503 while the model loads), `GET /metrics` (Prometheus), `GET /slots`.
//! Each request is a slot of the [`engine`]: continuous batching over the
//! context's sequences, each with its own sampler chain, seed and grammar.
//!
//! To embed it: bind a listener, [`serve`] it with a [`Server`], load the
//! model, then [`Server::ready`] with an [`engine::Engine`] over the
//! context.

pub mod engine;
pub mod request;
mod routes;

use std::sync::{Arc, OnceLock};

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

/// The server: a name for `/v1/models`, and the loaded model once ready.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Shared>,
}

struct Shared {
    model_name: String,
    ready: OnceLock<Ready>,
}

impl Server {
    /// A server for the model called `model_name`, loading.
    pub fn new(model_name: impl Into<String>) -> Server {
        Server {
            inner: Arc::new(Shared {
                model_name: model_name.into(),
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
