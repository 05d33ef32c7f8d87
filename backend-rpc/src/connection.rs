//! One TCP connection to a server, shared by every device, buffer and
//! stream of that server in this process (the server serves one client
//! at a time). Every exchange is bounded by the connection's timeouts;
//! any failure drops the socket, and with it everything the server held
//! for us, so buffers remember the generation of the connection they
//! were made on and refuse to be used on a later one.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use ggraph_core::{Error, Result};

use crate::op_table::{self, OpTable};
use crate::protocol::{Command, HELLO_CAPS_BYTES, HELLO_REPLY_BYTES, ProtocolVersion};

/// Timeouts of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpcOptions {
    /// Connecting and the HELLO exchange.
    pub connect_timeout: Duration,
    /// Any one read or write, a graph's compute included.
    pub io_timeout: Duration,
}

impl Default for RpcOptions {
    fn default() -> RpcOptions {
        RpcOptions {
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(120),
        }
    }
}

/// What a request expects back.
pub(crate) enum Reply<'a> {
    /// The command has no reply.
    None,
    /// Exactly `out.len()` bytes, read into `out`.
    Into(&'a mut [u8]),
}

/// What a connection has moved and run since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Request bytes sent, headers included.
    pub bytes_sent: u64,
    /// Reply bytes received, headers included.
    pub bytes_received: u64,
    /// Graphs sent whole (GRAPH_COMPUTE).
    pub graphs_sent: u64,
    /// Graphs run again from the server's copy (GRAPH_RECOMPUTE).
    pub graphs_reused: u64,
    /// Bytes of the graphs sent whole (part of `bytes_sent`).
    pub graph_bytes: u64,
    /// Requests that waited for a reply: each costs the link's latency.
    pub round_trips: u64,
    /// Time spent in exchanges with the server: sending, and waiting
    /// for replies (and so for the graphs before them).
    pub wire_time: Duration,
}

struct State {
    socket: Option<TcpStream>,
    traffic: Traffic,
    /// Bumped on every (re)connect: the server's memory of an older
    /// generation is gone.
    generation: u64,
    /// The last graph sent per device, for GRAPH_RECOMPUTE; the server
    /// forgets its graphs when any buffer is freed.
    stored_graphs: HashMap<u32, Vec<u8>>,
}

pub(crate) struct Connection {
    endpoint: String,
    options: RpcOptions,
    table: &'static OpTable,
    state: Mutex<State>,
}

/// Connections of this process by endpoint: a second connection to a
/// server would wait until the first closes.
static POOL: Mutex<Vec<(String, Weak<Connection>)>> = Mutex::new(Vec::new());

impl Connection {
    /// The open connection to `endpoint`, or a new one.
    pub fn shared(endpoint: &str, options: RpcOptions) -> Result<Arc<Connection>> {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        pool.retain(|(_, c)| c.strong_count() > 0);
        if let Some(c) = pool
            .iter()
            .find(|(e, _)| e == endpoint)
            .and_then(|(_, c)| c.upgrade())
        {
            return Ok(c);
        }
        let conn = Arc::new(Connection::open(endpoint, options)?);
        pool.push((endpoint.to_string(), Arc::downgrade(&conn)));
        Ok(conn)
    }

    fn open(endpoint: &str, options: RpcOptions) -> Result<Connection> {
        let (socket, version) = connect(endpoint, &options)?;
        let table = op_table::table_for(version).ok_or_else(|| {
            server_error(
                endpoint,
                format!(
                    "the server speaks RPC protocol {version}; this client speaks {}",
                    op_table::known_versions()
                ),
            )
        })?;
        Ok(Connection {
            endpoint: endpoint.to_string(),
            options,
            table,
            state: Mutex::new(State {
                socket: Some(socket),
                traffic: Traffic::default(),
                generation: 1,
                stored_graphs: HashMap::new(),
            }),
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn table(&self) -> &'static OpTable {
        self.table
    }

    pub fn traffic(&self) -> Traffic {
        self.lock().traffic
    }

    /// The generation new buffers belong to, connecting again if the
    /// last connection dropped.
    pub fn generation(&self) -> Result<u64> {
        let mut st = self.lock();
        self.ensure_connected(&mut st)?;
        Ok(st.generation)
    }

    /// Whether memory of `generation` is still the server's: the
    /// connection it was allocated on is the open one.
    pub fn holds(&self, generation: u64) -> bool {
        let st = self.lock();
        st.generation == generation && st.socket.is_some()
    }

    /// Sends one request built of `parts` and reads its reply. With
    /// `generation`, the request refers to memory of that generation and
    /// fails if the connection dropped since.
    pub fn request(
        &self,
        generation: Option<u64>,
        cmd: Command,
        parts: &[&[u8]],
        reply: Reply<'_>,
    ) -> Result<()> {
        let mut st = self.lock();
        self.exchange(&mut st, generation, cmd, parts, reply)
    }

    /// A request with a fixed-size reply, returned.
    pub fn query<const N: usize>(
        &self,
        generation: Option<u64>,
        cmd: Command,
        payload: &[u8],
    ) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        self.request(generation, cmd, &[payload], Reply::Into(&mut out))?;
        Ok(out)
    }

    /// Frees a buffer of `generation` (nothing to do if that connection
    /// is gone: the server freed it then).
    pub fn free_buffer(&self, generation: u64, remote: u64) -> Result<()> {
        let mut st = self.lock();
        if st.generation != generation || st.socket.is_none() {
            return Ok(());
        }
        st.stored_graphs.clear();
        self.exchange(
            &mut st,
            Some(generation),
            Command::FreeBuffer,
            &[&remote.to_le_bytes()],
            Reply::None,
        )
    }

    /// Sends a graph to compute on `device`: GRAPH_RECOMPUTE when the
    /// server still holds this exact graph, GRAPH_COMPUTE otherwise.
    /// Returns at once: neither command has a reply.
    pub fn compute(&self, generation: u64, device: u32, payload: Vec<u8>) -> Result<()> {
        let mut st = self.lock();
        let reuse = st.stored_graphs.get(&device) == Some(&payload);
        if reuse {
            let dev = device.to_le_bytes();
            self.exchange(
                &mut st,
                Some(generation),
                Command::GraphRecompute,
                &[&dev],
                Reply::None,
            )?;
            st.traffic.graphs_reused += 1;
        } else {
            st.stored_graphs.remove(&device);
            self.exchange(
                &mut st,
                Some(generation),
                Command::GraphCompute,
                &[&payload],
                Reply::None,
            )?;
            st.traffic.graph_bytes += payload.len() as u64;
            st.stored_graphs.insert(device, payload);
            st.traffic.graphs_sent += 1;
        }
        Ok(())
    }

    /// Whether the graphs sent on memory of `generation` are done as far as
    /// this process can tell: the server runs requests in order, so every
    /// later read waits for them there, and waiting here as well would
    /// cost a round trip per graph. A graph the server fails closes the
    /// connection, and with it all the server held for us: the next
    /// exchange reports it, and a graph of an earlier connection is an
    /// error now.
    pub fn wait(&self, generation: u64) -> Result<()> {
        let st = self.lock();
        if generation == st.generation && st.socket.is_some() {
            return Ok(());
        }
        Err(self.error(
            "the connection dropped after a graph was sent: it died with the server's memory \
             (Context::recover restores it)"
                .into(),
        ))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ensure_connected(&self, st: &mut State) -> Result<()> {
        if st.socket.is_some() {
            return Ok(());
        }
        let (socket, version) = connect(&self.endpoint, &self.options)?;
        if version != self.table.version {
            return Err(self.error(format!(
                "the server now speaks RPC protocol {version}, it spoke {} before",
                self.table.version
            )));
        }
        st.socket = Some(socket);
        st.generation += 1;
        st.stored_graphs.clear();
        Ok(())
    }

    fn exchange(
        &self,
        st: &mut State,
        generation: Option<u64>,
        cmd: Command,
        parts: &[&[u8]],
        reply: Reply<'_>,
    ) -> Result<()> {
        match generation {
            Some(g) if g != st.generation || st.socket.is_none() => {
                return Err(self.error(
                    "the connection dropped since this memory was allocated, and the server \
                     freed it then: restore it (Context::recover does)"
                        .into(),
                ));
            }
            Some(_) => {}
            None => self.ensure_connected(st)?,
        }
        let Some(socket) = st.socket.as_mut() else {
            return Err(self.error("not connected".into()));
        };
        let received = match &reply {
            Reply::None => 0,
            Reply::Into(out) => 8 + out.len() as u64,
        };
        let start = Instant::now();
        let result = send_and_receive(socket, cmd, parts, reply);
        st.traffic.wire_time += start.elapsed();
        match result {
            Ok(()) => {
                let sent: usize = parts.iter().map(|p| p.len()).sum();
                st.traffic.bytes_sent += 9 + sent as u64;
                st.traffic.bytes_received += received;
                st.traffic.round_trips += u64::from(received > 0);
                Ok(())
            }
            Err(msg) => {
                // the stream is out of step or closed: nothing on it can be trusted
                st.socket = None;
                st.stored_graphs.clear();
                Err(self.error(format!("{cmd:?}: {msg}")))
            }
        }
    }

    fn error(&self, msg: String) -> Error {
        server_error(&self.endpoint, msg)
    }
}

/// An error that names the server.
pub(crate) fn server_error(endpoint: &str, msg: String) -> Error {
    Error::Backend {
        device: format!("rpc:{endpoint}"),
        msg,
    }
}

fn connect(endpoint: &str, options: &RpcOptions) -> Result<(TcpStream, ProtocolVersion)> {
    let fail = |msg: String| server_error(endpoint, msg);
    let addrs: Vec<_> = endpoint
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve the address: {e}")))?
        .collect();
    let mut last = None;
    let mut socket = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, options.connect_timeout) {
            Ok(s) => {
                socket = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut socket = socket.ok_or_else(|| {
        fail(match last {
            Some(e) => format!("cannot connect: {e}"),
            None => "the address resolves to nothing".into(),
        })
    })?;
    let setup = |s: &TcpStream, timeout| -> std::io::Result<()> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))
    };
    setup(&socket, options.connect_timeout).map_err(|e| fail(e.to_string()))?;
    let mut hello = [0u8; HELLO_REPLY_BYTES as usize];
    send_and_receive(
        &mut socket,
        Command::Hello,
        &[&[0u8; HELLO_CAPS_BYTES]],
        Reply::Into(&mut hello),
    )
    .map_err(|msg| {
        // a stock server busy with another client accepts the connection
        // and does not answer; anything that does answer, but not HELLO's
        // reply, is not a ggml-rpc-server
        let why = if msg.starts_with("timed out") {
            " (a server serves one client at a time: is another one connected?)"
        } else {
            " (is it a ggml-rpc-server? its answer is not one)"
        };
        fail(format!("HELLO: {msg}{why}"))
    })?;
    setup(&socket, options.io_timeout).map_err(|e| fail(e.to_string()))?;
    let version = ProtocolVersion {
        major: hello[0],
        minor: hello[1],
        patch: hello[2],
    };
    Ok((socket, version))
}

/// One request and its reply on the wire; the error says what went wrong.
fn send_and_receive(
    socket: &mut TcpStream,
    cmd: Command,
    parts: &[&[u8]],
    reply: Reply<'_>,
) -> std::result::Result<(), String> {
    let size: usize = parts.iter().map(|p| p.len()).sum();
    // small messages in one write: one packet with TCP_NODELAY
    let mut head = Vec::with_capacity(9 + if size <= 4096 { size } else { 0 });
    head.push(cmd as u8);
    head.extend_from_slice(&(size as u64).to_le_bytes());
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "timed out waiting for the server".to_string()
        }
        std::io::ErrorKind::UnexpectedEof => {
            "the server closed the connection (it rejected the request or stopped)".to_string()
        }
        _ => format!("connection lost: {e}"),
    };
    if size <= 4096 {
        for p in parts {
            head.extend_from_slice(p);
        }
        socket.write_all(&head).map_err(io)?;
    } else {
        socket.write_all(&head).map_err(io)?;
        for p in parts {
            socket.write_all(p).map_err(io)?;
        }
    }
    let Reply::Into(out) = reply else {
        return Ok(());
    };
    let mut len = [0u8; 8];
    socket.read_exact(&mut len).map_err(io)?;
    let len = u64::from_le_bytes(len);
    if len != out.len() as u64 {
        return Err(format!(
            "a reply of {len} bytes, expected {} (a server of another version?)",
            out.len()
        ));
    }
    socket.read_exact(out).map_err(io)
}
