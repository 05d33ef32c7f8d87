//! ggraph's tokenizer against llama.cpp's, id for id: the fixtures in
//! fixtures/tokenizer/ are what `llama-tokenize` (llama.cpp as vendored in
//! the llama-cpp-python 0.3.36 sdist) made of the corpus in corpus.json
//! for each vocabulary, with special tokens parsed and not (see that
//! folder's README and make-fixtures).
//!
//! The vocabularies are llama.cpp's own vocabulary-only GGUFs
//! (`models/ggml-vocab-*.gguf` in the sdist), some read with another
//! `tokenizer.ggml.pre` to cover pre-tokenizer families no file of their
//! own ships, and the real SmolLM2 GGUF of scripts/real-gguf.
//!
//! Where the files are: `GGRAPH_LLAMA_CPP_SOURCE` (the sdist's
//! `vendor/llama.cpp`) and `GGRAPH_REAL_GGUF` (the real model's folder),
//! as scripts/test sets them; then a missing file fails. Without them,
//! the default caches of scripts/llama-cpp-source and scripts/real-gguf
//! are used when present, and the cases without a file are reported and
//! skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ggraph_core::error::Error;
use ggraph_model::gguf::{GgufHeader, Value, read_header};
use ggraph_model::serde_json::{self, Value as Json};
use ggraph_model::tokenizer::Tokenizer;

const REAL_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Vocabularies llama.cpp tokenises and ggraph refuses (with an error
/// that says so): BERT's WordPiece (embedding models), and the
/// pre-tokenizers llama.cpp runs as hand-written splitters (Kimi K2,
/// AFMoE, Tiny Aya).
const NOT_TOKENISED: &[&str] = &[
    "llama-bpe-as-kimi-k2",
    "llama-bpe-as-afmoe",
    "llama-bpe-as-tiny_aya",
    "llama-bpe-as-cohere2moe",
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer")
}

fn home_cache(rel: &str) -> Option<PathBuf> {
    Some(PathBuf::from(std::env::var_os("HOME")?).join(rel))
}

/// Where a fixture's source GGUF is, and whether it must be there.
fn source_path(source: &str) -> (Option<PathBuf>, bool) {
    let required = std::env::var_os("GGRAPH_REAL_GGUF").is_some();
    let path = if source == REAL_MODEL {
        std::env::var_os("GGRAPH_REAL_GGUF")
            .map(PathBuf::from)
            .or_else(|| home_cache(".cache/ggraph-models/smollm2-135m-instruct"))
            .map(|d| d.join(source))
    } else {
        std::env::var_os("GGRAPH_LLAMA_CPP_SOURCE")
            .map(PathBuf::from)
            .or_else(|| home_cache(".cache/ggraph-llama/llama_cpp_python-0.3.36/vendor/llama.cpp"))
            .map(|d| d.join("models").join(source))
    };
    (path.filter(|p| p.is_file() || required), required)
}

fn with_pre(h: &GgufHeader, pre: &str) -> GgufHeader {
    let mut kv: Vec<(String, Value)> = h
        .kv()
        .iter()
        .filter(|(k, _)| k != "tokenizer.ggml.pre")
        .cloned()
        .collect();
    kv.push(("tokenizer.ggml.pre".into(), Value::from(pre)));
    GgufHeader::new(h.version(), kv, vec![]).unwrap()
}

struct Case {
    name: String,
    source: String,
    pre: Option<String>,
    pre_overridden: bool,
    /// Per corpus text: the ids with special tokens parsed, and without.
    ids: Vec<(Vec<i32>, Vec<i32>)>,
}

fn ids_of(v: &Json) -> Vec<i32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap() as i32)
        .collect()
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && p.file_name().is_some_and(|n| n != "corpus.json")
        })
        .collect();
    paths.sort();
    for p in paths {
        let j: Json = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        out.push(Case {
            name: j["case"].as_str().unwrap().to_string(),
            source: j["source"].as_str().unwrap().to_string(),
            pre: j["pre"].as_str().map(str::to_string),
            pre_overridden: j["pre_overridden"].as_bool().unwrap_or(false),
            ids: j["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|pair| (ids_of(&pair[0]), ids_of(&pair[1])))
                .collect(),
        });
    }
    out
}

fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(fixtures().join("corpus.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_vocabulary_tokenises_the_corpus_as_llama_cpp_does() {
    let corpus = corpus();
    let mut headers: HashMap<String, GgufHeader> = HashMap::new();
    let mut failures = Vec::new();
    let mut skipped = Vec::new();
    let mut refused = Vec::new();
    let mut checked = 0;
    for case in cases() {
        assert_eq!(
            case.ids.len(),
            corpus.len(),
            "{}: fixture and corpus differ",
            case.name
        );
        let (path, _) = source_path(&case.source);
        let Some(path) = path else {
            skipped.push(case.name.clone());
            continue;
        };
        if !headers.contains_key(&case.source) {
            let h = read_header(&path, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            headers.insert(case.source.clone(), h);
        }
        let h = &headers[&case.source];
        let tokenizer = match (&case.pre, case.pre_overridden) {
            (Some(pre), true) => Tokenizer::from_header(&with_pre(h, pre)),
            _ => Tokenizer::from_header(h),
        };
        let tokenizer = match tokenizer {
            Ok(_) if NOT_TOKENISED.contains(&case.name.as_str()) => {
                failures.push(format!(
                    "{}: tokenised now: take it off NOT_TOKENISED",
                    case.name
                ));
                continue;
            }
            Ok(t) => t,
            Err(Error::Unsupported { what, .. }) if NOT_TOKENISED.contains(&case.name.as_str()) => {
                refused.push(format!("{} ({what})", case.name));
                continue;
            }
            Err(e) => {
                failures.push(format!("{}: no tokenizer: {e}", case.name));
                continue;
            }
        };
        let mut wrong = 0;
        for (text, (special, plain)) in corpus.iter().zip(&case.ids) {
            for (parse, want) in [(true, special), (false, plain)] {
                let got = tokenizer.encode(text, true, parse);
                if got.as_ref().ok() != Some(want) {
                    if wrong < 3 {
                        failures.push(format!(
                            "{} (parse_special {parse}) {text:?}:\n   got {got:?}\n  want {want:?}",
                            case.name
                        ));
                    }
                    wrong += 1;
                }
                checked += 1;
            }
        }
        if wrong > 3 {
            failures.push(format!("{}: {wrong} texts differ in all", case.name));
        }
    }
    if !skipped.is_empty() {
        eprintln!(
            "tokenizer_fixtures: no file for {} cases (scripts/llama-cpp-source and scripts/real-gguf make them): {}",
            skipped.len(),
            skipped.join(", ")
        );
    }
    for r in &refused {
        eprintln!("tokenizer_fixtures: refused, as expected: {r}");
    }
    eprintln!("tokenizer_fixtures: {checked} tokenisations checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Tokenizers of llama.cpp's vocabularies, built once for the property
/// tests (`None` where the file is not there and not required).
fn vocab_tokenizer(source: &str) -> Option<&'static Tokenizer> {
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<&'static Tokenizer>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    *cache.entry(source.to_string()).or_insert_with(|| {
        let (path, _) = source_path(source);
        let path = path?;
        let h = read_header(&path, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let t = Tokenizer::from_header(&h).unwrap_or_else(|e| panic!("{source}: {e}"));
        Some(Box::leak(Box::new(t)))
    })
}

mod round_trip {
    use super::*;
    use proptest::prelude::*;

    /// Text back from its ids, for vocabularies that do not clean spaces:
    /// SentencePiece with byte fallback and byte-level BPE represent any
    /// text, except SentencePiece's own space mark `▁`, which reads back as
    /// a space.
    fn check(source: &str, text: &str) -> Result<(), TestCaseError> {
        let Some(t) = vocab_tokenizer(source) else {
            return Ok(());
        };
        let ids = t.encode(text, false, false).unwrap();
        prop_assert_eq!(
            t.decode(&ids, false, true).unwrap(),
            text,
            "{}: {:?}",
            source,
            ids
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn any_text_reads_back_from_its_ids(text in "(\\PC|\\s|[<>|_'0-9])*", raw in any::<String>()) {
            for t in [&text, &raw] {
                check("ggml-vocab-qwen2.gguf", t)?;
                check("ggml-vocab-deepseek-coder.gguf", t)?;
                if !t.contains('\u{2581}') {
                    check("ggml-vocab-llama-spm.gguf", t)?;
                }
            }
        }
    }
}
