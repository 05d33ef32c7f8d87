//! Faults and bad input: a refused connection, a server of another
//! version, replies of the wrong size, a server that stops answering, an
//! allocation the server refuses, and a server killed in the middle of
//! a model's run. Each is an error that names the server, in bounded
//! time, and the client stays usable: after a restart, the same context
//! goes on without a reload.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ggraph_core::backend::{BufferUsage, Device};
use ggraph_core::{DType, Error};
use ggraph_cpu::CpuDevice;
use ggraph_model::arch::ModelConfig;
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams, DecodeError, Recovery};
use ggraph_model::desc::ModelDesc;
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::{PlacementOptions, SplitMode};
use ggraph_rpc::local_server::LocalServer;
use ggraph_rpc::{RpcDevice, RpcOptions};

fn quick() -> RpcOptions {
    RpcOptions {
        connect_timeout: Duration::from_secs(2),
        io_timeout: Duration::from_secs(2),
    }
}

/// A server played by a closure on one accepted connection.
fn fake_server(serve: impl FnOnce(TcpStream) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        if let Ok((socket, _)) = listener.accept() {
            serve(socket);
        }
    });
    endpoint
}

/// Reads one request; returns its command and payload.
fn read_request(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).ok()?;
    let len = u64::from_le_bytes(head[1..].try_into().unwrap()) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).ok()?;
    Some((head[0], payload))
}

fn reply(s: &mut TcpStream, bytes: &[u8]) {
    let _ = s.write_all(&(bytes.len() as u64).to_le_bytes());
    let _ = s.write_all(bytes);
}

fn hello_reply(major: u8, minor: u8, patch: u8) -> Vec<u8> {
    let mut r = vec![major, minor, patch, 0];
    r.extend_from_slice(&[0u8; 24]);
    r
}

fn names_the_server(e: &impl std::fmt::Display, endpoint: &str) {
    let msg = e.to_string();
    assert!(msg.contains(&format!("rpc:{endpoint}")), "{msg}");
}

#[test]
fn a_refused_connection_is_an_error_naming_the_server() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("127.0.0.1:{port}");
    let start = Instant::now();
    let Err(e) = RpcDevice::connect(&endpoint, quick()) else {
        panic!("nothing listens there");
    };
    names_the_server(&e, &endpoint);
    assert!(e.to_string().contains("cannot connect"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_server_of_another_version_is_refused_with_both_versions_named() {
    let endpoint = fake_server(|mut s| {
        let (cmd, payload) = read_request(&mut s).unwrap();
        assert_eq!((cmd, payload.len()), (14, 24), "HELLO first, 24 bytes");
        reply(&mut s, &hello_reply(7, 1, 0));
    });
    let Err(e) = RpcDevice::connect(&endpoint, quick()) else {
        panic!("7.1.0 is not a version this client knows");
    };
    names_the_server(&e, &endpoint);
    let msg = e.to_string();
    assert!(msg.contains("7.1.0") && msg.contains("7.0.0"), "{msg}");
}

#[test]
fn a_reply_of_the_wrong_size_is_an_error_not_a_trusted_length() {
    let endpoint = fake_server(|mut s| {
        read_request(&mut s).unwrap();
        reply(&mut s, &hello_reply(7, 0, 0));
        let (cmd, _) = read_request(&mut s).unwrap();
        assert_eq!(cmd, 15, "DEVICE_COUNT");
        // claims a huge reply: the client must not allocate or wait for it
        let _ = s.write_all(&(u64::MAX / 2).to_le_bytes());
        thread::sleep(Duration::from_millis(200));
    });
    let Err(e) = RpcDevice::connect(&endpoint, quick()) else {
        panic!("a reply of the wrong size");
    };
    names_the_server(&e, &endpoint);
    assert!(e.to_string().contains("expected 4"), "{e}");
}

#[test]
fn a_server_that_stops_answering_times_out() {
    let endpoint = fake_server(|mut s| {
        read_request(&mut s).unwrap();
        reply(&mut s, &hello_reply(7, 0, 0));
        read_request(&mut s).unwrap();
        thread::sleep(Duration::from_secs(5));
    });
    let start = Instant::now();
    let Err(e) = RpcDevice::connect(&endpoint, quick()) else {
        panic!("no reply");
    };
    names_the_server(&e, &endpoint);
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
}

/// A peer that answers HELLO with anything but its reply is not taken
/// for a busy server.
#[test]
fn a_peer_that_answers_garbage_is_not_called_busy() {
    let endpoint = fake_server(|mut s| {
        read_request(&mut s).unwrap();
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        thread::sleep(Duration::from_millis(200));
    });
    let Err(e) = RpcDevice::connect(&endpoint, quick()) else {
        panic!("garbage for HELLO");
    };
    names_the_server(&e, &endpoint);
    let msg = e.to_string();
    assert!(msg.contains("is it a ggml-rpc-server?"), "{msg}");
    assert!(!msg.contains("another one connected"), "{msg}");
}

#[test]
fn a_server_that_closes_mid_hello_is_an_error() {
    let endpoint = fake_server(|mut s| {
        read_request(&mut s).unwrap();
        let _ = s.write_all(&28u64.to_le_bytes());
    });
    let Err(e) = RpcDevice::connect(&endpoint, quick()) else {
        panic!("half a reply");
    };
    names_the_server(&e, &endpoint);
}

#[test]
fn an_allocation_the_server_refuses_is_out_of_memory_and_the_connection_lives_on() {
    let Some(server) = common::server_or_skip("rpc allocation refused", None) else {
        return;
    };
    let dev = RpcDevice::connect(server.endpoint(), quick())
        .unwrap()
        .remove(0);
    let buft = dev.buffer_type();
    let too_much = dev.memory().total_bytes * 64;
    match buft.alloc(too_much, BufferUsage::Compute) {
        Err(Error::OutOfMemory { buffer_type, .. }) => assert_eq!(buffer_type, dev.name()),
        other => panic!("{:?}", other.map(|b| b.size())),
    }
    let b = buft.alloc(4096, BufferUsage::Compute).unwrap();
    b.write(100, b"after a refusal").unwrap();
    let mut back = [0u8; 15];
    b.read(100, &mut back).unwrap();
    assert_eq!(&back, b"after a refusal");
}

#[test]
fn reads_and_writes_out_of_bounds_are_refused_before_the_wire() {
    let Some(server) = common::server_or_skip("rpc bounds", None) else {
        return;
    };
    let dev = RpcDevice::connect(server.endpoint(), quick())
        .unwrap()
        .remove(0);
    let b = dev.buffer_type().alloc(256, BufferUsage::Compute).unwrap();
    assert!(matches!(
        b.write(250, &[0; 7]),
        Err(Error::OutOfBounds { .. })
    ));
    let mut out = [0u8; 300];
    assert!(matches!(
        b.read(0, &mut out),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(b.fill(200, 57, 1), Err(Error::OutOfBounds { .. })));
    // and the server is still there
    b.fill(0, 256, 7).unwrap();
    b.fill(8, 8, 1).unwrap();
    let mut all = [0u8; 256];
    b.read(0, &mut all).unwrap();
    assert!(all[..8].iter().chain(&all[16..]).all(|&x| x == 7));
    assert!(all[8..16].iter().all(|&x| x == 1));
}

fn small_model() -> ModelDesc {
    ModelDesc::random(ModelConfig::dense(160, 64, 4, 4, 2, 128), DType::Q8_0, 5).unwrap()
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 64,
        n_batch: 16,
        n_ubatch: 16,
        ..ContextParams::default()
    }
}

fn load(desc: &ModelDesc, server: &LocalServer, opts: &PlacementOptions) -> Model {
    let devices: Vec<Arc<dyn Device>> = RpcDevice::connect(server.endpoint(), quick())
        .unwrap()
        .into_iter()
        .map(|d| d as Arc<dyn Device>)
        .collect();
    Model::load(desc, &devices, CpuDevice::new(), opts, LoadMode::Real, None).unwrap()
}

/// Kills the server under a context that has decoded something, and
/// checks that the next decode fails in bounded time naming the server,
/// with the failed ubatch rolled back.
fn kill_mid_run(server: &mut LocalServer, ctx: &mut Context) {
    let used = ctx.memory().cells().used();
    server.kill();
    let start = Instant::now();
    let Err(e) = ctx.decode(&Batch::tokens(&[5])) else {
        panic!("the server is gone");
    };
    names_the_server(&e, server.endpoint());
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        ctx.memory().cells().used(),
        used,
        "the failed ubatch is rolled back"
    );
    // the context stays an object one can use: errors, never panics
    assert!(ctx.decode(&Batch::tokens(&[5])).is_err());
    assert!(ctx.memory_lost());
}

#[test]
fn a_server_killed_mid_run_fails_the_decode_and_recover_brings_the_context_back() {
    let Some(mut server) = common::server_or_skip("rpc server killed", None) else {
        return;
    };
    let desc = small_model();
    let opts = PlacementOptions::default();
    let model = Arc::new(load(&desc, &server, &opts));
    let on_server: u64 = (model.weight_bytes().iter())
        .filter(|(buft, _)| buft.starts_with("rpc:"))
        .map(|(_, bytes)| bytes)
        .sum();
    let mut ctx = Context::new(model, params()).unwrap();
    ctx.decode(&Batch::tokens(&[1, 2, 3, 4])).unwrap();
    let before = ctx.logits().to_vec();
    kill_mid_run(&mut server, &mut ctx);

    // while the server is down, recovering fails in bounded time and
    // changes nothing
    let start = Instant::now();
    let Err(e) = ctx.recover() else {
        panic!("nothing to recover onto");
    };
    names_the_server(&e, server.endpoint());
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(ctx.memory_lost());

    // back on the same port: the KV cache on it is gone, so decode says
    // so until recover empties it, and then the context works as before
    let _server = LocalServer::start_on(server.port(), 2, None).unwrap();
    let Err(e) = ctx.decode(&Batch::tokens(&[5])) else {
        panic!("the KV cache on the server is gone");
    };
    assert!(
        matches!(&e, DecodeError::CacheLost(buft) if buft.starts_with("rpc:")),
        "{e}"
    );
    let recovery = ctx.recover().unwrap();
    assert!(recovery.cache_cleared);
    assert!(recovery.compute_buffers > 0, "{recovery:?}");
    assert!(
        recovery.weight_bytes > 0 && recovery.weight_bytes <= on_server,
        "{recovery:?}, {on_server} weight bytes on the server"
    );
    assert!(!ctx.memory_lost());
    assert_eq!(ctx.memory().cells().used(), 0);
    ctx.decode(&Batch::tokens(&[1, 2, 3, 4])).unwrap();
    assert_eq!(
        ctx.logits(),
        &before[..],
        "the same logits after the recovery, from the same model object"
    );
    ctx.decode(&Batch::tokens(&[5])).unwrap();
    assert_eq!(ctx.recover().unwrap(), Recovery::default(), "nothing lost");
}

#[test]
fn with_the_kv_cache_on_the_host_a_retry_after_the_server_is_back_just_works() {
    let Some(mut server) = common::server_or_skip("rpc server killed, host KV", None) else {
        return;
    };
    let desc = small_model();
    let opts = PlacementOptions {
        offload_kqv: false,
        ..PlacementOptions::default()
    };
    let expected = {
        let mut ctx = Context::new(Arc::new(load(&desc, &server, &opts)), params()).unwrap();
        ctx.decode(&Batch::tokens(&[1, 2, 3, 4])).unwrap();
        ctx.decode(&Batch::tokens(&[5])).unwrap();
        ctx.logits().to_vec()
    };

    let mut ctx = Context::new(Arc::new(load(&desc, &server, &opts)), params()).unwrap();
    ctx.decode(&Batch::tokens(&[1, 2, 3, 4])).unwrap();
    kill_mid_run(&mut server, &mut ctx);
    let _server = LocalServer::start_on(server.port(), 2, None).unwrap();
    // the retry restores the weights and compute memory by itself, and
    // the sequence goes on where it was
    ctx.decode(&Batch::tokens(&[5])).unwrap();
    assert_eq!(ctx.logits(), &expected[..]);
    assert_eq!(ctx.memory().cells().used(), 5);
}

#[test]
fn row_split_over_two_servers_goes_on_when_the_second_restarts() {
    let Some(first) = common::server_or_skip("rpc row split restart", None) else {
        return;
    };
    let mut second = common::server_or_skip("rpc row split restart", None).unwrap();
    let devices: Vec<Arc<dyn Device>> = [first.endpoint(), second.endpoint()]
        .iter()
        .flat_map(|e| RpcDevice::connect(e, quick()).unwrap())
        .map(|d| d as Arc<dyn Device>)
        .collect();
    let opts = PlacementOptions {
        split_mode: SplitMode::Row,
        ..PlacementOptions::default()
    };
    let desc = small_model();
    let model = Model::load(
        &desc,
        &devices,
        CpuDevice::new(),
        &opts,
        LoadMode::Real,
        None,
    );
    let model = Arc::new(model.unwrap());
    let on_second: u64 = (model.weight_bytes().iter())
        .filter(|(buft, _)| buft.starts_with(&format!("rpc:{}", second.endpoint())))
        .map(|(_, bytes)| bytes)
        .sum();
    let expected = {
        let mut ctx = Context::new(model.clone(), params()).unwrap();
        ctx.decode(&Batch::tokens(&[1, 2, 3, 4])).unwrap();
        ctx.decode(&Batch::tokens(&[5])).unwrap();
        ctx.logits().to_vec()
    };
    let mut ctx = Context::new(model, params()).unwrap();
    ctx.decode(&Batch::tokens(&[1, 2, 3, 4])).unwrap();
    // the second server holds rows of the matrices; the KV cache is on
    // the main device, the first
    kill_mid_run(&mut second, &mut ctx);
    let _second = LocalServer::start_on(second.port(), 2, None).unwrap();
    // the KV cache is intact: only the second server's rows go up again
    let recovery = ctx.recover().unwrap();
    assert!(!recovery.cache_cleared);
    assert!(
        recovery.weight_bytes > 0 && recovery.weight_bytes <= on_second,
        "{recovery:?}: the second server holds {on_second} weight bytes"
    );
    ctx.decode(&Batch::tokens(&[5])).unwrap();
    assert_eq!(ctx.logits(), &expected[..]);
}

/// Answers the device queries of a one-device server, then hands the
/// connection to `then`.
fn fake_device_server(then: impl FnOnce(&mut TcpStream) + Send + 'static) -> String {
    fake_server(move |mut s| {
        read_request(&mut s).unwrap();
        reply(&mut s, &hello_reply(7, 0, 0));
        read_request(&mut s).unwrap();
        reply(&mut s, &1u32.to_le_bytes());
        read_request(&mut s).unwrap();
        reply(&mut s, &32u64.to_le_bytes());
        read_request(&mut s).unwrap();
        reply(&mut s, &u64::MAX.to_le_bytes());
        read_request(&mut s).unwrap();
        let mut mem = (1u64 << 30).to_le_bytes().to_vec();
        mem.extend_from_slice(&(1u64 << 30).to_le_bytes());
        reply(&mut s, &mem);
        then(&mut s);
    })
}

#[test]
fn an_allocation_smaller_than_asked_is_refused_and_freed() {
    let (tx, rx) = std::sync::mpsc::channel();
    let endpoint = fake_device_server(move |s| {
        let (cmd, payload) = read_request(s).unwrap();
        assert_eq!((cmd, payload.len()), (0, 12), "ALLOC_BUFFER");
        let mut r = 0x1000u64.to_le_bytes().to_vec();
        r.extend_from_slice(&10u64.to_le_bytes());
        reply(s, &r);
        let (cmd, _) = read_request(s).unwrap();
        assert_eq!(cmd, 3, "BUFFER_GET_BASE");
        reply(s, &0x7f00_0000u64.to_le_bytes());
        let freed = read_request(s);
        tx.send(freed).unwrap();
    });
    let dev = RpcDevice::connect(&endpoint, quick()).unwrap().remove(0);
    let Err(e) = dev.buffer_type().alloc(4096, BufferUsage::Compute) else {
        panic!("10 bytes are not the 4096 asked for");
    };
    names_the_server(&e, &endpoint);
    assert!(e.to_string().contains("4096"), "{e}");
    let freed = rx.recv_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(
        freed,
        Some((4, 0x1000u64.to_le_bytes().to_vec())),
        "FREE_BUFFER of it"
    );
}

/// A graph sent before the server died never counts as done, even once
/// the connection is back: waiting for it is an error naming the server.
#[test]
fn a_graph_lost_with_its_server_is_not_reported_done_after_a_reconnect() {
    let Some(mut server) = common::server_or_skip("rpc lost graph", None) else {
        return;
    };
    let dev = RpcDevice::connect(server.endpoint(), quick())
        .unwrap()
        .remove(0);
    let mut b = ggraph_core::ir::GraphBuilder::new();
    let x = b.input("x", DType::F32, &[64, 4]).unwrap();
    let y = b.silu(x).unwrap();
    b.set_output(y).unwrap();
    let mut graph = b.build();
    let _memory = ggraph_core::exec::alloc_one_buffer(&mut graph, &dev.buffer_type()).unwrap();
    graph.write_f32(x, &[0.5; 256]).unwrap();
    let mut stream = dev.new_stream().unwrap();
    let nodes = graph.nodes().to_vec();
    stream.compute(&graph, &nodes).unwrap();
    let event = stream.record_event().unwrap();
    event.synchronize().unwrap();

    // a second graph sent, then the server gone before anyone waits
    graph.write_f32(x, &[1.0; 256]).unwrap();
    stream.compute(&graph, &nodes).unwrap_or(());
    let event = stream.record_event().unwrap();
    server.kill();
    let _server = LocalServer::start_on(server.port(), 1, None).unwrap();
    // a query finds the connection dead; the next one reconnects and is
    // answered by the new server
    let _ = dev.memory();
    assert_eq!(dev.memory().total_bytes, dev.memory().total_bytes);
    let Err(e) = event.synchronize() else {
        panic!("the graph died with the first server");
    };
    names_the_server(&e, server.endpoint());
    assert!(stream.synchronize().is_err());
}
