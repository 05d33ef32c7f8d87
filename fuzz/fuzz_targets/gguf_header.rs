//! The GGUF reader on arbitrary bytes: it must never panic, and whatever
//! it accepts must re-encode, survive JSON, be estimated and give a
//! tokenizer (or an error) without a panic.
//!
//!     scripts/fuzz 600 gguf_header
//!
//! Seeds: fuzz/corpus/gguf_header/, the fixtures' headers.
#![no_main]

use ggraph_model::estimate::{EstimateRequest, estimate};
use ggraph_model::gguf::{GgufWriter, JsonOptions, header_from_json, parse_header};
use ggraph_model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = parse_header(data, "fuzz") else {
        return;
    };
    let bytes = GgufWriter::from_header(&h)
        .header_bytes()
        .expect("a parsed header encodes");
    let again = parse_header(&bytes, "again").expect("an encoded header parses");
    assert_eq!(again.tensors(), h.tensors());
    let j = h.to_json(&JsonOptions {
        max_array_values: None,
    });
    let _ = header_from_json(&j, "json");
    let req = EstimateRequest {
        gpu_free: vec![1 << 30, 1 << 32],
        ..EstimateRequest::default()
    };
    let _ = estimate(&h, &req).to_json();
    if let Ok(t) = Tokenizer::from_header(&h) {
        let ids = t
            .encode("Hello <s> world</s>\n", true, true)
            .unwrap_or_default();
        let _ = t.decode(&ids, true, true);
    }
});
