//! The core conformance suite on the CPU and on a simulated device.

use std::sync::Arc;

use ggraph_conformance as conformance;
use ggraph_core::backend::Device;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

#[test]
fn cpu_passes_the_conformance_suite() {
    let dev: Arc<dyn Device> = CpuDevice::new();
    let report = conformance::run(&dev);
    println!("{}", report.summary());
    assert_eq!(report.unsupported(), 0, "the CPU must support every case");
    report.check().unwrap();
}

#[test]
fn simulated_device_passes_the_conformance_suite() {
    let dev: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(1 << 30));
    let report = conformance::run(&dev);
    println!("{}", report.summary());
    assert_eq!(report.unsupported(), 0);
    report.check().unwrap();
}

/// Three threads: tasks split unevenly over the team, so every kernel's
/// partitioning is exercised with remainders (CI has two cores; the team
/// still runs three workers).
#[test]
fn cpu_with_three_threads_passes_the_conformance_suite() {
    let dev: Arc<dyn Device> = CpuDevice::with_threads(3).unwrap();
    let report = conformance::run(&dev);
    assert_eq!(report.unsupported(), 0);
    report.check().unwrap();
}

/// Every case with a Q4_0, Q4_K, IQ4_NL or MXFP4 matrix of whole groups of
/// rows, with those matrices interleaved in `CPU_REPACK`: products of 1 to
/// 33 columns, batches, stacks of matrices and experts, row lookups, and a
/// view and a conversion (which read ggml's bytes back). Three threads, so
/// tasks split with remainders.
#[test]
fn cpu_repacked_weights_pass_the_conformance_suite() {
    let dev: Arc<dyn Device> = CpuDevice::with_repack(3, true).unwrap();
    let reports = conformance::run_layouts(&dev);
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    println!("{}", report.summary());
    assert_eq!(report.device, "CPU (CPU_REPACK)");
    assert!(report.passed() >= 40, "{}", report.summary());
    assert_eq!(report.unsupported(), 0);
    report.check().unwrap();
    let plain: Arc<dyn Device> = CpuDevice::with_repack(1, false).unwrap();
    assert!(conformance::run_layouts(&plain).is_empty());
}

/// An index outside the source's rows is an error when the graph runs,
/// naming the op, the index and the range; nothing is read out of bounds.
#[test]
fn out_of_range_indices_are_errors_at_compute_time() {
    use ggraph_core::{DType, GraphBuilder, exec};
    let dev = CpuDevice::new();
    for (bad, op) in [(99, "get_rows"), (-1, "get_rows"), (7, "set_rows")] {
        let mut b = GraphBuilder::new();
        let a = b.input("a", DType::F32, &[4, 6]).unwrap();
        let idx = b.input("idx", DType::I32, &[2]).unwrap();
        let src = b.input("src", DType::F32, &[4, 2]).unwrap();
        let out = if op == "get_rows" {
            b.get_rows(a, idx).unwrap()
        } else {
            b.set_rows(a, src, idx).unwrap()
        };
        b.set_output(out).unwrap();
        let mut g = b.build();
        let _mem = exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
        g.write_f32(a, &[0.5; 24]).unwrap();
        g.write_bytes(idx, &[1i32, bad].map(i32::to_le_bytes).concat())
            .unwrap();
        if op == "set_rows" {
            g.write_f32(src, &[1.0; 8]).unwrap();
        }
        let e = exec::compute_on(dev.as_ref(), &g).unwrap_err().to_string();
        assert!(
            e.contains(&format!("index {bad}")) && e.contains("outside 0..6"),
            "{op} with {bad}: {e}"
        );
    }
}

/// An expert id outside add_id's bias rows is an error when the graph
/// runs, naming the op, the id and the range.
#[test]
fn an_add_id_expert_out_of_range_is_an_error() {
    use ggraph_core::{DType, GraphBuilder, exec};
    let dev = CpuDevice::new();
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::F32, &[8, 2, 3]).unwrap();
    let bias = b.input("bias", DType::F32, &[8, 4]).unwrap();
    let ids = b.input("ids", DType::I32, &[2, 3]).unwrap();
    let out = b.add_id(a, bias, ids).unwrap();
    b.set_output(out).unwrap();
    let mut g = b.build();
    let _mem = exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
    g.write_f32(a, &[0.5; 48]).unwrap();
    g.write_f32(bias, &[1.0; 32]).unwrap();
    g.write_bytes(ids, &[0i32, 1, 2, 3, 4, 0].map(i32::to_le_bytes).concat())
        .unwrap();
    let e = exec::compute_on(dev.as_ref(), &g).unwrap_err().to_string();
    assert!(
        e.contains("add_id") && e.contains("index 4") && e.contains("outside 0..4"),
        "{e}"
    );
}

/// A sequence id outside ssm_scan's states is an error when the graph
/// runs, naming the op; nothing is read out of bounds.
#[test]
fn an_ssm_scan_state_id_out_of_range_is_an_error() {
    use ggraph_core::{DType, GraphBuilder, exec};
    let dev = CpuDevice::new();
    let mut b = GraphBuilder::new();
    let f = |b: &mut GraphBuilder, ne: &[usize]| b.input("t", DType::F32, ne).unwrap();
    let s = f(&mut b, &[8, 4, 2, 2]);
    let x = f(&mut b, &[4, 2, 1, 1]);
    let dt = f(&mut b, &[2, 1, 1]);
    let a = f(&mut b, &[1, 2]);
    let bc = f(&mut b, &[8, 1, 1, 1]);
    let ids = b.input("ids", DType::I32, &[1]).unwrap();
    let y = b.ssm_scan(s, x, dt, a, bc, bc, ids).unwrap();
    b.set_output(y).unwrap();
    let mut g = b.build();
    let _mem = exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
    for t in [s, x, dt, a, bc] {
        let n = g.tensor(t).nelements();
        g.write_f32(t, &vec![0.5; n]).unwrap();
    }
    g.write_bytes(ids, &2i32.to_le_bytes()).unwrap();
    let e = exec::compute_on(dev.as_ref(), &g).unwrap_err().to_string();
    assert!(e.contains("ssm_scan") && e.contains("index 2"), "{e}");
}

/// Casts into every quantised type (what a KV cache or a requantisation
/// writes) give the reference quantiser's bytes, and casts back its
/// values. The suite asks this of the types every backend writes; the CPU
/// writes them all.
#[test]
fn casts_into_every_quantised_type_give_the_reference_quantisers_bytes() {
    use ggraph_core::ir::GraphBuilder;
    use ggraph_core::{DType, exec, quant};

    let dev: Arc<dyn Device> = CpuDevice::new();
    for t in DType::QUANTIZED {
        let (k, rows) = (512, 3);
        let values: Vec<f32> = (0..k * rows)
            .map(|i| ((i * 37 % 101) as f32 / 50.0 - 1.0) * (1.0 + (i % 7) as f32))
            .collect();
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[k, rows]).unwrap();
        let q = b.cast(x, t).unwrap();
        let back = b.cast(q, DType::F32).unwrap();
        b.set_output(q).unwrap();
        b.set_output(back).unwrap();
        let mut g = b.build();
        exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
        g.write_f32(x, &values).unwrap();
        exec::compute_on(dev.as_ref(), &g).unwrap();
        let want = quant::quantize(t, &values).unwrap();
        assert_eq!(g.read_bytes(q).unwrap(), want, "{t}: bytes");
        let want_back = quant::dequantize(t, &want, values.len()).unwrap();
        assert_eq!(g.read_f32(back).unwrap(), want_back, "{t}: values");
    }
}
