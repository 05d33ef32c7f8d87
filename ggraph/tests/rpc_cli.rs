//! `--rpc` in the tools, against stock `ggml-rpc-server`s: the devices
//! listed and checked, planned on with the servers' own memory figures,
//! and a model run across two of them; an unreachable server is an error
//! that names it. And the runner's generation across a server that
//! restarts mid-run (`llama --rpc-retry`): with a retry it waits for the
//! server, uploads what it lost, decodes again the tokens its KV cache
//! held and gives the tokens of a run without the restart; without one,
//! or when the server stays away, the error names the server.

use std::process::{Command, Output};

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggraph::DType;
use ggraph::backend::Device;
use ggraph::context::{Context, ContextParams};
use ggraph::model::generation::{self, Hooks, Recovered, Request, Retry};
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::rpc::local_server::{LocalServer, server_binary};
use ggraph::rpc::{RpcDevice, RpcOptions};
use ggraph::runner;
use ggraph_cpu::CpuDevice;

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the program starts")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A server, or `None` when the binary is not built (an error with
/// GGRAPH_REQUIRE_RPC=1, as scripts/test sets).
fn server(test: &str) -> Option<LocalServer> {
    if !server_binary().exists() {
        assert!(
            std::env::var("GGRAPH_REQUIRE_RPC").as_deref() != Ok("1"),
            "{test}: no {}: run scripts/rpc-server",
            server_binary().display()
        );
        eprintln!("SKIPPED {test}: no ggml-rpc-server (scripts/rpc-server builds it)");
        return None;
    }
    Some(LocalServer::start(1, None).expect("a stock server starts"))
}

/// Two servers, or `None` as for [`server`].
fn servers(test: &str) -> Option<[LocalServer; 2]> {
    Some([server(test)?, server(test)?])
}

#[test]
fn devices_plan_and_llama_take_rpc_servers() {
    let Some(servers) = servers("--rpc in the tools") else {
        return;
    };
    let list = format!("{},{}", servers[0].endpoint(), servers[1].endpoint());
    let ggraph = env!("CARGO_BIN_EXE_ggraph");

    let out = run(ggraph, &["devices", "--rpc", &list]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("backend RPC    2 device(s)"), "{stdout}");
    for s in &servers {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("rpc:{}:0", s.endpoint())))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(
            line.contains(" gpu ") && line.contains("protocol 7.0.0"),
            "{line}"
        );
    }

    let model = format!(
        "{}/../ggraph-model/tests/fixtures/gguf/tiny_llama.gguf",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = run(
        ggraph,
        &["plan", &model, "--rpc", &list, "-c", "256", "--fit"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("rpc:{}:0", servers[1].endpoint())),
        "{stdout}"
    );

    let out = run(
        ggraph,
        &["estimate", &model, "--rpc", &list, "--json", "-c", "256"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = j["exact"]["devices"]
        .as_array()
        .unwrap_or_else(|| panic!("{stdout}"))
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert!(
        names.contains(&format!("rpc:{}:0", servers[0].endpoint()).as_str()),
        "{names:?}"
    );

    let out = run(
        env!("CARGO_BIN_EXE_llama"),
        &[
            "--random",
            "tiny",
            "-n",
            "4",
            "-c",
            "64",
            "--rpc",
            &list,
            "--prompt-ids",
            "1,2,3",
            "--temp",
            "0",
        ],
    );
    // the text on stdout, the figures and the devices on stderr
    let report = text(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("generation 4 tokens"), "{report}");
    for s in &servers {
        assert!(
            report.contains(&format!("rpc:{}:0", s.endpoint())),
            "{report}"
        );
    }
}

#[test]
fn an_unreachable_server_is_an_error_naming_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("127.0.0.1:{port}");
    for (bin, args) in [
        (
            env!("CARGO_BIN_EXE_ggraph"),
            vec!["devices", "--rpc", &endpoint],
        ),
        (
            env!("CARGO_BIN_EXE_llama"),
            vec!["--random", "tiny", "--rpc", &endpoint],
        ),
    ] {
        let out = run(bin, &args);
        assert!(!out.status.success(), "{bin}");
        let err = text(&out.stderr);
        assert!(err.contains(&format!("rpc:{endpoint}")), "{bin}: {err}");
        assert!(!err.contains("panicked"), "{bin}: {err}");
    }
    let out = run(
        env!("CARGO_BIN_EXE_llama"),
        &["--rpc", "no-port", "--random", "tiny"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("'no-port' is not HOST:PORT"),
        "{}",
        text(&out.stderr)
    );
}

/// A random llama with every layer (and its KV cache) on the server.
fn context(endpoint: &str) -> Context {
    let desc = runner::random_model("tiny", DType::Q8_0, 3).unwrap();
    let options = RpcOptions {
        connect_timeout: Duration::from_secs(2),
        io_timeout: Duration::from_secs(10),
    };
    let remote: Vec<Arc<dyn Device>> = RpcDevice::connect(endpoint, options)
        .unwrap()
        .into_iter()
        .map(|d| d as Arc<dyn Device>)
        .collect();
    let model = Model::load(
        &desc,
        &remote,
        CpuDevice::with_threads(1).unwrap(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )
    .unwrap();
    let params = ContextParams {
        n_ctx: 64,
        n_batch: 8,
        n_ubatch: 8,
        ..ContextParams::default()
    };
    Context::new(Arc::new(model), params).unwrap()
}

/// Generates 12 tokens after an 8-token prompt; `at_token(n, server)` runs
/// when the n-th token is chosen, before it is decoded.
fn generate(
    ctx: &mut Context,
    server: &mut LocalServer,
    retry: Retry,
    at_token: &dyn Fn(usize, &mut LocalServer),
) -> (Result<Vec<i32>, String>, Vec<Recovered>) {
    ctx.clear_cache();
    let prompt = runner::random_prompt(8, ctx.model().config.n_vocab, 5);
    let mut chosen = 0;
    let mut recovered = Vec::new();
    let req = Request {
        n_predict: 12,
        retry,
        ..Request::default()
    };
    let hooks = Hooks {
        on_token: Box::new(|_| {
            chosen += 1;
            at_token(chosen, server);
            true
        }),
        on_recover: Box::new(|r| recovered.push(r.clone())),
        ..Hooks::default()
    };
    let mut greedy = runner::greedy_sampler();
    let g = generation::generate(ctx, &prompt, &mut greedy, None, &req, hooks);
    (g.map(|g| g.generated).map_err(|e| e.to_string()), recovered)
}

fn restart(server: &mut LocalServer) {
    let port = server.port();
    server.kill();
    *server = LocalServer::start_on(port, 1, None).expect("the server starts again");
}

#[test]
fn a_restarted_server_is_waited_for_and_the_generation_gives_the_same_tokens() {
    let Some(mut server) = server("retry across a restart") else {
        return;
    };
    let endpoint = server.endpoint().to_string();
    let mut ctx = context(&endpoint);
    let retry = Retry {
        within: Duration::from_secs(30),
    };
    let (want, none) = generate(&mut ctx, &mut server, retry, &|_, _| {});
    let want = want.unwrap();
    assert!(none.is_empty());

    let (got, recovered) = generate(&mut ctx, &mut server, retry, &|n, s| {
        if n == 4 {
            restart(s);
        }
    });
    assert_eq!(got.unwrap(), want, "the same greedy tokens");
    let [r] = &recovered[..] else {
        panic!("one recovery: {recovered:?}");
    };
    assert!(r.error.contains(&endpoint), "{}", r.error);
    assert!(
        r.recovery.cache_cleared && r.recovery.weight_bytes > 0,
        "{r:?}"
    );
    assert_eq!(
        r.replay,
        8 + 3,
        "the prompt and the 3 tokens decoded before"
    );
}

#[test]
fn without_a_retry_or_a_server_the_error_names_it_in_bounded_time() {
    let Some(mut server) = server("no retry") else {
        return;
    };
    let endpoint = server.endpoint().to_string();
    let mut ctx = context(&endpoint);
    let (got, recovered) = generate(&mut ctx, &mut server, Retry::default(), &|n, s| {
        if n == 2 {
            restart(s);
        }
    });
    let e = got.unwrap_err();
    assert!(e.contains(&endpoint) && recovered.is_empty(), "{e}");
    ctx.recover().unwrap();

    // the server stays away: the retry gives up after its time
    let start = Instant::now();
    let retry = Retry {
        within: Duration::from_secs(1),
    };
    let (got, recovered) = generate(&mut ctx, &mut server, retry, &|n, s| {
        if n == 2 {
            s.kill();
        }
    });
    let e = got.unwrap_err();
    assert!(e.contains(&endpoint) && recovered.is_empty(), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}
