//! A llama over the CPU and two stock servers, by layers and by rows,
//! gives the CPU's greedy tokens; weights uploaded again (a new load, or
//! a server restarted under a context) come from the servers' caches.

mod common;

use std::sync::Arc;

use ggraph_conformance::{nmse, testing};
use ggraph_core::DType;
use ggraph_core::backend::Device;
use ggraph_cpu::CpuDevice;
use ggraph_model::arch::{Attention, ModelConfig};
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams};
use ggraph_model::desc::ModelDesc;
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::{PlacementOptions, SplitMode};
use ggraph_rpc::local_server::LocalServer;
use ggraph_rpc::{RpcDevice, RpcOptions};

/// The output matrix (32000 x 384 in Q8_0, 13 MB) is past the 10 MiB
/// from which weights go through the servers' caches.
fn desc() -> ModelDesc {
    ModelDesc::random(
        ModelConfig::dense(32000, 384, 4, 6, 2, 512),
        DType::Q8_0,
        23,
    )
    .unwrap()
}

fn params(attention: Attention) -> ContextParams {
    ContextParams {
        n_ctx: 64,
        n_batch: 32,
        n_ubatch: 8,
        attention,
        ..ContextParams::default()
    }
}

/// Logits of a prompt's last token, then 6 greedy tokens.
fn greedy(model: Model, attention: Attention) -> (Vec<f32>, Vec<i32>) {
    let prompt = [5, 9, 100, 42, 7, 31000, 12, 8, 1000, 3];
    testing::greedy::greedy(model, params(attention), &prompt, 6).unwrap()
}

/// `d` loaded on `devices` and the CPU.
fn load(d: &ModelDesc, devices: &[Arc<dyn Device>], opts: &PlacementOptions) -> Model {
    Model::load(d, devices, CpuDevice::new(), opts, LoadMode::Real, None).unwrap()
}

fn rpc_devices(servers: &[LocalServer]) -> (Vec<Arc<RpcDevice>>, Vec<Arc<dyn Device>>) {
    let rpc: Vec<Arc<RpcDevice>> = servers
        .iter()
        .flat_map(|s| RpcDevice::connect(s.endpoint(), RpcOptions::default()).unwrap())
        .collect();
    let dyns = rpc.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    (rpc, dyns)
}

#[test]
fn layer_and_row_split_over_two_stock_servers_give_the_cpu_tokens() {
    let cache = [tempdir("a"), tempdir("b")];
    let Some(first) = common::server_or_skip("rpc runner", Some(&*cache[0])) else {
        return;
    };
    let second = common::server_or_skip("rpc runner", Some(&*cache[1])).unwrap();
    let servers = [first, second];
    let d = desc();
    let (rpc, devices) = rpc_devices(&servers);
    let mut uploads: Vec<u64> = Vec::new();
    for attention in [Attention::Standard, Attention::Flash] {
        let cpu_only = load(&d, &[], &PlacementOptions::default());
        let (want_logits, want_tokens) = greedy(cpu_only, attention);
        let want: Vec<f64> = want_logits.iter().map(|x| *x as f64).collect();
        for mode in [SplitMode::Layer, SplitMode::Row] {
            let opts = PlacementOptions {
                split_mode: mode,
                ..PlacementOptions::default()
            };
            let sent_before: u64 = rpc.iter().map(|d| d.traffic().bytes_sent).sum();
            let m = load(&d, &devices, &opts);
            let on_servers: Vec<_> = m
                .weight_bytes()
                .into_iter()
                .filter(|(n, _)| n.starts_with("rpc:"))
                .collect();
            assert_eq!(on_servers.len(), 2, "{mode:?}: {:?}", m.weight_bytes());
            let upload: u64 = rpc.iter().map(|d| d.traffic().bytes_sent).sum::<u64>() - sent_before;
            uploads.push(upload);
            let (logits, tokens) = greedy(m, attention);
            let e = nmse(&logits, &want);
            println!(
                "{attention:?} {mode:?}: nmse {e:.2e}, upload {upload} bytes, tokens {tokens:?}"
            );
            assert!(e < 5e-4, "{attention:?} {mode:?}: nmse {e}");
            assert_eq!(tokens, want_tokens, "{attention:?} {mode:?}: greedy tokens");
        }
    }
    // the first load filled the servers' caches; the output matrix of
    // the later layer-split loads came from them (row split cuts it in
    // parts under 10 MiB)
    assert!(uploads[2] + 10 * 1024 * 1024 < uploads[0], "{uploads:?}");
}

#[test]
fn weights_uploaded_again_come_from_the_server_cache() {
    let cache = tempdir("cache");
    let Some(server) = common::server_or_skip("rpc cache", Some(&*cache)) else {
        return;
    };
    let d = desc();
    let (rpc, devices) = rpc_devices(std::slice::from_ref(&server));
    let mut uploads = Vec::new();
    let mut logits = Vec::new();
    for _ in 0..2 {
        let before = rpc[0].traffic().bytes_sent;
        let m = load(&d, &devices, &PlacementOptions::default());
        uploads.push(rpc[0].traffic().bytes_sent - before);
        logits.push(greedy(m, Attention::Flash));
    }
    println!(
        "uploads: first {} bytes, again {} bytes",
        uploads[0], uploads[1]
    );
    assert!(
        uploads[1] + 10 * 1024 * 1024 < uploads[0],
        "the output matrix came from the cache: {uploads:?}"
    );
    assert_eq!(logits[0], logits[1]);
    let cached = std::fs::read_dir(cache.join("rpc")).unwrap().count();
    assert!(cached >= 1, "the server stored the large weight");
}

/// A server restarted with its cache: the context's recovery uploads the
/// weights it held again, the large ones by hash only, and the same
/// prompt gives the same logits without a reload.
#[test]
fn a_server_restarted_with_its_cache_takes_large_weights_back_by_hash() {
    let cache = tempdir("restart");
    let Some(mut server) = common::server_or_skip("rpc restart with cache", Some(&*cache)) else {
        return;
    };
    let d = desc();
    let (rpc, devices) = rpc_devices(std::slice::from_ref(&server));
    let model = load(&d, &devices, &PlacementOptions::default());
    let on_server: u64 = (model.weight_bytes().iter())
        .filter(|(buft, _)| buft.starts_with("rpc:"))
        .map(|(_, bytes)| bytes)
        .sum();
    let mut ctx = Context::new(Arc::new(model), params(Attention::Flash)).unwrap();
    let prompt = Batch::tokens(&[5, 9, 100, 42, 7]);
    ctx.decode(&prompt).unwrap();
    let before = ctx.logits().to_vec();

    server.kill();
    assert!(ctx.decode(&Batch::tokens(&[3])).is_err());
    let _server = LocalServer::start_on(server.port(), 2, Some(&*cache)).unwrap();
    let sent = rpc[0].traffic().bytes_sent;
    let recovery = ctx.recover().unwrap();
    let resent = rpc[0].traffic().bytes_sent - sent;
    println!("recovery {recovery:?}: {resent} bytes sent for {on_server} weight bytes");
    assert!(recovery.cache_cleared);
    assert_eq!(recovery.weight_bytes, on_server);
    assert!(
        resent + 10 * 1024 * 1024 < on_server,
        "the output matrix came from the cache: {resent} bytes sent"
    );
    ctx.decode(&prompt).unwrap();
    assert_eq!(ctx.logits(), &before[..]);
}

/// A cache folder for a test's servers, removed when the test ends
/// (declared before the servers, so they stop first).
struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(tag: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!(
        "ggraph-rpc-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}
