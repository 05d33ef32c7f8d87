//! `ggraph check MODEL`: opens a GGUF fully (mapped, every check of the
//! reader, every tensor inside the file), reads all tensor data with
//! progress and prints a summary with a checksum, and for each tensor type
//! whether each device found computes with weights of that type.

use std::collections::BTreeMap;

use std::sync::Arc;

use ggraph::backend::{Device, weight_ops};
use ggraph::model::gguf::ModelFile;
use ggraph::progress::Progress;
use ggraph::util::format_bytes;

use super::Failure;

// `ggraph check`'s options (its help text is the subcommand's doc).
#[derive(clap::Args, Clone, Debug)]
pub struct CheckArgs {
    /// A .gguf
    #[arg(value_name = "MODEL.gguf")]
    pub model: String,
}

/// The output of `ggraph check`.
pub fn render(a: &CheckArgs) -> Result<String, Failure> {
    let path = &a.model;
    let file = ModelFile::open(path).map_err(Failure::other)?;
    let h = file.header();
    let mut progress = Progress::bytes(format!("reading {path}"));
    let mut report = |done: u64, total: u64| progress.update(done, total);
    let sum = file.checksum_data(Some(&mut report));
    progress.finish();
    let sum = sum.map_err(Failure::other)?;
    use std::fmt::Write;
    let mut text = String::new();
    let l = h.layout();
    let _ = writeln!(
        text,
        "{path}: GGUF v{}, alignment {}, {} key-value pairs, {} tensors",
        h.version(),
        h.alignment(),
        h.kv().len(),
        h.tensors().len()
    );
    if let Some(l) = l {
        let _ = writeln!(
            text,
            "header {} bytes, data from byte {}, {} of tensor data, file {}",
            l.header_len,
            l.data_offset,
            format_bytes(h.data_len()),
            format_bytes(l.file_len)
        );
    }
    if let Ok(arch) = h.architecture() {
        let _ = writeln!(text, "architecture {arch}");
    }
    let mut by_type: BTreeMap<(u32, &str), (usize, u64)> = BTreeMap::new();
    for t in h.tensors() {
        let e = by_type
            .entry((t.ggml_type.id(), t.ggml_type.name()))
            .or_default();
        e.0 += 1;
        e.1 += t.size_bytes;
    }
    let devices = ggraph::registry().devices();
    let _ = write!(
        text,
        "tensor types; per device, whether it runs get_rows, mul_mat and mul_mat_id with them\n  {:<8} {:>7} {:>12}",
        "type", "tensors", "bytes"
    );
    for d in &devices {
        let _ = write!(text, " {:>8}", d.name());
    }
    text.push('\n');
    for ((_, name), (n, bytes)) in &by_type {
        let dtype = ggraph::model::gguf::GgmlType::from_name(name).and_then(|t| t.dtype());
        let _ = write!(text, "  {name:<8} {n:>7} {:>12}", format_bytes(*bytes));
        for d in &devices {
            let _ = write!(text, " {:>8}", support(d, dtype));
        }
        if dtype.is_none() {
            text.push_str("  (ggraph reads it but does not compute with it)");
        }
        text.push('\n');
    }
    let _ = writeln!(text, "checksum {sum:016x}");
    Ok(text)
}

/// `yes` when `device` runs every op that reads weights with `dtype`,
/// `no` when none, the ops it runs otherwise, `-` for a type ggraph does
/// not compute with.
fn support(device: &Arc<dyn Device>, dtype: Option<ggraph::DType>) -> String {
    let Some(ops) = dtype.and_then(|t| weight_ops(device.as_ref(), t).ok()) else {
        return "-".into();
    };
    let runs: Vec<&str> = [
        (ops.get_rows, "rows"),
        (ops.mul_mat, "mm"),
        (ops.mul_mat_id, "mm_id"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    match runs.len() {
        3 => "yes".into(),
        0 => "no".into(),
        _ => runs.join("+"),
    }
}
