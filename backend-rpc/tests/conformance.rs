//! The conformance suite on the device of a stock `ggml-rpc-server`:
//! every op, type and layout the server takes, against the f64
//! reference, computed by llama.cpp's own CPU backend behind the wire.

mod common;

use std::sync::Arc;
use std::time::Instant;

use ggraph_conformance as conformance;
use ggraph_core::backend::Device;
use ggraph_rpc::{RpcDevice, RpcOptions};

#[test]
fn a_stock_server_passes_the_conformance_suite() {
    let Some(server) = common::server_or_skip("rpc conformance", None) else {
        return;
    };
    let devices = RpcDevice::connect(server.endpoint(), RpcOptions::default()).unwrap();
    assert_eq!(devices.len(), 1, "a CPU-only server has one device");
    let dev: Arc<dyn Device> = devices[0].clone();
    assert_eq!(dev.name(), format!("rpc:{}:0", server.endpoint()));
    let start = Instant::now();
    let filter = std::env::var("GGRAPH_CONFORMANCE_FILTER").unwrap_or_default();
    let report = conformance::run_filtered(&dev, |name| name.contains(filter.as_str()));
    println!("{}", report.summary());
    let t = devices[0].traffic();
    println!(
        "{} ({}): {:.1} s, {} graphs, {} bytes sent, {} received",
        dev.name(),
        dev.description(),
        start.elapsed().as_secs_f64(),
        t.graphs_sent,
        t.bytes_sent,
        t.bytes_received
    );
    report.check().unwrap();
    assert!(
        report.passed() > report.unsupported(),
        "most of the suite runs on the server"
    );
}
