//! Malformed GGUF files give errors that say what is wrong and where:
//! truncation, counts and lengths too large for the file, misaligned or
//! overlapping tensors, unknown types, sizes that do not fit the type.
//! Files are built byte by byte (or patched from a fixture) so that each
//! case breaks exactly one thing.

use std::path::PathBuf;

use ggraph_model::gguf::{ModelFile, parse_header};

fn fixture() -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf/all_types.gguf");
    std::fs::read(p).unwrap()
}

fn err(bytes: &[u8]) -> String {
    match parse_header(bytes, "case.gguf") {
        Ok(h) => panic!("parsed: {h:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_err(bytes: &[u8], wants: &[&str]) {
    let e = err(bytes);
    for w in wants {
        assert!(e.contains(w), "error {e:?} does not say {w:?}");
    }
    assert!(e.starts_with("case.gguf: "), "{e}");
}

/// A GGUF built field by field.
struct Raw(Vec<u8>);

impl Raw {
    fn new(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Raw {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Raw {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Raw {
        self.u64(s.len() as u64);
        self.0.extend(s.as_bytes());
        self
    }
    /// A key with a uint32 value.
    fn kv_u32(&mut self, k: &str, v: u32) -> &mut Raw {
        self.str(k).u32(4).u32(v)
    }
    /// A tensor info.
    fn tensor(&mut self, name: &str, shape: &[u64], ggml_type: u32, offset: u64) -> &mut Raw {
        self.str(name).u32(shape.len() as u32);
        for &d in shape {
            self.u64(d);
        }
        self.u32(ggml_type).u64(offset)
    }
    fn pad_data(&mut self, align: usize, data: usize) -> &mut Raw {
        while self.0.len() % align != 0 {
            self.0.push(0);
        }
        self.0.extend(vec![0u8; data]);
        self
    }
}

#[test]
fn a_valid_raw_file_parses() {
    // The builder itself makes valid files: the cases below break one
    // thing each.
    let mut r = Raw::new(3, 1, 1);
    r.kv_u32("a", 1).tensor("t", &[8], 0, 0).pad_data(32, 32);
    let h = parse_header(&r.0, "ok").unwrap();
    assert!(h.data_present());
}

#[test]
fn every_truncation_of_the_header_is_an_error() {
    let bytes = fixture();
    let header_len = parse_header(&bytes, "f")
        .unwrap()
        .layout()
        .unwrap()
        .header_len as usize;
    for n in 0..header_len {
        let e = err(&bytes[..n]);
        assert!(e.contains("truncated"), "cut at {n}: {e}");
    }
}

#[test]
fn data_cut_short_fails_a_full_open_but_not_a_header_read() {
    let bytes = fixture();
    let cut = &bytes[..bytes.len() - 100];
    let h = parse_header(cut, "cut").unwrap();
    assert!(!h.data_present());
    let p = std::env::temp_dir().join(format!("ggraph-errors-{}-cut.gguf", std::process::id()));
    std::fs::write(&p, cut).unwrap();
    let e = ModelFile::open(&p).unwrap_err().to_string();
    assert!(
        e.contains("truncated") && e.contains("tensor data needs bytes"),
        "{e}"
    );
    assert!(e.contains("t.iq4_xs"), "names the last tensor: {e}");
    std::fs::remove_file(&p).ok();
}

#[test]
fn counts_larger_than_the_file_are_refused_before_allocating() {
    let mut r = Raw::new(3, u64::MAX, 1);
    r.kv_u32("a", 1);
    assert_err(&r.0, &["cannot fit", "18446744073709551615 tensors"]);
    let r = Raw::new(3, 0, 1 << 40);
    assert_err(&r.0, &["cannot fit", "1099511627776 key-value pairs"]);

    // An array of 2^40 int32 in a file of a few dozen bytes.
    let mut r = Raw::new(3, 0, 1);
    r.str("big").u32(9).u32(5).u64(1 << 40);
    assert_err(&r.0, &["array 'big'", "cannot fit"]);
    // Strings: each one at least 8 bytes.
    let mut r = Raw::new(3, 0, 1);
    r.str("strs").u32(9).u32(8).u64(1 << 30);
    assert_err(&r.0, &["array 'strs'", "cannot fit"]);
}

#[test]
fn string_lengths_larger_than_the_file_are_refused() {
    let mut r = Raw::new(3, 0, 1);
    r.u64(1 << 50);
    r.0.extend([0u8; 16]);
    assert_err(&r.0, &["key of metadata pair 0", "truncated"]);
    let mut r = Raw::new(3, 0, 1);
    r.str("k").u32(8).u64(u64::MAX);
    assert_err(&r.0, &["value of 'k'"]);
}

#[test]
fn misaligned_tensor_offsets_are_refused() {
    let mut r = Raw::new(3, 2, 0);
    r.tensor("a", &[8], 0, 0)
        .tensor("b", &[8], 0, 33)
        .pad_data(32, 96);
    assert_err(&r.0, &["tensor 'b'", "offset 33", "alignment 32"]);
    // With general.alignment 64, an offset of 32 is misaligned too.
    let mut r = Raw::new(3, 1, 1);
    r.kv_u32("general.alignment", 64)
        .tensor("a", &[8], 0, 32)
        .pad_data(64, 128);
    assert_err(&r.0, &["tensor 'a'", "offset 32", "alignment 64"]);
}

#[test]
fn bad_alignments_are_refused() {
    let mut r = Raw::new(3, 0, 1);
    r.kv_u32("general.alignment", 48);
    assert_err(&r.0, &["general.alignment is 48", "power of two"]);
    let mut r = Raw::new(3, 0, 1);
    r.kv_u32("general.alignment", 0);
    assert_err(&r.0, &["power of two"]);
    let mut r = Raw::new(3, 0, 1);
    r.str("general.alignment").u32(10).u64(32);
    assert_err(&r.0, &["general.alignment has type uint64", "uint32"]);
}

#[test]
fn overlapping_tensors_are_refused() {
    let mut r = Raw::new(3, 2, 0);
    r.tensor("a", &[16], 0, 0)
        .tensor("b", &[8], 0, 32)
        .pad_data(32, 96);
    assert_err(&r.0, &["'a'", "'b'", "overlap"]);
}

#[test]
fn unknown_and_removed_types_are_named() {
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[32], 99, 0);
    assert_err(&r.0, &["tensor 'w'", "unknown ggml type id 99"]);
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[32], 4, 0);
    assert_err(&r.0, &["tensor 'w'", "Q4_2", "no longer supports"]);
    let mut r = Raw::new(3, 0, 1);
    r.str("k").u32(13).u32(0);
    assert_err(&r.0, &["key 'k'", "unknown value type 13"]);
}

#[test]
fn sizes_inconsistent_with_type_and_shape_are_refused() {
    // Q4_K rows are whole blocks of 256.
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[100, 2], 12, 0);
    assert_err(
        &r.0,
        &["tensor 'w'", "Q4_K", "not a multiple", "block size 256"],
    );
    // A shape whose byte size overflows 64 bits.
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[1 << 40, 1 << 40], 0, 0);
    assert_err(&r.0, &["tensor 'w'", "overflows"]);
    // Dimensions past int64 and more than four dimensions.
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[u64::MAX], 0, 0);
    assert_err(&r.0, &["tensor 'w'", "int64"]);
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[1, 1, 1, 1, 1], 0, 0);
    assert_err(&r.0, &["tensor 'w'", "5 dimensions"]);
}

#[test]
fn tensors_past_the_end_of_the_file_are_absent_data() {
    // Offset far past the file: the header is valid, the data absent.
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[8], 0, 1 << 40).pad_data(32, 32);
    let h = parse_header(&r.0, "far").unwrap();
    assert!(!h.data_present());
    // An offset whose end overflows is refused.
    let mut r = Raw::new(3, 1, 0);
    r.tensor("w", &[8], 0, u64::MAX - 31);
    assert_err(&r.0, &["tensor 'w'", "2^64"]);
}

#[test]
fn duplicates_nested_arrays_and_bad_names_are_refused() {
    let mut r = Raw::new(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert_err(&r.0, &["duplicate metadata key 'k'"]);
    let mut r = Raw::new(3, 2, 0);
    r.tensor("t", &[8], 0, 0).tensor("t", &[8], 0, 32);
    assert_err(&r.0, &["duplicate tensor name 't'"]);
    let mut r = Raw::new(3, 0, 1);
    r.str("nest").u32(9).u32(9).u64(1);
    assert_err(&r.0, &["'nest'", "nested arrays"]);
    let mut r = Raw::new(3, 0, 1);
    r.u64(2);
    r.0.extend([0xff, 0xfe]);
    r.u32(4).u32(1);
    assert_err(&r.0, &["not valid UTF-8"]);
}

#[test]
fn foreign_files_and_versions_are_named() {
    assert_err(b"GGML\x03\0\0\0", &["not a GGUF file"]);
    assert_err(&Raw::new(1, 0, 0).0, &["version 1"]);
    assert_err(&Raw::new(4, 0, 0).0, &["version 4"]);
    let mut be = b"GGUF".to_vec();
    be.extend(3u32.to_be_bytes());
    be.extend([0u8; 16]);
    assert_err(&be, &["big-endian"]);
}

#[test]
fn patched_fixture_fields_are_caught() {
    // The last 8 bytes of the header are the last tensor's offset and the
    // 4 before them its type.
    let bytes = fixture();
    let header_len = parse_header(&bytes, "f")
        .unwrap()
        .layout()
        .unwrap()
        .header_len as usize;
    let mut b = bytes.clone();
    let off = u64::from_le_bytes(b[header_len - 8..header_len].try_into().unwrap());
    b[header_len - 8..header_len].copy_from_slice(&(off + 4).to_le_bytes());
    assert_err(&b, &["t.iq4_xs", "alignment"]);
    let mut b = bytes.clone();
    b[header_len - 12..header_len - 8].copy_from_slice(&77u32.to_le_bytes());
    assert_err(&b, &["t.iq4_xs", "unknown ggml type id 77"]);
    let mut b = bytes;
    b[header_len - 8..header_len].copy_from_slice(&0u64.to_le_bytes());
    assert_err(&b, &["t.iq4_xs", "overlap"]);
}
