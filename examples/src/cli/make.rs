//! `ggraph make-model OUT.gguf`: a random-weight llama GGUF of any shape,
//! for tests, benches and splitting experiments.

use ggraph::DType;
use ggraph::model::desc::ModelDesc;
use ggraph::model::llama::LlamaConfig;
use ggraph::model::make::{llama_gguf, make_vocab};
use ggraph::util::format_bytes;

use super::Failure;
use super::args::{Args, Spec};

pub const USAGE: &str = "usage: ggraph make-model OUT.gguf [options]

Writes a llama GGUF with random weights (and a vocabulary the llama
runner's tokenizer round-trips).

  --shape NAME        tiny, small or 8b-4l (default tiny); the options
                      below override its numbers
  --n-embd N  --n-layer N  --n-head N  --n-head-kv N  --n-ff N  --n-vocab N
  --n-expert N --n-expert-used N   mixture of experts
  --weights TYPE      F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K (default Q4_0)
  --seed N            (default 1)";

const SPEC: Spec = Spec {
    values: &[
        "--shape",
        "--n-embd",
        "--n-layer",
        "--n-head",
        "--n-head-kv",
        "--n-ff",
        "--n-vocab",
        "--n-expert",
        "--n-expert-used",
        "--weights",
        "--seed",
    ],
    repeated: &[],
    flags: &[],
};

pub fn render(args: &[String]) -> Result<String, Failure> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(format!("{USAGE}\n"));
    }
    let a = Args::parse(&SPEC, args).map_err(Failure::usage)?;
    let [out] = a.positional.as_slice() else {
        return Err(Failure::usage("one OUT.gguf expected"));
    };
    let base = ggraph::runner::preset(a.value("--shape").unwrap_or("tiny"))
        .map_err(|e| Failure::usage(e.to_string()))?;
    let num = |name: &str, d: usize| {
        a.parsed(name, d, |s| s.parse().ok(), "a number")
            .map_err(Failure::usage)
    };
    let n_embd = num("--n-embd", base.n_embd)?;
    let n_head = num("--n-head", base.n_head)?;
    let mut c = LlamaConfig::dense(
        num("--n-vocab", base.n_vocab)?,
        n_embd,
        num("--n-layer", base.n_layer)?,
        n_head,
        num("--n-head-kv", base.n_head_kv)?,
        num("--n-ff", base.n_ff)?,
    );
    c.rope_freq_base = base.rope_freq_base;
    c.n_expert = num("--n-expert", 0)?;
    c.n_expert_used = num(
        "--n-expert-used",
        if c.n_expert > 0 { 2.min(c.n_expert) } else { 0 },
    )?;
    let weights = a
        .parsed("--weights", DType::Q4_0, DType::from_name, "a type name")
        .map_err(Failure::usage)?;
    let seed = a
        .parsed("--seed", 1u64, |s| s.parse().ok(), "a number")
        .map_err(Failure::usage)?;
    let desc = ModelDesc::random(c, weights, seed).map_err(|e| Failure::usage(e.to_string()))?;
    let w = llama_gguf(&desc, make_vocab(desc.config.n_vocab)).map_err(Failure::other)?;
    let mut file = std::fs::File::create(out).map_err(|e| Failure::other(format!("{out}: {e}")))?;
    w.write_to(&mut file).map_err(Failure::other)?;
    Ok(format!(
        "wrote {out}: llama, {} layers, n_embd {}, {} heads ({} KV), n_ff {}, vocab {}, {} weights, {}\n",
        desc.config.n_layer,
        desc.config.n_embd,
        desc.config.n_head,
        desc.config.n_head_kv,
        desc.config.n_ff,
        desc.config.n_vocab,
        weights,
        format_bytes(desc.total_bytes())
    ))
}
