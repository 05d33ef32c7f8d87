//! ggraph's RPC backend: the devices of stock llama.cpp `ggml-rpc-server`
//! processes as ggraph devices.
//!
//! A server exposes its devices (a GPU each, or its CPU) over TCP with
//! ggml's RPC protocol. ggraph's IR has ggml's op semantics, so the
//! scheduler places ops on a server's devices as on local GPUs: weights
//! live in the server's memory, a split travels as one ggml graph, and
//! the copies between splits go through the client. No server of ggraph's
//! own is needed: existing fleets of `ggml-rpc-server` become devices.
//!
//! ```no_run
//! use ggraph_rpc::{RpcDevice, RpcOptions};
//! let devices = RpcDevice::connect("192.168.1.20:50052", RpcOptions::default())?;
//! for d in &devices {
//!     println!("{} ({})", ggraph_core::backend::Device::name(d.as_ref()), d.endpoint());
//! }
//! # Ok::<(), ggraph_core::Error>(())
//! ```
//!
//! Never expose a server on an open network: as its own documentation
//! says, it trusts whoever connects.

#![warn(missing_docs)]

mod buffer;
mod connection;
mod device;
mod encode;
mod graph;
pub mod local_server;
mod op_table;
pub mod protocol;
mod stream;
mod supports;
mod wire_tensor;

use std::sync::Arc;

use ggraph_core::backend::Device;
use ggraph_core::{Error, Result};

pub use buffer::{RpcBuffer, RpcBufferType};
pub use connection::{RpcOptions, Traffic};
pub use device::RpcDevice;
pub use stream::RpcStream;

/// Splits llama.cpp's `--rpc` list, `HOST:PORT[,HOST:PORT...]`.
pub fn parse_endpoints(list: &str) -> Result<Vec<String>> {
    list.split(',')
        .map(str::trim)
        .map(|e| {
            let (host, port) = e.rsplit_once(':').ok_or_else(|| bad_endpoint(e))?;
            match port.parse::<u16>() {
                Ok(p) if p > 0 && !host.is_empty() => Ok(e.to_string()),
                _ => Err(bad_endpoint(e)),
            }
        })
        .collect()
}

fn bad_endpoint(e: &str) -> Error {
    Error::InvalidArgument(format!("'{e}' is not HOST:PORT"))
}

/// Every device of every server in `list` (`HOST:PORT,...`), in order.
pub fn connect_all(list: &str, options: RpcOptions) -> Result<Vec<Arc<dyn Device>>> {
    let mut devices: Vec<Arc<dyn Device>> = Vec::new();
    for endpoint in parse_endpoints(list)? {
        for d in RpcDevice::connect(&endpoint, options)? {
            devices.push(d);
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_host_colon_port() {
        assert_eq!(
            parse_endpoints("127.0.0.1:50052, gpu-box:7000").unwrap(),
            ["127.0.0.1:50052", "gpu-box:7000"]
        );
        for bad in [
            "",
            "host",
            "host:",
            ":80",
            "host:0",
            "host:99999",
            "a:1,,b:2",
        ] {
            assert!(parse_endpoints(bad).is_err(), "{bad}");
        }
    }
}
