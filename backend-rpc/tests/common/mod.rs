//! Starting stock servers for the tests.

use std::io::Write;
use std::path::Path;

use ggraph_rpc::local_server::{LocalServer, server_binary};

/// A stock `ggml-rpc-server` on a free port, or `None` (with a printed
/// message) when the binary is not built. With `GGRAPH_REQUIRE_RPC=1`
/// (set by scripts/test, which builds it) a missing binary fails the
/// test instead.
#[allow(dead_code)]
pub fn server_or_skip(test: &str, cache_dir: Option<&Path>) -> Option<LocalServer> {
    let binary = server_binary();
    if !binary.exists() {
        if std::env::var("GGRAPH_REQUIRE_RPC").as_deref() == Ok("1") {
            panic!(
                "{test}: GGRAPH_REQUIRE_RPC=1 but {} does not exist: run scripts/rpc-server",
                binary.display()
            );
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: no ggml-rpc-server at {} (scripts/rpc-server builds it; \
             GGRAPH_RPC_SERVER names another)",
            binary.display()
        );
        return None;
    }
    Some(LocalServer::start(2, cache_dir).expect("a stock server starts"))
}
