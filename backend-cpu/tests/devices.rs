//! Device behaviour: the CPU's memory, and simulated devices that act like
//! discrete GPUs for placement.

use std::sync::Arc;

use ggraph_core::backend::{
    BackendRegistration, BufferUsage, Device, DeviceKind, MemorySource, copy_between,
};
use ggraph_core::ir::{GraphBuilder, TensorData};
use ggraph_core::{DType, Error, exec};
use ggraph_cpu::{CpuDevice, CpuRegistration, SimConfig, SimDevice};

#[test]
fn a_simulated_device_runs_out_of_memory_at_its_declared_size() {
    let sim = SimDevice::new(0, SimConfig::gpu(1 << 20));
    let bt = sim.buffer_type();
    let a = bt.alloc(768 << 10, BufferUsage::Weights).unwrap();
    assert_eq!(sim.memory().free_bytes, 256 << 10);
    assert_eq!(sim.memory().source, MemorySource::DeclaredBudget);
    match bt.alloc(512 << 10, BufferUsage::Compute) {
        Err(Error::OutOfMemory {
            buffer_type,
            requested_bytes,
            available_bytes,
        }) => {
            assert_eq!(buffer_type, "sim:0");
            assert_eq!(requested_bytes, 512 << 10);
            assert_eq!(available_bytes, 256 << 10);
        }
        other => panic!("expected out of memory, got {other:?}"),
    }
    drop(a);
    assert_eq!(
        sim.memory().free_bytes,
        1 << 20,
        "freed memory is available again"
    );
    assert!(bt.alloc(1 << 20, BufferUsage::Compute).is_ok());
}

#[test]
fn a_simulated_device_is_not_host_memory() {
    let sim = SimDevice::new(3, SimConfig::gpu(1 << 20));
    let cpu = CpuDevice::new();
    assert_eq!(sim.name(), "sim:3");
    assert_eq!(sim.kind(), DeviceKind::Gpu);
    assert!(sim.description().contains("simulated"));
    assert!(!sim.buffer_type().is_host());
    assert!(!sim.supports_buffer_type(cpu.buffer_type().as_ref()));
    assert!(!cpu.supports_buffer_type(sim.buffer_type().as_ref()));
    let buf = sim.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    assert!(buf.host_ptr().is_none());

    // the sim's kernels refuse an input that lives in CPU memory
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[16]).unwrap();
    let y = b.silu(x).unwrap();
    b.set_output(y).unwrap();
    let mut g = b.build();
    let host = cpu.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    g.set_data(
        x,
        TensorData {
            buffer: host.clone(),
            offset: 0,
        },
    )
    .unwrap();
    g.set_data(
        y,
        TensorData {
            buffer: buf.clone(),
            offset: 0,
        },
    )
    .unwrap();
    let err = exec::compute_on(sim.as_ref(), &g).unwrap_err();
    assert!(err.to_string().contains("cannot address"), "{err}");

    // through the copy path it works
    host.write(0, &[0u8; 64]).unwrap();
    let dev_in = sim.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    copy_between(host.as_ref(), 0, dev_in.as_ref(), 0, 64).unwrap();
    g.set_data(
        x,
        TensorData {
            buffer: dev_in,
            offset: 0,
        },
    )
    .unwrap();
    exec::compute_on(sim.as_ref(), &g).unwrap();
    assert_eq!(g.read_f32(y).unwrap(), vec![0.0; 16]);
}

#[test]
fn buffers_check_their_bounds() {
    let cpu = CpuDevice::new();
    let buf = cpu.buffer_type().alloc(16, BufferUsage::Compute).unwrap();
    assert!(matches!(
        buf.write(10, &[0; 8]),
        Err(Error::OutOfBounds { .. })
    ));
    let mut out = [0u8; 4];
    assert!(buf.read(u64::MAX - 1, &mut out).is_err());
    assert!(buf.fill(0, 17, 1).is_err());
}

/// A write larger than a task of the team (a weight at load) lands whole
/// at its offset, on teams of one and of three, and a write past the end
/// is refused before any byte is written.
#[test]
fn a_large_write_lands_whole_on_any_team() {
    let data: Vec<u8> = (0..9 * (1 << 20) + 5)
        .map(|i: u32| (i % 251) as u8)
        .collect();
    for threads in [1, 3] {
        let cpu = CpuDevice::with_threads(threads).unwrap();
        let buf = cpu
            .buffer_type()
            .alloc(data.len() as u64 + 64, BufferUsage::Weights)
            .unwrap();
        buf.write(64, &data).unwrap();
        let mut back = vec![0u8; data.len() + 64];
        buf.read(0, &mut back).unwrap();
        assert!(back[..64].iter().all(|&b| b == 0), "{threads} threads");
        assert!(back[64..] == data[..], "{threads} threads");
        assert!(buf.write(65, &data).is_err());
        buf.read(0, &mut back).unwrap();
        assert!(
            back[64..] == data[..],
            "{threads} threads: a refused write changed bytes"
        );
    }
}

#[test]
fn the_registration_lists_the_cpu_and_the_simulated_devices() {
    let reg = CpuRegistration::with_sims(vec![SimConfig::gpu(1 << 30), SimConfig::gpu(2 << 30)]);
    let names: Vec<String> = reg.devices().iter().map(|d| d.name().to_string()).collect();
    assert_eq!(names, ["CPU", "sim:0", "sim:1"]);
    let cpu: Arc<dyn Device> = reg.devices()[0].clone();
    assert!(cpu.memory().total_bytes > 0);
}

#[test]
fn dot_export_names_every_node_and_edge() {
    let mut b = GraphBuilder::new();
    let w = b.weight("w", DType::Q4_0, &[32, 4]).unwrap();
    let x = b.input("x", DType::F32, &[32, 2]).unwrap();
    let y = b.mul_mat(w, x).unwrap();
    let z = b.silu(y).unwrap();
    b.set_output(z).unwrap();
    let g = b.build();
    let dot = g.to_dot();
    assert!(dot.starts_with("digraph"));
    assert!(dot.contains("MUL_MAT") && dot.contains("UNARY(Silu)"));
    assert!(dot.contains(&format!("t{} -> t{}", w.0, y.0)));
    assert!(dot.contains(&format!("t{} -> t{}", y.0, z.0)));
    assert_eq!(g.nodes(), &[y, z]);
    assert_eq!(g.leafs(), &[w, x]);
}
