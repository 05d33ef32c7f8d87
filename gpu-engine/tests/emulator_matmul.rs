//! Matrix products past the conformance suite's sizes on the emulated
//! GPU: several 64x64 tiles with ragged edges, the mat-vec/tiled boundary
//! (n = 8 and 9) and generation (n = 1), broadcast batches, for every
//! weight type, with and
//! without the BLAS path. Checked against the f64 reference.

use std::sync::Arc;

use ggraph_conformance::reference;
use ggraph_core::backend::Device;
use ggraph_core::ir::GraphBuilder;
use ggraph_core::{DType, exec, quant};
use ggraph_gpu::emulator::EmuRuntime;
use {ggraph_conformance::nmse, ggraph_core::util::Rng};

fn check(dev: &Arc<dyn Device>, w: DType, k: usize, m: usize, n: usize, batch: [usize; 2]) {
    let mut b = GraphBuilder::new();
    let a = b.input("a", w, &[k, m, 1, batch[1]]).unwrap();
    let x = b
        .input("x", DType::F32, &[k, n, batch[0], batch[1]])
        .unwrap();
    let y = b.mul_mat(a, x).unwrap();
    b.set_output(y).unwrap();
    let mut g = b.build();
    let mut rng = Rng::new((k * 31 + m * 7 + n) as u64);
    let av = quant::quantize(w, &rng.vec(k * m * batch[1], -1.0, 1.0)).unwrap();
    let xv = quant::quantize(DType::F32, &rng.vec(k * n * batch[0] * batch[1], -1.0, 1.0)).unwrap();
    let _buf = exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
    g.write_bytes(a, &av).unwrap();
    g.write_bytes(x, &xv).unwrap();
    exec::compute_on(dev.as_ref(), &g).unwrap();
    let got = g.read_f32(y).unwrap();
    let ev =
        reference::evaluate(&g, |id| Ok(if id == a { av.clone() } else { xv.clone() })).unwrap();
    let e = nmse(&got, &ev.values(y));
    let bound = if w == DType::F32 { 1e-6 } else { 5e-4 };
    assert!(
        e < bound,
        "{} {w} k={k} m={m} n={n} batch={batch:?}: nmse {e}",
        dev.name()
    );
}

#[test]
fn matrix_products_across_tiles_and_paths() {
    for blas in [true, false] {
        let dev: Arc<dyn Device> = EmuRuntime::device(0, 1 << 30, blas);
        for w in DType::FLOATS.into_iter().chain(DType::QUANTIZED) {
            let k = if w.block_size() == 256 { 512 } else { 96 };
            for (m, n) in [(130, 1), (67, 2), (130, 8), (130, 9), (67, 70)] {
                check(&dev, w, k, m, n, [1, 1]);
            }
            check(&dev, w, k, 33, 17, [3, 2]);
        }
    }
}

#[test]
fn quantised_products_on_the_blas_library_convert_the_weights_in_slices_of_rows() {
    let gpu = EmuRuntime::device(0, 1 << 30, true);
    // 2 KiB of F16 weights: 8 rows of 128 values a slice, the last short
    gpu.set_dequant_slice_bytes(2048);
    assert_eq!(gpu.dequant_slice_bytes(), 2048);
    let dev: Arc<dyn Device> = gpu;
    for w in [DType::Q4_0, DType::Q8_0, DType::IQ4_NL] {
        check(&dev, w, 128, 61, 12, [1, 1]);
    }
    check(&dev, DType::Q4_K, 256, 37, 20, [1, 1]);
}
