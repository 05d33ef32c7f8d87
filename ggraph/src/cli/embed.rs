//! `ggraph embed MODEL TEXT...`: the embeddings of texts, printed as
//! llama.cpp's `llama-embedding` prints them (one vector per text, the
//! cosine similarity matrix of several, a reranker's scores; or JSON,
//! JSON with the similarities, one array, or raw lines).

use std::fmt::Write;
use std::sync::Arc;

use ggraph::context::Context;
use ggraph::model::arch::Pooling;
use ggraph::model::embedding::{Normalize, cosine, embed};
use ggraph::options::{ContextArgs, DeviceArgs, PlacementArgs};
use ggraph::runner;

use super::Failure;

/// How the vectors are printed (llama-embedding's `--embd-output-format`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// `{"object": "list", "data": [{"object": "embedding", ...}]}`
    Json,
    /// The same, with the cosine similarity matrix
    #[value(name = "json+")]
    JsonPlus,
    /// One JSON array of the vectors
    Array,
    /// One vector per line, values separated by spaces
    Raw,
}

/// `ggraph embed`'s options.
#[derive(clap::Args, Clone, Debug)]
pub struct EmbedArgs {
    /// The model, a .gguf
    #[arg(value_name = "MODEL.gguf")]
    pub model: String,
    /// The texts: each argument one, and each split at --embd-separator
    #[arg(value_name = "TEXT", required = true)]
    pub texts: Vec<String>,
    /// How token rows become a text's vector [default: the model's]
    #[arg(long, value_name = "TYPE", value_parser = ["none", "mean", "cls", "last", "rank"])]
    pub pooling: Option<String>,
    /// -1 none, 0 max absolute (int16 range), 1 taxicab, 2 euclidean, >2
    /// p-norm
    #[arg(
        long = "embd-normalize",
        value_name = "N",
        default_value_t = 2,
        allow_hyphen_values = true
    )]
    pub normalize: i32,
    /// Print JSON, JSON with similarities, an array or raw lines instead
    /// of llama-embedding's listing
    #[arg(long = "embd-output-format", value_name = "FORMAT", value_enum)]
    pub format: Option<OutputFormat>,
    /// Where a text splits into several
    #[arg(long = "embd-separator", value_name = "SEP", default_value = "\n")]
    pub separator: String,
    /// A reranker's query and document within one text are split here
    #[arg(long = "cls-separator", value_name = "SEP", default_value = "\t")]
    pub cls_separator: String,
    #[command(flatten)]
    pub devices: DeviceArgs,
    #[command(flatten)]
    pub placement: PlacementArgs,
    #[command(flatten)]
    pub context: ContextArgs,
}

/// The embeddings as `a` asks them printed.
pub fn render(a: &EmbedArgs) -> Result<String, Failure> {
    let norm = Normalize::from_number(a.normalize).ok_or_else(|| {
        Failure::usage(format!(
            "--embd-normalize {}: -1, 0 or a positive p",
            a.normalize
        ))
    })?;
    let pooling = a
        .pooling
        .as_deref()
        .map(Pooling::parse)
        .transpose()
        .map_err(|e| Failure::usage(e.to_string()))?;
    let texts: Vec<&str> = a
        .texts
        .iter()
        .flat_map(|t| t.split(a.separator.as_str()))
        .collect();
    let desc = runner::open_model(&a.model).map_err(Failure::other)?;
    let mut params = a.context.params().map_err(Failure::usage)?;
    params.embeddings = true;
    params.pooling = pooling;
    // as llama-embedding: every text of a batch its own sequence, and a
    // model without a cache takes a batch in one ubatch
    params.n_seq_max = params.n_seq_max.max(texts.len().min(64));
    params.n_batch = params.n_batch.max(params.n_ctx);
    params.n_ubatch = params.n_batch;
    params.n_ctx = params.n_ctx.max(params.n_batch);
    let (devices, cpu) = a.devices.devices().map_err(Failure::other)?;
    a.placement.check(devices.len()).map_err(Failure::usage)?;
    let (model, params) =
        runner::load_for_run(&desc, &devices, cpu, a.placement.options(), params, None)
            .map_err(Failure::other)?;
    let tokenizer = model.tokenizer().map_err(Failure::other)?;
    let mut ctx = Context::new(Arc::new(model), params).map_err(Failure::other)?;
    let pooling = ctx.pooling();
    let inputs = texts
        .iter()
        .map(|t| {
            let text = match pooling {
                Pooling::Rank => rank_pair(t, &a.cls_separator, &tokenizer),
                _ => t.to_string(),
            };
            tokenizer.encode(&text, true, true)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::other)?;
    // a reranker's scores are printed as computed
    let norm = match pooling {
        Pooling::Rank => Normalize::None,
        _ => norm,
    };
    let vectors = embed(&mut ctx, &inputs, norm).map_err(Failure::other)?;
    let labels = ctx.model().config.n_cls_out;
    Ok(match a.format {
        None => listing(&vectors, &texts, pooling, labels, norm),
        Some(OutputFormat::Raw) => raw(&vectors, norm),
        Some(f) => json(&vectors, f, norm),
    })
}

/// A reranker's query and document joined as llama-embedding joins them:
/// the parts with the vocabulary's EOS and SEP between, where it adds
/// them.
fn rank_pair(text: &str, sep: &str, tokenizer: &ggraph::model::tokenizer::Tokenizer) -> String {
    let between = tokenizer.pair_separator();
    text.split(sep).collect::<Vec<_>>().join(&between)
}

fn value(x: f32, norm: Normalize) -> String {
    match norm {
        Normalize::MaxAbs => format!("{x:.0}"),
        _ => format!("{x:.7}"),
    }
}

/// llama-embedding's own listing: each vector (the first 16 values of
/// several), their cosine similarities, or a reranker's scores.
fn listing(
    vectors: &[Vec<f32>],
    texts: &[&str],
    pooling: Pooling,
    labels: usize,
    norm: Normalize,
) -> String {
    let mut s = String::new();
    let cell = |x: f32| match norm {
        Normalize::MaxAbs => format!("{x:6.0} "),
        _ => format!("{x:9.6} "),
    };
    match pooling {
        Pooling::None => {
            for (j, v) in vectors.iter().enumerate() {
                let _ = write!(s, "embedding {j}: ");
                let n = v.len();
                v[..n.min(3)].iter().for_each(|&x| s.push_str(&cell(x)));
                s.push_str(" ... ");
                v[n.saturating_sub(3)..]
                    .iter()
                    .for_each(|&x| s.push_str(&cell(x)));
                s.push('\n');
            }
        }
        Pooling::Rank => {
            for (j, v) in vectors.iter().enumerate() {
                for (i, x) in v.iter().take(labels).enumerate() {
                    let _ = match labels {
                        1 => writeln!(s, "rerank score {j}: {x:8.3}"),
                        _ => writeln!(s, "rerank score {j}: {x:8.3} [{i}]"),
                    };
                }
            }
        }
        _ => {
            let several = vectors.len() > 1;
            for (j, v) in vectors.iter().enumerate() {
                let _ = write!(s, "embedding {j}: ");
                let shown = if several { v.len().min(16) } else { v.len() };
                v[..shown].iter().for_each(|&x| s.push_str(&cell(x)));
                s.push('\n');
            }
            if several {
                s.push_str("\ncosine similarity matrix:\n\n");
                for t in texts {
                    let _ = write!(s, "{:>6.6} ", t.chars().take(6).collect::<String>());
                }
                s.push('\n');
                for (i, a) in vectors.iter().enumerate() {
                    for b in vectors {
                        let _ = write!(s, "{:6.2} ", cosine(a, b));
                    }
                    s.push_str(&texts[i].chars().take(10).collect::<String>());
                    s.push('\n');
                }
            }
        }
    }
    s
}

fn json(vectors: &[Vec<f32>], format: OutputFormat, norm: Normalize) -> String {
    let row = |v: &Vec<f32>| {
        let values: Vec<String> = v.iter().map(|&x| value(x, norm)).collect();
        format!("[{}]", values.join(","))
    };
    if format == OutputFormat::Array {
        let rows: Vec<String> = vectors.iter().map(row).collect();
        return format!("[{}]\n", rows.join(","));
    }
    let data: Vec<String> = vectors
        .iter()
        .enumerate()
        .map(|(j, v)| {
            format!(
                "    {{\n      \"object\": \"embedding\",\n      \"index\": {j},\n      \"embedding\": {}\n    }}",
                row(v)
            )
        })
        .collect();
    let mut s = format!(
        "{{\n  \"object\": \"list\",\n  \"data\": [\n{}\n  ]",
        data.join(",\n")
    );
    if format == OutputFormat::JsonPlus && vectors.len() > 1 {
        let rows: Vec<String> = vectors
            .iter()
            .map(|a| {
                let sims: Vec<String> = vectors
                    .iter()
                    .map(|b| format!("{:6.2}", cosine(a, b)))
                    .collect();
                format!("    [{} ]", sims.join(", "))
            })
            .collect();
        let _ = write!(s, ",\n  \"cosineSimilarity\": [\n{}\n  ]", rows.join(",\n"));
    }
    s.push_str("\n}\n");
    s
}

fn raw(vectors: &[Vec<f32>], norm: Normalize) -> String {
    let mut s = String::new();
    for v in vectors {
        let values: Vec<String> = v.iter().map(|&x| value(x, norm)).collect();
        s.push_str(&values.join(" "));
        s.push('\n');
    }
    s
}
