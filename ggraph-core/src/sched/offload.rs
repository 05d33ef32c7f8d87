//! Op-offload policies: when an op whose weight sits in host memory is
//! worth running on a faster device that must first receive the weight.

use crate::backend::{Device, DevicePerf};
use crate::ir::{Graph, OpKind, TensorId};

/// Speeds of the host, for the cost model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostPerf {
    /// Sustained matrix throughput, FLOP per second.
    pub flops_per_s: f64,
    /// Memory bandwidth, bytes per second.
    pub mem_bytes_per_s: f64,
}

impl Default for HostPerf {
    /// A 2-core AVX-512 server core pair: ~300 GFLOP/s, ~50 GB/s.
    fn default() -> Self {
        HostPerf {
            flops_per_s: 300e9,
            mem_bytes_per_s: 50e9,
        }
    }
}

/// How the scheduler decides op offload.
#[derive(Clone, Debug, PartialEq)]
pub enum OffloadPolicy {
    /// Ask the device (`Device::offload_op`; GPU-class devices follow
    /// ggml: mul_mat / mul_mat_id with a batch of at least 32).
    Device,
    /// ggml's rule with another batch threshold.
    MinBatch(usize),
    /// Offload when copying the weight over the link plus computing on the
    /// device is cheaper than computing on the host. Devices that declare
    /// no speed figures fall back to `Device`.
    CostModel(HostPerf),
}

impl OffloadPolicy {
    /// A short description for logs and [`Cause::OpOffload`](crate::sched::Cause::OpOffload):
    /// `device rule`, `batch >= 64`, `cost model`.
    pub fn name(&self) -> String {
        match self {
            OffloadPolicy::Device => "device rule".into(),
            OffloadPolicy::MinBatch(n) => format!("batch >= {n}"),
            OffloadPolicy::CostModel(_) => "cost model".into(),
        }
    }

    /// Whether `node` (reading `weight` from host memory) should run on
    /// `device`.
    pub fn offload(
        &self,
        device: &dyn Device,
        graph: &Graph,
        node: TensorId,
        weight: TensorId,
    ) -> bool {
        match self {
            OffloadPolicy::Device => device.offload_op(graph, node),
            OffloadPolicy::MinBatch(n) => crate::backend::batch_offload_rule(graph, node, *n),
            OffloadPolicy::CostModel(host) => match device.perf() {
                Some(perf) => cost_says_offload(&perf, host, graph, node, weight),
                None => device.offload_op(graph, node),
            },
        }
    }
}

/// FLOPs of a matrix op (0 for others).
pub fn matmul_flops(graph: &Graph, node: TensorId) -> f64 {
    let t = graph.tensor(node);
    match t.op.kind() {
        OpKind::MulMat | OpKind::MulMatId => {
            let k = graph.tensor(t.src[0]).ne[0] as f64;
            2.0 * k * t.nelements() as f64
        }
        _ => 0.0,
    }
}

fn cost_says_offload(
    perf: &DevicePerf,
    host: &HostPerf,
    graph: &Graph,
    node: TensorId,
    weight: TensorId,
) -> bool {
    let flops = matmul_flops(graph, node);
    if flops == 0.0 {
        return false;
    }
    let bytes = graph.tensor(weight).nbytes() as f64;
    let on_device = bytes / perf.link_bytes_per_s + flops / perf.flops_per_s;
    let on_host = (flops / host.flops_per_s).max(bytes / host.mem_bytes_per_s);
    on_device < on_host
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;
    use crate::ir::GraphBuilder;

    /// A 4096 x 4096 f32 weight (64 MiB) times `n` columns.
    fn matmul(n: usize) -> (Graph, TensorId, TensorId) {
        let mut b = GraphBuilder::new();
        let w = b.weight("w", DType::F32, &[4096, 4096]).unwrap();
        let x = b.input("x", DType::F32, &[4096, n]).unwrap();
        let y = b.mul_mat(w, x).unwrap();
        b.set_output(y).unwrap();
        (b.build(), y, w)
    }

    /// Host: 300 GFLOP/s, 50 GB/s. Device: a 25 GB/s link, 100 TFLOP/s.
    /// Offloading costs 64 MiB / 25 GB/s = 2.7 ms plus the compute; the
    /// host takes max(flops / 300 GFLOP/s, 1.3 ms), so the crossover is
    /// at about 24 columns.
    #[test]
    fn the_cost_model_offloads_past_the_crossover_only() {
        let device = DevicePerf {
            link_bytes_per_s: 25e9,
            flops_per_s: 100e12,
            mem_bytes_per_s: 2e12,
        };
        let host = HostPerf::default();
        for (n, want) in [(1, false), (8, false), (16, false), (32, true), (512, true)] {
            let (g, y, w) = matmul(n);
            assert_eq!(cost_says_offload(&device, &host, &g, y, w), want, "n = {n}");
        }
        // a 1 GB/s link moves the crossover up to about 1200 columns (67 ms
        // of copying)
        let slow = DevicePerf {
            link_bytes_per_s: 1e9,
            ..device
        };
        let (g, y, w) = matmul(2048);
        assert!(cost_says_offload(&slow, &host, &g, y, w));
        let (g, y, w) = matmul(512);
        assert!(!cost_says_offload(&slow, &host, &g, y, w));
        let (g, y, w) = matmul(128);
        assert!(!cost_says_offload(&slow, &host, &g, y, w));
    }

    #[test]
    fn only_matrix_ops_have_flops() {
        let (g, y, w) = matmul(3);
        assert_eq!(matmul_flops(&g, y), 2.0 * 4096.0 * 4096.0 * 3.0);
        assert_eq!(matmul_flops(&g, w), 0.0);
    }
}
