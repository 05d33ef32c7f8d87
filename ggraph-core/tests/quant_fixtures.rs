//! ggraph's block layouts against fixtures written by the PyPI `gguf`
//! package (see fixtures/gen_quant_fixtures.py).

use ggraph_core::DType;
use ggraph_core::quant::{dequantize, quantize};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/quant/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn assert_bitwise_equal(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g == w),
            "{what}: value {i}: got {g}, gguf has {w}"
        );
    }
}

#[test]
fn quantisation_matches_gguf_byte_for_byte() {
    for t in [
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::MXFP4,
    ] {
        let input = f32s(&fixture(&format!("{t}.in.f32")));
        let want_bytes = fixture(&format!("{t}.bytes"));
        let got = quantize(t, &input).unwrap();
        assert_eq!(got.len(), want_bytes.len(), "{t}: quantised size");
        if let Some(i) = got.iter().zip(&want_bytes).position(|(a, b)| a != b) {
            let block = i / t.type_size();
            panic!(
                "{t}: byte {i} (block {block}) differs: ours {:02x?}, gguf {:02x?}",
                &got[block * t.type_size()..(block + 1) * t.type_size()],
                &want_bytes[block * t.type_size()..(block + 1) * t.type_size()]
            );
        }
    }
}

#[test]
fn dequantisation_matches_gguf_for_every_type() {
    for t in [DType::F16, DType::BF16]
        .into_iter()
        .chain(DType::QUANTIZED)
    {
        let bytes = fixture(&format!("{t}.bytes"));
        let want = f32s(&fixture(&format!("{t}.out.f32")));
        let got = dequantize(t, &bytes, want.len()).unwrap();
        assert_bitwise_equal(&got, &want, t.name());
    }
}

#[test]
fn k_quants_reproduce_their_input_closely() {
    // gguf cannot quantise the K-quants and IQ4s; check that our
    // quantiser's output, read back through the layout gguf agrees with,
    // stays close.
    let input = f32s(&fixture("Q8_0.in.f32"));
    for (t, bound) in [
        (DType::Q2_K, 0.1),
        (DType::Q3_K, 4e-2),
        (DType::Q4_K, 1e-2),
        (DType::Q5_K, 3e-3),
        (DType::Q6_K, 1e-3),
        (DType::IQ4_NL, 1e-2),
        (DType::IQ4_XS, 1e-2),
    ] {
        let q = quantize(t, &input).unwrap();
        let y = dequantize(t, &q, input.len()).unwrap();
        let err: f64 = input
            .iter()
            .zip(&y)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum();
        let norm: f64 = input.iter().map(|a| (*a as f64).powi(2)).sum();
        assert!(err / norm < bound, "{t}: nmse {}", err / norm);
    }
}
