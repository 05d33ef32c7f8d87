//! Embeddings per second: 256 texts of 64 tokens each (CLS and SEP
//! included) through a real embedding model, ggraph's `embed` beside
//! llama.cpp's `llama-embedding` on the same file and the same machine.
//! Both pack the texts into batches of 4096 tokens (64 texts, one decode
//! each) and pool them by the model's mean; ggraph's figure is the time
//! of `embed` alone, llama.cpp's the wall time of `llama-embedding` less
//! that of a run of one short text (loading and starting).
//!
//! Run: cargo run --release -p ggraph-benches --bin embedding_bench --
//! [--model F32.gguf] [--rounds N] [--threads N]
//! [--llama-embedding "$(scripts/llama-tool llama-embedding)"]. The model
//! defaults to `$GGRAPH_REAL_EMBEDDING/F32.gguf` (or
//! `~/.cache/ggraph-models/all-minilm-l6-v2`, as
//! scripts/real-embedding-model makes it); each of its quantised siblings
//! (F16, Q8_0) is measured too.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use ggraph::context::{Context, ContextParams};
use ggraph::model::embedding::{Normalize, embed};
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::model::tokenizer::Tokenizer;
use ggraph::runner;
use ggraph_cpu::CpuDevice;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const TEXTS: usize = 256;
const TOKENS: usize = 64;
const BATCH: usize = 4096;

/// Words of one token each in an uncased WordPiece vocabulary.
const WORDS: &[&str] = &[
    "the", "cat", "dog", "sat", "on", "a", "mat", "and", "ran", "to", "house", "with", "red",
    "blue", "green", "big", "small", "old", "new", "river", "tree", "city", "car", "book", "music",
    "water", "fire", "light", "night", "day", "sun", "moon", "star", "road", "bird", "fish",
    "food", "game", "story", "world", "time", "man", "woman", "child", "friend", "school", "work",
    "money", "power", "war",
];

/// `TEXTS` texts of `TOKENS` tokens each (checked with the model's own
/// tokenizer), different from one another.
fn texts(t: &Tokenizer) -> Res<Vec<String>> {
    let mut out = Vec::with_capacity(TEXTS);
    let mut state = 12345u64;
    for _ in 0..TEXTS {
        let mut words = Vec::new();
        loop {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            words.push(WORDS[(state >> 33) as usize % WORDS.len()]);
            let text = words.join(" ");
            let n = t.encode(&text, true, true)?.len();
            if n == TOKENS {
                out.push(text);
                break;
            }
            if n > TOKENS {
                return Err(
                    format!("a text of {n} tokens: the words are not one token each").into(),
                );
            }
        }
    }
    Ok(out)
}

/// ggraph's seconds for all the texts (the best of `rounds`), and the
/// first vector.
fn ggraph_seconds(path: &Path, texts: &[String], rounds: usize) -> Res<(f64, Vec<f32>)> {
    let desc = runner::open_model(path.to_str().ok_or("a path that is not UTF-8")?)?;
    let opts = PlacementOptions::default();
    let model = Model::load(&desc, &[], CpuDevice::new(), &opts, LoadMode::Real, None)?;
    let tokenizer = model.tokenizer()?;
    let inputs = texts
        .iter()
        .map(|t| tokenizer.encode(t, true, true))
        .collect::<Result<Vec<_>, _>>()?;
    let params = ContextParams {
        n_ctx: BATCH,
        n_batch: BATCH,
        n_ubatch: BATCH,
        n_seq_max: 64,
        embeddings: true,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::new(model), params)?;
    // one round to warm the caches and the compute buffers
    let mut first = embed(&mut ctx, &inputs, Normalize::PNorm(2))?;
    let mut best = f64::INFINITY;
    for _ in 0..rounds {
        let start = Instant::now();
        first = embed(&mut ctx, &inputs, Normalize::PNorm(2))?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok((best, first.swap_remove(0)))
}

/// llama-embedding's seconds for all the texts: the best of `rounds`
/// runs' wall time, less the best of a run of one short text (its start:
/// loading the model and the threads; its log at exit is asynchronous and
/// may lose the perf counters' lines).
fn llama_seconds(
    bin: &str,
    path: &Path,
    texts: &[String],
    rounds: usize,
    threads: usize,
) -> Res<f64> {
    let dir = std::env::temp_dir();
    let all = dir.join(format!("embedding-bench-{}.txt", std::process::id()));
    let one = dir.join(format!("embedding-bench-{}-one.txt", std::process::id()));
    std::fs::write(&all, texts.join("\n"))?;
    std::fs::write(&one, "the cat")?;
    let run = |file: &Path| -> Res<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..rounds {
            let start = Instant::now();
            let out = Command::new(bin)
                .args(["-m", path.to_str().ok_or("a path that is not UTF-8")?])
                .args(["-f", file.to_str().ok_or("a path that is not UTF-8")?])
                .args(["-c", &BATCH.to_string(), "-b", &BATCH.to_string()])
                .args(["-ub", &BATCH.to_string(), "-t", &threads.to_string()])
                .args(["--embd-output-format", "array", "-ngl", "0"])
                .output()?;
            let secs = start.elapsed().as_secs_f64();
            if !out.status.success() {
                return Err(
                    format!("{bin} failed: {}", String::from_utf8_lossy(&out.stderr)).into(),
                );
            }
            best = best.min(secs);
        }
        Ok(best)
    };
    let r = run(&all).and_then(|a| Ok(a - run(&one)?));
    let _ = std::fs::remove_file(&all);
    let _ = std::fs::remove_file(&one);
    r
}

fn default_model() -> Option<PathBuf> {
    let dir = std::env::var_os("GGRAPH_REAL_EMBEDDING")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/ggraph-models/all-minilm-l6-v2"))
        })?;
    Some(dir.join("F32.gguf"))
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let model = value("--model")
        .map(PathBuf::from)
        .or_else(default_model)
        .ok_or("no model: --model PATH, or scripts/real-embedding-model")?;
    let rounds: usize = value("--rounds").map_or(Ok(3), |v| v.parse())?;
    let threads: usize = value("--threads").map_or(Ok(2), |v| v.parse())?;
    let llama = value("--llama-embedding");
    let dir = model.parent().ok_or("the model has no directory")?;
    let mut files = vec![model.clone()];
    for sibling in ["F16.gguf", "Q8_0.gguf"] {
        let p = dir.join(sibling);
        if p.is_file() && p != model {
            files.push(p);
        }
    }
    let desc = runner::open_model(model.to_str().ok_or("a path that is not UTF-8")?)?;
    let texts = texts(&desc.tokenizer()?)?;
    println!(
        "{TEXTS} texts of {TOKENS} tokens, batches of {BATCH} tokens, mean pooling, {threads} threads; \
         embeddings per second (best of {rounds})"
    );
    println!("{:<12} {:>10} {:>12}", "file", "ggraph", "llama.cpp");
    for f in &files {
        let (g, _) = ggraph_seconds(f, &texts, rounds)?;
        let l = match &llama {
            Some(bin) => format!(
                "{:.1}",
                TEXTS as f64 / llama_seconds(bin, f, &texts, rounds, threads)?
            ),
            None => "-".into(),
        };
        let name = f
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        println!("{name:<12} {:>10.1} {l:>12}", TEXTS as f64 / g);
    }
    Ok(())
}
