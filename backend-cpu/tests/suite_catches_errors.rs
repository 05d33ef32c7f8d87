//! The conformance suite is only worth something if it fails broken
//! kernels: a device whose mul_mat is off by 5% and whose softmax
//! forgets the mask must fail exactly those cases.

use std::sync::Arc;

use ggraph_conformance::{self as conformance, Outcome};
use ggraph_core::Result;
use ggraph_core::backend::{BufferType, Device, DeviceKind, MemoryInfo, Stream};
use ggraph_core::ir::{Graph, Op, OpKind, TensorId};
use ggraph_cpu::CpuDevice;

/// The CPU with two planted bugs.
struct Mutant {
    cpu: Arc<CpuDevice>,
}

struct MutantStream {
    inner: Box<dyn Stream>,
}

impl Device for Mutant {
    fn name(&self) -> &str {
        "mutant"
    }
    fn description(&self) -> String {
        "CPU with planted bugs".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }
    fn memory(&self) -> MemoryInfo {
        self.cpu.memory()
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.cpu.buffer_type()
    }
    fn supports_op(&self, g: &Graph, n: TensorId) -> bool {
        self.cpu.supports_op(g, n)
    }
    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        Ok(Box::new(MutantStream {
            inner: self.cpu.new_stream()?,
        }))
    }
}

impl Stream for MutantStream {
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        let mut g = graph.clone();
        for &n in nodes {
            // bug 2: softmax ignores its mask
            if matches!(g.tensor(n).op, Op::SoftMax { .. }) {
                g.tensor_mut(n).src.truncate(1);
            }
        }
        self.inner.compute(&g, nodes)?;
        for &n in nodes {
            // bug 1: mul_mat results 5% too large
            if g.tensor(n).op.kind() == OpKind::MulMat && !g.tensor(n).is_empty() {
                let v: Vec<f32> = g.read_f32(n)?.iter().map(|x| x * 1.05).collect();
                g.write_f32(n, &v)?;
            }
        }
        Ok(())
    }
}

#[test]
fn the_suite_fails_exactly_the_broken_ops() {
    let dev: Arc<dyn Device> = Arc::new(Mutant {
        cpu: CpuDevice::new(),
    });
    let report = conformance::run(&dev);
    let failed = |r: &conformance::CaseResult| matches!(r.outcome, Outcome::Fail { .. });
    for r in &report.results {
        let masked_softmax = r.op == OpKind::SoftMax && r.name.contains("mask");
        let nonempty_mul_mat = r.op == OpKind::MulMat && !r.name.contains("empty");
        if masked_softmax || nonempty_mul_mat {
            assert!(failed(r), "{} should fail: {:?}", r.name, r.outcome);
        } else {
            assert!(
                matches!(r.outcome, Outcome::Pass { .. }),
                "{} should pass: {:?}",
                r.name,
                r.outcome
            );
        }
    }
}
