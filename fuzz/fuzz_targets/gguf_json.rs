//! Header JSON on arbitrary text: errors, never panics.
//!
//!     scripts/fuzz 600 gguf_json
#![no_main]

use ggraph_model::estimate::{EstimateRequest, estimate};
use ggraph_model::gguf::header_from_json_str;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(h) = header_from_json_str(text, "fuzz") {
        let _ = estimate(&h, &EstimateRequest::default()).to_json();
    }
});
