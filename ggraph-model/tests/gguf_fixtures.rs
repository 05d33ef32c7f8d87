//! GGUF files written by the PyPI `gguf` package (fixtures/gguf/generate.py)
//! read as their manifests say, write back byte for byte, open header-only
//! from a prefix and survive a trip through header JSON.

use std::path::PathBuf;

use ggraph_model::arch::read_config;
use ggraph_model::estimate::EstimateRequest;
use ggraph_model::gguf::{
    ArrayValues, GgufHeader, GgufWriter, JsonOptions, ModelFile, Value, header_from_json,
    parse_header,
};
use ggraph_model::ollama;
use serde_json::Value as Json;

const FIXTURES: [&str; 3] = ["all_types", "align64_v2", "tiny_llama"];

fn fixture_path(name: &str, ext: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(format!("{name}.{ext}"))
}

fn manifest(name: &str) -> Json {
    let text = std::fs::read_to_string(fixture_path(name, "json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ggraph-fixture-{}-{name}", std::process::id()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares one value with the manifest's {type, value}.
fn check_value(key: &str, v: &Value, want_type: &str, want: &Json) {
    assert_eq!(v.type_name(), want_type, "{key}: type");
    let ok = match v {
        Value::F32(x) => *x == want.as_f64().unwrap() as f32,
        Value::F64(x) => *x == want.as_f64().unwrap(),
        Value::Bool(b) => Some(*b) == want.as_bool(),
        Value::String(s) => Some(s.as_str()) == want.as_str(),
        Value::Array(a) => {
            let items = want.as_array().unwrap();
            assert_eq!(a.len(), items.len() as u64, "{key}: length");
            let values = a.values().unwrap();
            (0..items.len()).all(|i| {
                let e = values.get(i).unwrap();
                check_value(key, &e, &want_type[6..want_type.len() - 1], &items[i]);
                true
            })
        }
        v => {
            let i = v.as_integer().unwrap();
            want.as_i64().map(i128::from) == Some(i) || want.as_u64().map(i128::from) == Some(i)
        }
    };
    assert!(ok, "{key}: got {v:?}, manifest says {want}");
}

#[test]
fn files_from_the_gguf_package_read_as_their_manifests_say() {
    for name in FIXTURES {
        let m = manifest(name);
        let file = ModelFile::open(fixture_path(name, "gguf")).unwrap();
        let h = file.header();
        assert_eq!(
            u64::from(h.version()),
            m["version"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(h.alignment(), m["alignment"].as_u64().unwrap(), "{name}");
        let kv = m["kv"].as_array().unwrap();
        assert_eq!(h.kv().len(), kv.len(), "{name}: key count");
        for (got, want) in h.kv().iter().zip(kv) {
            assert_eq!(got.0, want["key"].as_str().unwrap(), "{name}: key order");
            check_value(
                &got.0,
                &got.1,
                want["type"].as_str().unwrap(),
                &want["value"],
            );
        }
        let tensors = m["tensors"].as_array().unwrap();
        assert_eq!(h.tensors().len(), tensors.len(), "{name}: tensor count");
        for (t, want) in h.tensors().iter().zip(tensors) {
            assert_eq!(t.name, want["name"].as_str().unwrap());
            assert_eq!(
                t.ggml_type.name(),
                want["type"].as_str().unwrap(),
                "{}",
                t.name
            );
            let shape: Vec<u64> = want["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.shape, shape, "{}", t.name);
            assert_eq!(t.offset, want["offset"].as_u64().unwrap(), "{}", t.name);
            assert_eq!(
                hex(file.tensor_data(&t.name).unwrap()),
                want["bytes"].as_str().unwrap(),
                "{}",
                t.name
            );
        }
    }
}

#[test]
fn types_ggraph_cannot_compute_are_read_and_sized() {
    let file = ModelFile::open(fixture_path("all_types", "gguf")).unwrap();
    let i8 = file.tensor("t.i8").unwrap();
    assert_eq!((i8.ggml_type.name(), i8.size_bytes), ("I8", 5));
    assert_eq!(i8.ggml_type.dtype(), None);
    for (name, ty, bytes) in [
        ("t.q5_k", ggraph_core::DType::Q5_K, 176),
        ("t.iq4_xs", ggraph_core::DType::IQ4_XS, 136),
        ("t.q4_1", ggraph_core::DType::Q4_1, 20),
        ("t.q6_k", ggraph_core::DType::Q6_K, 210),
    ] {
        let t = file.tensor(name).unwrap();
        assert_eq!((t.ggml_type.name(), t.size_bytes), (ty.name(), bytes));
        assert_eq!(t.ggml_type.dtype(), Some(ty));
    }
    assert_eq!(file.tensor("t.iq4_xs").unwrap().shape, vec![256, 1, 1, 1]);
}

#[test]
fn reading_and_writing_again_gives_the_same_bytes() {
    for name in FIXTURES {
        let bytes = std::fs::read(fixture_path(name, "gguf")).unwrap();
        let file = ModelFile::open(fixture_path(name, "gguf")).unwrap();
        let mut w = GgufWriter::from_header(file.header());
        for t in file.header().tensors() {
            w.set_data(&t.name, file.tensor_data(&t.name).unwrap().to_vec())
                .unwrap();
        }
        let again = w.to_bytes().unwrap();
        assert_eq!(again.len(), bytes.len(), "{name}: length");
        assert!(again == bytes, "{name}: bytes differ");
        // The header prefix is the file's first bytes.
        let prefix = w.header_bytes().unwrap();
        assert_eq!(
            prefix.len() as u64,
            file.header().layout().unwrap().header_len
        );
        assert_eq!(&bytes[..prefix.len()], &prefix[..], "{name}: header");
    }
}

#[test]
fn a_header_prefix_opens_header_only_and_says_its_data_is_absent() {
    for name in FIXTURES {
        let bytes = std::fs::read(fixture_path(name, "gguf")).unwrap();
        let full = ModelFile::open(fixture_path(name, "gguf")).unwrap();
        let layout = full.header().layout().unwrap();
        // Header-only on the full file reads the same header, maps nothing.
        let h = ModelFile::open_header(fixture_path(name, "gguf"), None).unwrap();
        assert_eq!(h.header(), full.header());
        assert!(h.header().data_present() && !h.has_data());
        // Any prefix from the end of the tensor infos on is a header.
        for cut in [
            layout.header_len,
            layout.data_offset,
            layout.data_offset + 7,
        ] {
            let prefix = &bytes[..cut as usize];
            let p = parse_header(prefix, "prefix").unwrap();
            assert_eq!(&p, full.header());
            assert!(!p.data_present(), "{name}: cut at {cut}");
        }
        let path = temp_path(&format!("{name}.prefix.gguf"));
        std::fs::write(&path, &bytes[..layout.header_len as usize]).unwrap();
        let m = ModelFile::open_header(&path, None).unwrap();
        assert_eq!(m.header(), full.header());
        assert!(ModelFile::open(&path).is_err());
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn headers_survive_a_trip_through_json() {
    for name in FIXTURES {
        let h = ModelFile::open(fixture_path(name, "gguf"))
            .unwrap()
            .header()
            .clone();
        let j = h.to_json(&JsonOptions {
            max_array_values: None,
        });
        let back = header_from_json(&j, name).unwrap();
        assert_eq!(back, h, "{name}");
        // And back to the same GGUF header bytes.
        assert_eq!(
            GgufWriter::from_header(&back).header_bytes().unwrap(),
            GgufWriter::from_header(&h).header_bytes().unwrap()
        );
        // Text too.
        let text = j.to_string();
        let again = ggraph_model::gguf::header_from_json_str(&text, name).unwrap();
        assert_eq!(again, h);
    }
}

#[test]
fn the_tiny_llama_reads_as_a_llama_config() {
    let file = ModelFile::open(fixture_path("tiny_llama", "gguf")).unwrap();
    let h: &GgufHeader = file.header();
    let c = read_config(h).unwrap();
    assert_eq!(
        (
            c.n_vocab,
            c.n_embd,
            c.n_layer,
            c.n_head,
            c.n_head_kv,
            c.n_ff,
            c.head_dim
        ),
        (16, 32, 2, 2, 1, 32, 16)
    );
    assert_eq!((c.rope_freq_base, c.rms_eps), (500000.0, 1e-5));
    assert_eq!(h.tokens().unwrap()[1], "<s>");
    assert!(matches!(
        h.get("tokenizer.ggml.token_type")
            .and_then(Value::as_array)
            .and_then(|a| a.values()),
        Some(ArrayValues::I32(_))
    ));
    // Every weight the llama builder expects is in the file with its shape.
    for (name, shape) in c.weight_shapes() {
        let t = file
            .tensor(&name)
            .unwrap_or_else(|| panic!("{name} missing"));
        let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        assert_eq!(t.shape, shape, "{name}");
    }
}

#[test]
fn the_tiny_llama_estimates_from_its_file() {
    let file = ModelFile::open_header(fixture_path("tiny_llama", "gguf"), None).unwrap();
    let req = EstimateRequest {
        ctx: 1000,
        gpu_free: vec![1 << 30],
        ..EstimateRequest::default()
    };
    let e = ollama::estimate(file.header(), &req).unwrap();
    // ctx is cut to context_length 256, batch to 256; KV per layer:
    // 256 * (16 + 16) * 1 * 2 bytes.
    assert_eq!((e.ctx, e.batch), (256, 256));
    assert_eq!(e.kv, vec![16384, 16384]);
    // Layer sizes are the tensors' bytes: blk.i is 2 F32 norms (128 B each)
    // and 7 Q4_0 matrices (576 or 288 B), plus the KV cache.
    let blk: u64 = file
        .header()
        .tensors()
        .iter()
        .filter(|t| t.name.starts_with("blk.0."))
        .map(|t| t.size_bytes)
        .sum();
    assert_eq!(e.layer_weights[0], blk);
    assert_eq!(e.layer_weights[2], 128 + 288);
    assert_eq!(e.gpus[0].layers, vec![0, 1, 2]);
}
