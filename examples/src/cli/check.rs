//! `ggraph check MODEL`: opens a GGUF fully (mapped, every check of the
//! reader, every tensor inside the file), reads all tensor data with
//! progress and prints a summary with a checksum.

use std::collections::BTreeMap;

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
    for ((_, name), (n, bytes)) in &by_type {
        let note = match ggraph::model::gguf::GgmlType::from_name(name).and_then(|t| t.dtype()) {
            Some(_) => "",
            None => "  (ggraph reads it but does not compute with it)",
        };
        let _ = writeln!(
            text,
            "  {name:<8} {n:>6} tensors {:>12}{note}",
            format_bytes(*bytes)
        );
    }
    let _ = writeln!(text, "checksum {sum:016x}");
    Ok(text)
}
