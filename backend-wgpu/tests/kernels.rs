//! The mul_mat kernels one by one against the f64 reference evaluator
//! (edges of tiles, odd column counts, every weight type, broadcasting),
//! weights read window by window when they exceed one binding, and honest
//! refusals. (Not against the CPU backend: it quantises the activations
//! of a quantised mul_mat to 8 bits, these kernels do not.)

mod common;

use std::sync::Arc;

use ggraph_conformance::reference;
use ggraph_core::backend::Device;
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{DType, GraphBuilder, exec, quant};
use ggraph_wgpu::{MatmulKernel, WgpuDevice, WgpuOptions};
use {ggraph_conformance::nmse, ggraph_core::util::Rng};

struct Product {
    w: DType,
    /// weights [k, m, a2, a3]
    a: [usize; 4],
    /// activations [k, n, b2, b3]
    b: [usize; 4],
}

/// Builds `mul_mat(w, x)`, runs it on `dev`; returns the result and the
/// f64 reference's.
fn run(dev: &dyn Device, p: &Product, seed: u64) -> (Vec<f32>, Vec<f64>) {
    let mut gb = GraphBuilder::new();
    let a = gb.input("a", p.w, &p.a).unwrap();
    let b = gb.input("b", DType::F32, &p.b).unwrap();
    let y = gb.mul_mat(a, b).unwrap();
    gb.set_output(y).unwrap();
    let mut g = gb.build();
    let _buf = exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
    fill(&g, a, seed);
    fill(&g, b, seed + 1);
    exec::compute_on(dev, &g).unwrap();
    let want = reference::evaluate(&g, |id| g.read_bytes(id))
        .unwrap()
        .values(y);
    (g.read_f32(y).unwrap(), want)
}

fn fill(g: &Graph, id: TensorId, seed: u64) {
    let t = g.tensor(id);
    let v = Rng::new(seed).vec(t.nelements(), -1.0, 1.0);
    g.write_bytes(id, &quant::quantize(t.dtype, &v).unwrap())
        .unwrap();
}

fn with_kernel(kernel: MatmulKernel) -> Arc<WgpuDevice> {
    WgpuDevice::open_with(
        0,
        WgpuOptions {
            matmul_kernel: Some(kernel),
            ..WgpuOptions::default()
        },
    )
    .unwrap()
}

fn check(dev: &dyn Device, p: &Product, what: &str) {
    let (got, want) = run(dev, p, 5);
    let e = nmse(&got, &want);
    assert!(
        e < 1e-10,
        "{what} {} a {:?} b {:?}: nmse {e}",
        p.w,
        p.a,
        p.b
    );
}

/// Every type a weight may have.
fn weights() -> impl Iterator<Item = DType> {
    DType::FLOATS.into_iter().chain(DType::QUANTIZED)
}

#[test]
fn the_subgroup_kernel_matches_the_cpu_for_every_weight_type() {
    if common::device_or_skip("subgroup mul_mat").is_none() {
        return;
    }
    let dev = with_kernel(MatmulKernel::Subgroup);
    for w in weights() {
        // 131 rows: a partial row tile; 40 columns: full and partial column
        // tiles; k = 768: three super-blocks a row
        for (k, n) in [(256, 1), (256, 40), (768, 3)] {
            let p = Product {
                w,
                a: [k, 131, 1, 1],
                b: [k, n, 1, 1],
            };
            check(dev.as_ref(), &p, "subgroup");
        }
        let built = dev.kernels_built();
        assert!(
            built
                .iter()
                .any(|k| k.starts_with(&format!("mul_mat_subgroup|{w}|"))),
            "{w} ran on the subgroup kernel: {built:?}"
        );
    }
    // weights broadcast over two batch dimensions, five columns
    for w in [DType::F32, DType::Q4_0] {
        let p = Product {
            w,
            a: [64, 9, 2, 1],
            b: [64, 5, 4, 3],
        };
        check(dev.as_ref(), &p, "subgroup batched");
    }
}

#[test]
fn the_tiled_kernel_matches_the_cpu_for_every_weight_type() {
    if common::device_or_skip("tiled mul_mat").is_none() {
        return;
    }
    let dev = with_kernel(MatmulKernel::Tiled);
    for w in weights() {
        // plain types: k = 275 leaves a partial 16-deep slice
        let k = match w.block_size() {
            1 => 275,
            32 => 288,
            _ => 256,
        };
        let p = Product {
            w,
            a: [k, 70, 1, 1],
            b: [k, 67, 1, 1],
        };
        check(dev.as_ref(), &p, "tiled");
        let built = dev.kernels_built();
        assert!(
            built
                .iter()
                .any(|k| k.starts_with(&format!("mul_mat_tiled|{w}x"))),
            "{w} ran on the tiled kernel: {built:?}"
        );
    }
    let p = Product {
        w: DType::F16,
        a: [40, 9, 2, 1],
        b: [40, 5, 4, 3],
    };
    check(dev.as_ref(), &p, "tiled batched");
}

/// A device whose storage bindings hold at most 64 KiB.
fn small_bindings() -> Arc<WgpuDevice> {
    WgpuDevice::open_with(
        0,
        WgpuOptions {
            max_binding_bytes: Some(64 << 10),
            ..WgpuOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn weights_larger_than_one_binding_are_read_window_by_window() {
    if common::device_or_skip("windowed weights").is_none() {
        return;
    }
    let dev = small_bindings();
    assert_eq!(dev.max_binding_bytes(), 64 << 10);
    // 100 KiB of f32 and 80 KiB of Q8_0 weights: two windows each
    for (w, m) in [(DType::F32, 100), (DType::Q8_0, 300)] {
        for n in [1, 33] {
            let p = Product {
                w,
                a: [256, m, 1, 1],
                b: [256, n, 1, 1],
            };
            check(dev.as_ref(), &p, "windowed");
        }
    }
    // get_rows from a 128 KiB embedding table
    let cpu = ggraph_cpu::CpuDevice::new();
    for t in [DType::F32, DType::Q4_0] {
        let rows_of = |d: &dyn Device| {
            let mut gb = GraphBuilder::new();
            let table = gb.input("table", t, &[256, 128]).unwrap();
            let idx = gb.input("idx", DType::I32, &[6]).unwrap();
            let y = gb.get_rows(table, idx).unwrap();
            gb.set_output(y).unwrap();
            let mut g = gb.build();
            let _buf = exec::alloc_one_buffer(&mut g, &d.buffer_type()).unwrap();
            fill(&g, table, 3);
            g.write_i32(idx, &[0, 127, 64, 5, 127, 63]).unwrap();
            exec::compute_on(d, &g).unwrap();
            g.read_f32(y).unwrap()
        };
        assert_eq!(rows_of(dev.as_ref()), rows_of(cpu.as_ref()), "get_rows {t}");
    }
}

#[test]
fn ops_on_tensors_larger_than_a_binding_are_refused_not_run() {
    if common::device_or_skip("refusals").is_none() {
        return;
    }
    let dev = small_bindings();
    let mut gb = GraphBuilder::new();
    let big = gb.input("big", DType::F32, &[256, 100]).unwrap();
    let x = gb.input("x", DType::F32, &[256, 2]).unwrap();
    let norm = gb.rms_norm(big, 1e-6).unwrap();
    let mm = gb.mul_mat(big, x).unwrap();
    let batched = gb.input("batched", DType::F32, &[256, 50, 2]).unwrap();
    let x3 = gb.input("x3", DType::F32, &[256, 2, 2]).unwrap();
    let mm3 = gb.mul_mat(batched, x3).unwrap();
    let g = gb.build();
    assert!(
        !dev.supports_op(&g, norm),
        "rms_norm of 100 KiB > 64 KiB binding"
    );
    assert!(dev.supports_op(&g, mm), "a 2-d weight is read in windows");
    assert!(!dev.supports_op(&g, mm3), "3-d weights are not windowed");
    let sorted = {
        let mut gb = GraphBuilder::new();
        let long = gb.input("long", DType::F32, &[20000, 1]).unwrap();
        let s = gb
            .argsort(long, ggraph_core::ir::SortOrder::Ascending)
            .unwrap();
        (gb.build(), s)
    };
    assert!(
        !dev.supports_op(&sorted.0, sorted.1),
        "argsort of rows longer than the kernel takes"
    );
}

#[test]
fn writes_into_a_type_the_device_cannot_quantise_are_refused() {
    let Some(dev) = common::device_or_skip("quantised writes") else {
        return;
    };
    for to in [DType::Q4_1, DType::Q5_K, DType::IQ4_NL] {
        let mut gb = GraphBuilder::new();
        let x = gb.input("x", DType::F32, &[256, 3]).unwrap();
        let same = gb.input("same", to, &[256, 3]).unwrap();
        let dst = gb.input("dst", to, &[256, 4]).unwrap();
        let idx = gb.input("idx", DType::I32, &[3]).unwrap();
        let cast = gb.cast(x, to).unwrap();
        let raw = gb.cont(same).unwrap();
        let set = gb.set_rows(dst, x, idx).unwrap();
        let g = gb.build();
        assert!(!dev.supports_op(&g, cast), "cast F32 -> {to}");
        assert!(!dev.supports_op(&g, set), "set_rows into {to}");
        assert!(dev.supports_op(&g, raw), "cont of {to} copies bytes");
    }
}

#[test]
fn an_index_outside_its_tensor_is_an_error_at_synchronize() {
    let Some(dev) = common::device_or_skip("bad indices") else {
        return;
    };
    let dev: Arc<dyn Device> = dev;
    let build = |kind: &str| {
        let mut gb = GraphBuilder::new();
        let (out, idx) = match kind {
            "get_rows" => {
                let table = gb.input("table", DType::F32, &[8, 10]).unwrap();
                let idx = gb.input("idx", DType::I32, &[3]).unwrap();
                (gb.get_rows(table, idx).unwrap(), idx)
            }
            "set_rows" => {
                let dst = gb.input("dst", DType::Q8_0, &[32, 4]).unwrap();
                let src = gb.input("src", DType::F32, &[32, 3]).unwrap();
                let idx = gb.input("idx", DType::I32, &[3]).unwrap();
                (gb.set_rows(dst, src, idx).unwrap(), idx)
            }
            _ => {
                // k = 32 runs on the subgroup kernel where there is one, k = 16 on the generic one
                let k = if kind == "mul_mat_id" { 32 } else { 16 };
                let experts = gb.input("experts", DType::F32, &[k, 5, 4]).unwrap();
                let b = gb.input("b", DType::F32, &[k, 1, 3]).unwrap();
                let idx = gb.input("ids", DType::I32, &[1, 3]).unwrap();
                (gb.mul_mat_id(experts, b, idx).unwrap(), idx)
            }
        };
        gb.set_output(out).unwrap();
        let mut g = gb.build();
        let buf = exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
        (g, idx, buf)
    };
    for (kind, bad) in [
        ("get_rows", 10),
        ("set_rows", -1),
        ("mul_mat_id", 4),
        ("mul_mat_id (generic)", 7),
    ] {
        let (g, idx, _buf) = build(kind);
        let kind = kind.split(' ').next().unwrap();
        g.write_i32(idx, &[0, bad, 1]).unwrap();
        let mut s = dev.new_stream().unwrap();
        s.compute(&g, g.nodes()).unwrap();
        match s.synchronize() {
            Err(ggraph_core::Error::InvalidArgument(msg)) => {
                assert!(
                    msg.contains(kind) && msg.contains(&bad.to_string()),
                    "{msg}"
                )
            }
            other => panic!("{kind}: expected an error, got {other:?}"),
        }
        // the error is reported once; good indices then work again
        g.write_i32(idx, &[0, 2, 1]).unwrap();
        s.compute(&g, g.nodes()).unwrap();
        s.synchronize().unwrap();
    }
}
