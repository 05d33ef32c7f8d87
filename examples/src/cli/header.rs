//! `ggraph header MODEL`: a model's header as JSON (to store, edit and
//! estimate without the GGUF), or as a GGUF header prefix.

use std::io::{Read, Write};

use ggraph::model::gguf::{JsonOptions, encode_header};

use super::Failure;
use super::args::{Args, Spec};
use super::model::{Source, load};
use super::progress::StderrProgress;

pub const USAGE: &str =
    "usage: ggraph header MODEL [--out FILE] [--max-array N | --all-arrays] [--prefix-out FILE]

Prints the header of MODEL (a .gguf, a header prefix or a header JSON) as
JSON: {\"version\": 3, \"kv\": {...}, \"tensors\": [{\"name\", \"type\", \"shape\"}]}.
A JSON integer is a uint32, a float a float32, a list of integers an
array[int32]; other types are {\"type\": T, \"value\": v}, arrays
{\"type\": \"array[T]\", \"values\": [...]} or, known only by length,
{\"type\": \"array[T]\", \"size\": N}.

options:
  --out FILE         write the JSON to FILE instead of stdout
  --max-array N      write arrays longer than N by length only (default 1024)
  --all-arrays       write every array value (vocabularies included)
  --prefix-out FILE  also write a GGUF header prefix (metadata and tensor
                     infos, no tensor data) to FILE, for estimating elsewhere";

const SPEC: Spec = Spec {
    values: &["--out", "--max-array", "--prefix-out"],
    repeated: &[],
    flags: &["--all-arrays"],
};

/// Copies the first `len` bytes of `from` to `to`, with progress.
fn copy_prefix(from: &std::path::Path, to: &str, len: u64) -> Result<(), String> {
    let src = std::fs::File::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let mut src = src.take(len);
    let mut dst = std::fs::File::create(to).map_err(|e| format!("{to}: {e}"))?;
    let mut progress = StderrProgress::new(format!("copying the header to {to}"));
    let mut buf = vec![0u8; 4 << 20];
    let mut done = 0u64;
    loop {
        let n = src
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", from.display()))?;
        if n == 0 {
            break;
        }
        dst.write_all(&buf[..n]).map_err(|e| format!("{to}: {e}"))?;
        done += n as u64;
        progress.update(done, len);
    }
    progress.finish();
    if done != len {
        return Err(format!(
            "{}: ended after {done} of {len} header bytes",
            from.display()
        ));
    }
    Ok(())
}

/// The output of `ggraph header ARGS` (files named by --out and
/// --prefix-out are written on the way).
pub fn render(args: &[String]) -> Result<String, Failure> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(format!("{USAGE}\n"));
    }
    let a = Args::parse(&SPEC, args).map_err(Failure::usage)?;
    if a.positional.len() != 1 {
        return Err(Failure::usage("one MODEL expected"));
    }
    let max_array_values = if a.flag("--all-arrays") {
        None
    } else {
        Some(
            a.parsed(
                "--max-array",
                1024u64,
                |s| s.parse().ok(),
                "an element count",
            )
            .map_err(Failure::usage)?,
        )
    };
    let model = load(&a.positional[0]).map_err(Failure::other)?;
    let j = model.header.to_json(&JsonOptions { max_array_values });
    let mut text = format!("{j:#}\n");
    if let Some(path) = a.value("--out") {
        std::fs::write(path, &text).map_err(|e| Failure::other(format!("{path}: {e}")))?;
        text.clear();
    }
    if let Some(out) = a.value("--prefix-out") {
        match (model.source, model.header.layout()) {
            // From a GGUF: its own first bytes.
            (Source::Gguf | Source::GgufPrefix, Some(l)) => {
                copy_prefix(&model.path, out, l.header_len)
            }
            // From JSON: encoded, which needs every array's values.
            _ => encode_header(&model.header)
                .map_err(|e| e.to_string())
                .and_then(|b| std::fs::write(out, b).map_err(|e| format!("{out}: {e}"))),
        }
        .map_err(Failure::other)?;
    }
    Ok(text)
}
