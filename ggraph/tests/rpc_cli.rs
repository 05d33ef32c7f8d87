//! `--rpc` in the tools, against stock `ggml-rpc-server`s: the devices
//! listed and checked, planned on with the servers' own memory figures,
//! and a model run across two of them; an unreachable server is an error
//! that names it.

use std::process::{Command, Output};

use ggraph::rpc::local_server::{LocalServer, server_binary};

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

/// Two servers, or `None` when the binary is not built (an error with
/// GGRAPH_REQUIRE_RPC=1, as scripts/test sets).
fn servers(test: &str) -> Option<[LocalServer; 2]> {
    if !server_binary().exists() {
        assert!(
            std::env::var("GGRAPH_REQUIRE_RPC").as_deref() != Ok("1"),
            "{test}: no {}: run scripts/rpc-server",
            server_binary().display()
        );
        eprintln!("SKIPPED {test}: no ggml-rpc-server (scripts/rpc-server builds it)");
        return None;
    }
    let start = || LocalServer::start(1, None).expect("a stock server starts");
    Some([start(), start()])
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
