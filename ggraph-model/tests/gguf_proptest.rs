//! The GGUF reader never panics, on random bytes or on mutated and
//! truncated real files; what it accepts is consistent (sizes, alignment,
//! no overlaps), writes back to the same header and survives JSON; and the
//! Ollama estimate of anything it accepts does not panic either.

use std::path::PathBuf;

use ggraph_model::estimate::{EstimateRequest, estimate};
use ggraph_model::gguf::{GgufHeader, GgufWriter, JsonOptions, header_from_json, parse_header};
use proptest::prelude::*;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(format!("{name}.gguf"));
    std::fs::read(p).unwrap()
}

/// Whatever the reader accepted must hold together.
fn check_accepted(h: &GgufHeader, len: usize) {
    let align = h.alignment();
    assert!(align.is_power_of_two());
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for t in h.tensors() {
        assert_eq!(
            t.ggml_type.tensor_bytes(&t.shape),
            Ok(t.size_bytes),
            "{}",
            t.name
        );
        assert_eq!(t.offset % align, 0, "{}", t.name);
        spans.push((t.offset, t.end()));
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[1].0 >= w[0].1, "overlap {w:?}");
    }
    let l = h.layout().unwrap();
    assert!(l.header_len as usize <= len);
    if h.data_present() {
        assert!(l.data_offset + h.data_len() <= len as u64);
    }
    // The writer encodes it to bytes that read back as the same header
    // (compared as bytes: a NaN is not equal to itself).
    let again = GgufWriter::from_header(h).header_bytes().unwrap();
    let reread = parse_header(&again, "again").unwrap();
    assert_eq!(
        GgufWriter::from_header(&reread).header_bytes().unwrap(),
        again
    );
    assert_eq!(reread.tensors(), h.tensors());
    // JSON holds it exactly (NaN aside, which is not equal to itself).
    let j = h.to_json(&JsonOptions {
        max_array_values: None,
    });
    if let Ok(back) = header_from_json(&j, "json") {
        let has_nan = j.to_string().contains("\"nan\"");
        assert!(has_nan || back == *h);
    }
    // Estimating never panics.
    let _ = estimate(
        h,
        &EstimateRequest {
            gpu_free: vec![1 << 30, 1 << 28],
            ..Default::default()
        },
    )
    .to_json();
}

fn parse_any(bytes: &[u8]) {
    if let Ok(h) = parse_header(bytes, "fuzz") {
        check_accepted(&h, bytes.len());
    }
}

/// Edits to apply to a file: set a byte, or write a little-endian u64
/// (large counts and lengths), at a position taken modulo the length.
#[derive(Clone, Debug)]
enum Edit {
    Byte(usize, u8),
    Word(usize, u64),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Byte(p, b)),
        (
            any::<usize>(),
            prop_oneof![any::<u64>(), 0u64..64, Just(u64::MAX), Just(1u64 << 32)]
        )
            .prop_map(|(p, w)| Edit::Word(p, w)),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit], cut: Option<usize>) -> Vec<u8> {
    // Most edits land in the header, where they matter.
    let span = bytes.len().clamp(1, 1500);
    for e in edits {
        match *e {
            Edit::Byte(p, b) => {
                let i = p % span;
                bytes[i] = b;
            }
            Edit::Word(p, w) => {
                let i = p % span.saturating_sub(8).max(1);
                if i + 8 <= bytes.len() {
                    bytes[i..i + 8].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
    }
    if let Some(c) = cut {
        bytes.truncate(c % (bytes.len() + 1));
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400), gguf in any::<bool>()) {
        let mut bytes = if gguf { b"GGUF\x03\0\0\0".to_vec() } else { Vec::new() };
        bytes.extend(tail);
        parse_any(&bytes);
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec(edit(), 1..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let name = ["all_types", "align64_v2", "tiny_llama"][which];
        let bytes = apply(fixture(name), &edits, cut);
        parse_any(&bytes);
    }

    #[test]
    fn every_prefix_of_a_fixture_is_handled(which in 0usize..3, cut in any::<usize>()) {
        let name = ["all_types", "align64_v2", "tiny_llama"][which];
        let bytes = fixture(name);
        let n = cut % (bytes.len() + 1);
        let full = parse_header(&bytes, "full").unwrap();
        match parse_header(&bytes[..n], "prefix") {
            // A prefix either holds the whole header ...
            Ok(h) => {
                prop_assert_eq!(&h, &full);
                prop_assert!(n as u64 >= full.layout().unwrap().header_len);
                prop_assert_eq!(h.data_present(), n == bytes.len() || n as u64 >= full.layout().unwrap().data_offset + full.data_len());
            }
            // ... or is reported truncated.
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("truncated"), "{}", msg);
            }
        }
    }
}
