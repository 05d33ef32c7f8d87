//! A new backend in one file: a device with its own memory (a buffer
//! type and buffers) and a stream that computes a few elementwise ops,
//! registered beside the CPU. The scheduler sends everything it refuses
//! to the CPU, and the conformance suite checks what it claims.
//!
//! Run: cargo run -p ggraph-examples --example custom_backend

use std::any::Any;
use std::sync::{Arc, Mutex};

use ggraph::alloc::bind_graph_weights_by;
use ggraph::backend::{
    BackendRegistration, Buffer, BufferType, BufferUsage, Device, DeviceKind, MemoryInfo,
    MemorySource, Registry, Stream, check_range,
};
use ggraph::ir::{BinaryOp, Graph, GraphBuilder, Op, TensorId, UnaryOp};
use ggraph::sched::{SchedConfig, Scheduler};
use ggraph::{DType, Error, Result};
use ggraph_cpu::{CpuDevice, CpuRegistration};

/// The toy's memory: plain host bytes, but not addressable by the CPU's
/// kernels (`is_host` false), so the scheduler copies between the two.
struct ToyBufferType;

impl BufferType for ToyBufferType {
    fn name(&self) -> &str {
        "toy"
    }
    fn alignment(&self) -> u64 {
        32
    }
    fn is_host(&self) -> bool {
        false
    }
    fn alloc(&self, size: u64, usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        let bytes = vec![
            0u8;
            usize::try_from(size).map_err(|_| Error::OutOfMemory {
                buffer_type: "toy".into(),
                requested_bytes: size,
                available_bytes: 0,
            })?
        ];
        Ok(Arc::new(ToyBuffer {
            bytes: Mutex::new(bytes),
            usage,
        }))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct ToyBuffer {
    bytes: Mutex<Vec<u8>>,
    usage: BufferUsage,
}

impl ToyBuffer {
    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Buffer for ToyBuffer {
    fn buffer_type_name(&self) -> &str {
        "toy"
    }
    fn size(&self) -> u64 {
        self.bytes().len() as u64
    }
    fn usage(&self) -> BufferUsage {
        self.usage
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let mut b = self.bytes();
        check_range("toy write", offset, data.len() as u64, b.len() as u64)?;
        b[offset as usize..][..data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let b = self.bytes();
        check_range("toy read", offset, out.len() as u64, b.len() as u64)?;
        out.copy_from_slice(&b[offset as usize..][..out.len()]);
        Ok(())
    }
    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        let mut b = self.bytes();
        check_range("toy fill", offset, len, b.len() as u64)?;
        b[offset as usize..][..len as usize].fill(value);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The device: says what it computes, makes streams.
struct ToyDevice {
    buffer_type: Arc<ToyBufferType>,
}

impl Device for ToyDevice {
    fn name(&self) -> &str {
        "toy:0"
    }
    fn description(&self) -> String {
        "a toy backend in one file (F32 add, mul, scale and unary ops)".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo {
            free_bytes: 1 << 30,
            total_bytes: 1 << 30,
            source: MemorySource::DeclaredBudget,
        }
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buffer_type.clone()
    }
    /// Honest answers: F32 in and out, the ops `compute` implements.
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        let t = graph.tensor(node);
        let all_f32 =
            t.dtype == DType::F32 && t.src.iter().all(|&s| graph.tensor(s).dtype == DType::F32);
        match t.op {
            Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => {
                true
            }
            Op::Binary(BinaryOp::Add | BinaryOp::Mul) | Op::Scale { .. } | Op::Unary(_) => all_f32,
            _ => false,
        }
    }
    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        Ok(Box::new(ToyStream))
    }
}

/// Computes a split node by node, through the graph's typed reads and
/// writes (they follow each tensor's strides).
struct ToyStream;

impl Stream for ToyStream {
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        for &n in nodes {
            let t = graph.tensor(n);
            let a = |i: usize| graph.read_f32(t.src[i]);
            let out: Vec<f32> = match t.op {
                ref op if op.is_noop() => continue,
                Op::Binary(op) => {
                    let (x, y, ne1) = (a(0)?, a(1)?, graph.tensor(t.src[1]).ne);
                    // src1 repeats over src0: index each dim modulo its size
                    (0..x.len())
                        .map(|i| {
                            let idx = ggraph::ir::row_index(t.ne, i / t.ne[0]);
                            let j = (i % t.ne[0]) % ne1[0]
                                + ne1[0]
                                    * ((idx[1] % ne1[1])
                                        + ne1[1]
                                            * ((idx[2] % ne1[2]) + ne1[2] * (idx[3] % ne1[3])));
                            match op {
                                BinaryOp::Add => x[i] + y[j],
                                _ => x[i] * y[j],
                            }
                        })
                        .collect()
                }
                Op::Scale { scale, bias } => a(0)?.iter().map(|v| v * scale + bias).collect(),
                Op::Unary(u) => a(0)?.iter().map(|&v| u.eval(v as f64) as f32).collect(),
                _ => {
                    return Err(Error::Unsupported {
                        device: "toy:0".into(),
                        what: t.op.label(),
                    });
                }
            };
            graph.write_f32(n, &out)?;
        }
        Ok(())
    }
}

/// How a backend joins the registry: a name and the devices it finds.
struct ToyRegistration(Arc<ToyDevice>);

impl BackendRegistration for ToyRegistration {
    fn name(&self) -> &str {
        "toy"
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![self.0.clone()]
    }
}

fn main() -> Result<()> {
    let toy = Arc::new(ToyDevice {
        buffer_type: Arc::new(ToyBufferType),
    });
    let mut registry = Registry::new();
    registry.register(Box::new(CpuRegistration::new()));
    registry.register(Box::new(ToyRegistration(toy.clone())));
    for d in registry.devices() {
        println!("{:<6} {:?}: {}", d.name(), d.kind(), d.description());
    }

    // relu(w · x + bias) * 0.5: the bias lives in the toy's memory, so the
    // add (and what follows it) runs there; the mul_mat, which the toy
    // refuses, runs on the CPU
    let mut b = GraphBuilder::new();
    let w = b.weight("w", DType::F32, &[32, 16])?;
    let bias = b.weight("bias", DType::F32, &[16])?;
    let x = b.input("x", DType::F32, &[32, 4])?;
    let h = b.mul_mat(w, x)?;
    let h = b.add(h, bias)?;
    let h = b.unary(UnaryOp::Relu, h)?;
    let y = b.scale(h, 0.5)?;
    b.set_output(y)?;
    let mut graph = b.build();
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let toy_dyn: Arc<dyn Device> = toy.clone();
    let _weights = bind_graph_weights_by(&mut graph, |id, _| {
        if id == bias {
            toy_dyn.buffer_type()
        } else {
            cpu.buffer_type()
        }
    })?;
    let wv: Vec<f32> = (0..32 * 16)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let bv: Vec<f32> = (0..16).map(|i| i as f32 / 16.0 - 0.5).collect();
    let xv: Vec<f32> = (0..32 * 4)
        .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
        .collect();
    graph.write_f32(w, &wv)?;
    graph.write_f32(bias, &bv)?;

    let mut sched =
        Scheduler::with_devices(&[toy_dyn.clone(), cpu.clone()], SchedConfig::default())?;
    sched.alloc_graph(graph)?;
    let g = sched
        .graph()
        .ok_or(Error::Unallocated("the graph".into()))?;
    g.write_f32(x, &xv)?;
    sched.compute()?;
    let got = sched
        .graph()
        .ok_or(Error::Unallocated("the graph".into()))?
        .read_f32(y)?;
    println!("\n{}", sched.explain());

    // the same in plain Rust
    for c in 0..4 {
        for r in 0..16 {
            let dot: f32 = (0..32).map(|k| wv[r * 32 + k] * xv[c * 32 + k]).sum();
            let want = (dot + bv[r]).max(0.0) * 0.5;
            if (got[c * 16 + r] - want).abs() > 1e-5 {
                return Err(Error::InvalidArgument(format!(
                    "y[{r},{c}] = {}, want {want}",
                    got[c * 16 + r]
                )));
            }
        }
    }
    println!("y matches plain Rust\n");

    // the conformance suite on every op and type: the toy passes what it
    // claims, and the rest shows as unsupported
    let report = ggraph_conformance::run(&toy_dyn);
    println!("{}", report.summary());
    report.check().map_err(Error::InvalidArgument)
}
