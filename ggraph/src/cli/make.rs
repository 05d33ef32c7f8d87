//! `ggraph make-model OUT.gguf`: a random-weight GGUF of any architecture
//! ggraph builds and any shape, for tests, benches and splitting
//! experiments.

use std::io::Write;

use clap::builder::PossibleValuesParser;
use ggraph::DType;
use ggraph::model::arch::{ModelConfig, arch_by_name, arch_names};
use ggraph::model::desc::ModelDesc;
use ggraph::model::gguf::GgmlType;
use ggraph::model::make::{make_vocab, model_gguf};
use ggraph::progress::Progress;
use ggraph::runner::SHAPES;
use ggraph::util::format_bytes;
use ggraph::values;

use super::Failure;

// `ggraph make-model`'s options (its help text is the subcommand's doc).
#[derive(clap::Args, Clone, Debug)]
pub struct MakeArgs {
    /// The file to write
    #[arg(value_name = "OUT.gguf")]
    pub out: String,
    /// The architecture (llama, qwen2, qwen3, qwen3moe, gemma2, gemma3,
    /// phi3, lfm2, granitehybrid, qwen35, qwen35moe, gpt-oss), with its
    /// defaults (gemma's sliding window and soft-caps, qwen3moe's experts,
    /// phi3's partial rope, lfm2's short convolutions, granitehybrid's
    /// Mamba-2 layers, qwen35's Gated DeltaNet layers with attention every
    /// fourth layer, gpt-oss's sinks, biased experts, alternating window
    /// of 128 and YaRN)
    #[arg(long, value_name = "ARCH", default_value = "llama",
          value_parser = PossibleValuesParser::new(arch_names()))]
    pub arch: String,
    /// The shape the options below change: tiny, small (n_embd 512, 8
    /// layers, vocab 32000) or 8b-4l (llama-3-8B layers, 4 of them)
    #[arg(long, value_name = "NAME", default_value = "tiny",
          value_parser = PossibleValuesParser::new(SHAPES))]
    pub shape: String,
    /// Embedding width [default: the shape's]
    #[arg(long = "n-embd", value_name = "N", value_parser = values::positive)]
    pub n_embd: Option<usize>,
    /// Layers [default: the shape's]
    #[arg(long = "n-layer", value_name = "N", value_parser = values::positive)]
    pub n_layer: Option<usize>,
    /// Attention heads [default: the shape's]
    #[arg(long = "n-head", value_name = "N", value_parser = values::positive)]
    pub n_head: Option<usize>,
    /// KV heads [default: the shape's]
    #[arg(long = "n-head-kv", value_name = "N", value_parser = values::positive)]
    pub n_head_kv: Option<usize>,
    /// Feed-forward width [default: the shape's]
    #[arg(long = "n-ff", value_name = "N", value_parser = values::positive)]
    pub n_ff: Option<usize>,
    /// Vocabulary size [default: the shape's]
    #[arg(long = "n-vocab", value_name = "N", value_parser = values::positive)]
    pub n_vocab: Option<usize>,
    /// Experts per layer (mixture of experts) [default: the
    /// architecture's: 8 for qwen3moe, else none]
    #[arg(long = "n-expert", value_name = "N", value_parser = values::count)]
    pub n_expert: Option<usize>,
    /// Experts used per token [default: 2, at most --n-expert]
    #[arg(long = "n-expert-used", value_name = "N", value_parser = values::count)]
    pub n_expert_used: Option<usize>,
    /// Weight type: F32, F16, BF16 or any quantised type ggraph reads
    #[arg(long, value_name = "TYPE", default_value = "Q4_0", value_parser = values::weight_dtype)]
    pub weights: DType,
    /// Seed of the weights
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = values::u64_number)]
    pub seed: u64,
}

/// The bytes of `c`'s weights in `weights` (the norms in F32), or `None`
/// past 2^64: counted from the list of tensors the model has, without
/// making any.
fn file_bytes(c: &ModelConfig, weights: DType) -> Option<u64> {
    let mut total = 0u64;
    for w in c.weights() {
        let rows = w
            .shape
            .iter()
            .skip(1)
            .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
        let dtype = if w.shape.len() > 1 {
            weights
        } else {
            DType::F32
        };
        let n0 = *w.shape.first()? as u64;
        let row = n0.checked_mul(dtype.type_size() as u64)? / dtype.block_size().max(1) as u64;
        total = total.checked_add(row.checked_mul(rows)?)?;
    }
    Some(total)
}

/// Makes the model and writes it (progress on stderr for large models);
/// returns the line that says what was written.
pub fn render(a: &MakeArgs) -> Result<String, Failure> {
    let out = &a.out;
    let base = ggraph::runner::preset(&a.shape).map_err(|e| Failure::usage(e.to_string()))?;
    let n_embd = a.n_embd.unwrap_or(base.n_embd);
    let n_head = a.n_head.unwrap_or(base.n_head);
    let arch = arch_by_name(&a.arch)
        .ok_or_else(|| Failure::usage(format!("unknown architecture '{}'", a.arch)))?;
    let mut c = ModelConfig::new(
        arch,
        a.n_vocab.unwrap_or(base.n_vocab),
        n_embd,
        a.n_layer.unwrap_or(base.n_layer),
        n_head,
        a.n_head_kv.unwrap_or(base.n_head_kv),
        a.n_ff.unwrap_or(base.n_ff),
    );
    if arch.name == "llama" {
        c.rope_freq_base = base.rope_freq_base;
    }
    if let Some(n) = a.n_expert {
        c.n_expert = n;
        c.n_ff_expert = c.n_ff;
    }
    c.n_expert_used = a.n_expert_used.unwrap_or(if c.n_expert > 0 {
        c.n_expert_used.clamp(1, 2).min(c.n_expert)
    } else {
        0
    });
    let weights = a.weights;
    // the whole file is made in memory: refuse a model that cannot be,
    // before anything is allocated
    let size = file_bytes(&c, weights).ok_or_else(|| {
        Failure::usage("those sizes make a model of more than 2^64 bytes".to_string())
    })?;
    let free = ggraph_cpu::host_memory_info().free_bytes;
    if size.saturating_mul(2) > free {
        return Err(Failure::usage(format!(
            "those sizes make a model of {}; making it here takes twice that, and {} of memory is free",
            format_bytes(size),
            format_bytes(free)
        )));
    }
    let desc = ModelDesc::random(c, weights, a.seed).map_err(|e| Failure::usage(e.to_string()))?;
    // the header from model_gguf, the tensors added here one by one: making
    // a large model's random weights takes a while
    let mut header_only = desc.clone();
    header_only.tensors.clear();
    let mut w =
        model_gguf(&header_only, make_vocab(desc.config.n_vocab)).map_err(Failure::other)?;
    let total = desc.total_bytes();
    let mut progress = Progress::bytes(format!("making {out}"));
    let mut done = 0u64;
    for t in desc.tensors.iter().filter(|t| t.copy_of.is_none()) {
        let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
        let bytes = desc.bytes_of(t).map_err(Failure::other)?;
        w.tensor(&t.name, GgmlType::from(t.dtype), &shape, bytes)
            .map_err(Failure::other)?;
        done += t.nbytes();
        progress.update(done, total);
    }
    progress.finish();
    let bytes = w.to_bytes().map_err(Failure::other)?;
    let mut file = std::fs::File::create(out).map_err(|e| Failure::other(format!("{out}: {e}")))?;
    let mut progress = Progress::bytes(format!("writing {out}"));
    let mut written = 0u64;
    for chunk in bytes.chunks(8 << 20) {
        file.write_all(chunk)
            .map_err(|e| Failure::other(format!("{out}: {e}")))?;
        written += chunk.len() as u64;
        progress.update(written, bytes.len() as u64);
    }
    progress.finish();
    Ok(format!(
        "wrote {out}: {}, {} layers, n_embd {}, {} heads ({} KV), n_ff {}, vocab {}, {} weights, {}\n",
        desc.config.arch.name,
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
