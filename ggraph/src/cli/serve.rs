//! `ggraph serve MODEL`: the model behind an OpenAI-compatible HTTP
//! server (ggraph-server). The listener opens first (`/health` answers
//! 503 while the model loads), then the model loads as `llama` loads it
//! (placement, context, `--fit`), then requests run.

use std::sync::Arc;

use ggraph::context::Context;
use ggraph::kv::MAX_SEQS;
use ggraph::model::arch::Pooling;
use ggraph::model::sampling::ModelSampling;
use ggraph::options::{ContextArgs, DeviceArgs, FitArgs, PlacementArgs};
use ggraph::runner;
use ggraph::sampling_args::SamplingArgs;
use ggraph_server::engine::{Engine, EngineOptions};
use ggraph_server::{Ready, Server, ServerOptions};

use super::Failure;

/// `ggraph serve`'s options.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// The model, a .gguf
    #[arg(value_name = "MODEL.gguf")]
    pub model: String,
    /// Address to listen on
    #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port, printed on stderr)
    #[arg(long, value_name = "PORT", default_value_t = 8080)]
    pub port: u16,
    /// The model's name in the API [default: the file's name]
    #[arg(long, value_name = "NAME")]
    pub alias: Option<String>,
    /// Requests that may wait for a slot; more are answered 503
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = ggraph::values::positive)]
    pub queue: usize,
    /// Requests must send this key (`Authorization: Bearer KEY`); others
    /// get 401. /health and /v1/models stay open
    #[arg(long = "api-key", value_name = "KEY")]
    pub api_key: Option<String>,
    /// Seconds a request may wait for its next token (queued, reading its
    /// prompt or generating) before it is cancelled
    #[arg(long = "timeout", visible_alias = "to", value_name = "SECONDS", default_value_t = 600,
          value_parser = ggraph::values::positive)]
    pub timeout: usize,
    /// One cache every slot shares (llama.cpp's --kv-unified): a request
    /// may fill the whole context. Without it each of the -np slots has
    /// --ctx cells of its own
    #[arg(long = "kv-unified", visible_alias = "kvu")]
    pub kv_unified: bool,
    /// Serve embeddings (POST /v1/embeddings, /embedding) instead of
    /// generations; on by itself for an embedding model (an encoder)
    #[arg(long = "embeddings", visible_alias = "embedding")]
    pub embeddings: bool,
    /// Serve reranking (POST /v1/rerank): embeddings pooled by the
    /// model's classifier
    #[arg(long = "reranking", visible_alias = "rerank")]
    pub reranking: bool,
    /// How embeddings are pooled [default: the model's]
    #[arg(long, value_name = "TYPE", value_parser = ["none", "mean", "cls", "last", "rank"])]
    pub pooling: Option<String>,
    #[command(flatten)]
    pub devices: DeviceArgs,
    #[command(flatten)]
    pub placement: PlacementArgs,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub fit: FitArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Runs the server until the process ends; an error if it cannot start.
pub fn run(a: &ServeArgs, user_set: &[ModelSampling]) -> Result<(), Failure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Failure::other)?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind((a.host.as_str(), a.port)))
        .map_err(|e| Failure::other(format!("cannot listen on {}:{}: {e}", a.host, a.port)))?;
    let addr = listener.local_addr().map_err(Failure::other)?;
    let name = a.alias.clone().unwrap_or_else(|| {
        std::path::Path::new(&a.model)
            .file_name()
            .map_or(a.model.clone(), |n| n.to_string_lossy().into_owned())
    });
    let options = ServerOptions {
        api_key: a.api_key.clone(),
        timeout: std::time::Duration::from_secs(a.timeout as u64),
        model_path: Some(a.model.clone()),
        ..ServerOptions::default()
    };
    let server = Server::new(name, options);
    rt.spawn(ggraph_server::serve(listener, server.clone()));
    eprintln!(
        "ggraph serve: listening on http://{addr} (loading {})",
        a.model
    );

    let desc = runner::open_model(&a.model).map_err(Failure::other)?;
    let mut params = a.context.params().map_err(Failure::usage)?;
    params.pooling = match (a.reranking, a.pooling.as_deref()) {
        (true, _) => Some(Pooling::Rank),
        (false, Some(p)) => Some(Pooling::parse(p).map_err(|e| Failure::usage(e.to_string()))?),
        (false, None) => None,
    };
    params.embeddings = a.embeddings || a.reranking || desc.config.arch.embeddings_only;
    if params.embeddings {
        // a request's inputs go through a decode together, each its own
        // sequence
        params.n_seq_max = params.n_seq_max.max(MAX_SEQS);
    }
    let (devices, cpu) = a.devices.devices().map_err(Failure::other)?;
    a.placement.check(devices.len()).map_err(Failure::usage)?;
    let fit = a.fit.fit.then(|| a.fit.request(&a.placement, &params));
    let (model, params) =
        runner::load_for_run(&desc, &devices, cpu, a.placement.options(), params, fit)
            .map_err(Failure::other)?;
    let tokenizer = Arc::new(model.tokenizer().map_err(Failure::other)?);
    let template = model.chat_template(&tokenizer).ok();
    let mut defaults = a.sampling.params();
    if let Some(h) = model.metadata.as_deref() {
        defaults = defaults.with_model_defaults(h, user_set);
    }
    defaults
        .check(model.config.n_vocab)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let ctx = Context::new(Arc::new(model), params).map_err(Failure::other)?;
    let engine = Engine::start(
        ctx,
        tokenizer,
        EngineOptions {
            queue: a.queue,
            kv_unified: a.kv_unified,
        },
    );
    // requests are taken from here on: only then say so
    let (n_slots, n_ctx_slot, chat) = (engine.n_slots, engine.n_ctx_slot, template.is_some());
    let (embeddings, n_embd_tokens) = (engine.embeddings, engine.n_embd_tokens);
    server.ready(Ready::new(engine, template, defaults));
    match embeddings {
        Some(pooling) => eprintln!(
            "ggraph serve: ready on http://{addr}: embeddings pooled by {}, inputs of up to {} \
             tokens{}",
            pooling.name(),
            n_embd_tokens,
            if pooling == Pooling::Rank {
                "; /v1/rerank"
            } else {
                ""
            }
        ),
        None => eprintln!(
            "ggraph serve: ready on http://{addr}: {} slot(s) of {} cells{}",
            n_slots,
            n_ctx_slot,
            if !chat {
                "; no chat template: /v1/chat/completions is refused"
            } else {
                ""
            }
        ),
    }
    rt.block_on(std::future::pending::<()>());
    Ok(())
}
