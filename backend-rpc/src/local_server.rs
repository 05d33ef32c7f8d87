//! A stock `ggml-rpc-server` started on this machine, for tests, benches
//! and experiments: on 127.0.0.1, a free port, stopped when dropped.
//!
//! The binary is `GGRAPH_RPC_SERVER` if set, else the one
//! `scripts/rpc-server` builds (`~/.cache/ggraph-llama/rpc-build/bin/`).

use std::collections::BTreeSet;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A running `ggml-rpc-server` process on 127.0.0.1, killed when dropped.
pub struct LocalServer {
    child: Child,
    endpoint: String,
}

/// Where the server binary is expected: `GGRAPH_RPC_SERVER` if set, else
/// `~/.cache/ggraph-llama/rpc-build/bin/ggml-rpc-server`. The file may not
/// exist; [`LocalServer::start`] then fails.
pub fn server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("GGRAPH_RPC_SERVER") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".cache/ggraph-llama/rpc-build/bin/ggml-rpc-server")
}

impl LocalServer {
    /// Starts a server with `threads` CPU threads; with `cache_dir`, its
    /// tensor cache (`-c`) lives there.
    pub fn start(threads: usize, cache_dir: Option<&Path>) -> std::io::Result<LocalServer> {
        LocalServer::start_on(free_port()?, threads, cache_dir)
    }

    /// The same on a given port (to bring a stopped server back where it
    /// was).
    pub fn start_on(
        port: u16,
        threads: usize,
        cache_dir: Option<&Path>,
    ) -> std::io::Result<LocalServer> {
        reserve(port);
        let binary = server_binary();
        let mut cmd = Command::new(&binary);
        cmd.args([
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            &threads.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some(dir) = cache_dir {
            cmd.arg("-c").env("LLAMA_CACHE", dir);
        }
        let child = cmd
            .spawn()
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", binary.display())))?;
        let mut server = LocalServer {
            child,
            endpoint: format!("127.0.0.1:{port}"),
        };
        server.wait_listening()?;
        Ok(server)
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The TCP port the server listens on (on 127.0.0.1), for
    /// [`LocalServer::start_on`] after a [`kill`](LocalServer::kill).
    pub fn port(&self) -> u16 {
        self.endpoint
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Stops the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn wait_listening(&mut self) -> std::io::Result<()> {
        let start = Instant::now();
        let port = self.port();
        while start.elapsed() < Duration::from_secs(20) {
            if let Some(status) = self.child.try_wait()? {
                return Err(std::io::Error::other(format!(
                    "ggml-rpc-server exited at start: {status}"
                )));
            }
            // the kernel's tables say whether this child listens; where
            // there are none, a probe connection says whether anyone does
            match listening_by(port, self.child.id()) {
                Some(true) => return Ok(()),
                Some(false) => {}
                None if TcpStream::connect(&self.endpoint)
                    .is_ok_and(|s| !connected_to_itself(&s)) =>
                {
                    // the listener may be another process's on the same
                    // port, if this one failed to bind and is exiting
                    std::thread::sleep(Duration::from_millis(20));
                    if let Some(status) = self.child.try_wait()? {
                        return Err(std::io::Error::other(format!(
                            "ggml-rpc-server exited at start: {status} ({} taken?)",
                            self.endpoint
                        )));
                    }
                    return Ok(());
                }
                None => {}
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        Err(std::io::Error::other(format!(
            "ggml-rpc-server did not listen on {} within 20 s",
            self.endpoint
        )))
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether process `pid` listens on `port` of 127.0.0.1 (or of every
/// address), by the kernel's tables where it keeps them (`/proc/net/tcp`
/// and the process's descriptors). A probe connection cannot tell whose
/// listener answers: a test that binds a free port for a moment can hold
/// the port a server failed to bind.
fn listening_by(port: u16, pid: u32) -> Option<bool> {
    const LISTEN: &str = "0A";
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let ours = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
    ];
    // sl, local address, remote address, state, queues, timer,
    // retransmits, uid, timeout, inode
    let sockets: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(
            |line| match &line.split_whitespace().collect::<Vec<_>>()[..] {
                [_, local, _, LISTEN, _, _, _, _, _, inode, ..]
                    if ours.contains(&local.to_string()) =>
                {
                    Some(format!("socket:[{inode}]"))
                }
                _ => None,
            },
        )
        .collect();
    if sockets.is_empty() {
        return Some(false);
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|t| sockets.iter().any(|s| t.as_os_str() == s.as_str()))
    }))
}

/// Whether a connection to a port with no listener met itself: TCP's
/// simultaneous open, when the OS picks the destination port as the
/// source port (the server's port is in the ephemeral range).
fn connected_to_itself(stream: &TcpStream) -> bool {
    match (stream.local_addr(), stream.peer_addr()) {
        (Ok(local), Ok(peer)) => local == peer,
        _ => true,
    }
}

/// Ports this process has started servers on. A killed server's port
/// stays here for its restart ([`LocalServer::start_on`]): tests run in
/// parallel, and another test's server taking that port would answer
/// the restarted one's clients, then vanish with its test.
static PORTS_IN_USE: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn reserve(port: u16) {
    PORTS_IN_USE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(port);
}

/// A port the OS says is free and this process has not used before.
fn free_port() -> std::io::Result<u16> {
    for _ in 0..64 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut used = PORTS_IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        if used.insert(port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other(
        "no free port on 127.0.0.1 that this process has not used",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_s_tables_show_whose_listener_a_port_has() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let Some(mine) = listening_by(port, std::process::id()) else {
            // no tables on this OS: the probe connection is used instead
            return;
        };
        assert!(mine);
        let init = 1;
        assert_ne!(listening_by(port, init), Some(true));
        drop(listener);
        assert_eq!(listening_by(port, std::process::id()), Some(false));
    }
}
