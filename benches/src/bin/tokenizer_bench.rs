//! Tokenizer speed: ggraph's encode of a ~100 KB varied text (the
//! tokenizer fixtures' corpus, repeated) with llama.cpp's vocabularies,
//! next to llama.cpp's `llama-tokenize` on the same text and file,
//! measured here and now.
//!
//! llama-tokenize's time is its run on the text ten times over less its
//! run on an empty file (loading the vocabulary), over ten: one run on
//! 100 KB is mostly loading; ggraph's is the best of 5 encodes, and the
//! time to build the tokenizer from the header is printed apart.
//!
//! Run: cargo run --release -p ggraph-benches --bin tokenizer_bench
//! Files: GGRAPH_LLAMA_CPP_SOURCE (scripts/llama-cpp-source) for the
//! vocabularies, LLAMA_TOKENIZE for the peer (default: the build of
//! ~/.cache/ggraph-llama/build/bin); GGRAPH_REAL_GGUF for SmolLM2.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ggraph::model::gguf::read_header;
use ggraph::model::tokenizer::Tokenizer;

const TARGET_BYTES: usize = 100 * 1024;

fn home(rel: &str) -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(rel)
}

fn text() -> String {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ggraph-model/tests/fixtures/tokenizer/corpus.json");
    let texts: Vec<String> = std::fs::read_to_string(&corpus)
        .ok()
        .and_then(|s| ggraph::model::serde_json::from_str(&s).ok())
        .unwrap_or_else(|| vec!["The quick brown fox, 12345 times.\n".into()]);
    let mut out = String::with_capacity(TARGET_BYTES + 4096);
    while out.len() < TARGET_BYTES {
        for t in &texts {
            out.push_str(t);
            out.push('\n');
        }
    }
    out
}

/// Seconds llama-tokenize takes on `file` (the median of 3 runs).
fn peer_seconds(tool: &Path, vocab: &Path, file: &Path) -> Option<f64> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let ok = Command::new(tool)
            .args(["-m"])
            .arg(vocab)
            .args(["-f"])
            .arg(file)
            .args(["--ids", "--no-escape", "--log-disable"])
            .output()
            .ok()?
            .status
            .success();
        if !ok {
            return None;
        }
        runs.push(start.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    Some(runs[1])
}

fn main() {
    let src = std::env::var_os("GGRAPH_LLAMA_CPP_SOURCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| home(".cache/ggraph-llama/llama_cpp_python-0.3.36/vendor/llama.cpp"));
    let real = std::env::var_os("GGRAPH_REAL_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| home(".cache/ggraph-models/smollm2-135m-instruct"));
    let tool = std::env::var_os("LLAMA_TOKENIZE")
        .map(PathBuf::from)
        .unwrap_or_else(|| home(".cache/ggraph-llama/build/bin/llama-tokenize"));
    let text = text();
    let dir = std::env::temp_dir().join(format!("ggraph-tokenizer-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let text_file = dir.join("text10.txt");
    let empty_file = dir.join("empty.txt");
    let _ = std::fs::write(&text_file, text.repeat(10));
    let _ = std::fs::write(&empty_file, "");
    println!(
        "{} KB of text; ggraph: best of 5 encodes; llama.cpp: llama-tokenize on it ten times over less on an empty file, over ten",
        text.len() / 1024
    );
    println!(
        "{:<32} {:>9} {:>8} {:>11} {:>11} {:>11}",
        "vocabulary", "build ms", "tokens", "ggraph ms", "llama ms", "ggraph MB/s"
    );
    let vocabs = [
        src.join("models/ggml-vocab-llama-spm.gguf"),
        src.join("models/ggml-vocab-llama-bpe.gguf"),
        src.join("models/ggml-vocab-qwen2.gguf"),
        src.join("models/ggml-vocab-gpt-2.gguf"),
        src.join("models/ggml-vocab-deepseek-llm.gguf"),
        real.join("SmolLM2-135M-Instruct.Q4_1.gguf"),
    ];
    for v in vocabs {
        let name = v
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(h) = read_header(&v, None) else {
            println!("{name:<32} (no file: scripts/llama-cpp-source, scripts/real-gguf)");
            continue;
        };
        let start = Instant::now();
        let t = match Tokenizer::from_header(&h) {
            Ok(t) => t,
            Err(e) => {
                println!("{name:<32} {e}");
                continue;
            }
        };
        let build = start.elapsed().as_secs_f64();
        let mut best = f64::INFINITY;
        let mut n = 0;
        for _ in 0..5 {
            let start = Instant::now();
            n = t
                .encode(&text, true, true)
                .map(|ids| ids.len())
                .unwrap_or(0);
            best = best.min(start.elapsed().as_secs_f64());
        }
        let peer = match (
            peer_seconds(&tool, &v, &text_file),
            peer_seconds(&tool, &v, &empty_file),
        ) {
            (Some(a), Some(b)) => format!("{:.1}", (a - b) * 1e2),
            _ => "-".into(),
        };
        println!(
            "{name:<32} {:>9.1} {n:>8} {:>11.1} {peer:>11} {:>11.1}",
            build * 1e3,
            best * 1e3,
            text.len() as f64 / best / 1e6
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
