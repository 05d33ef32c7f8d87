//! `ggraph header MODEL`: a model's header as JSON (to store, edit and
//! estimate without the GGUF), or as a GGUF header prefix.

use std::io::{Read, Write};

use ggraph::model::gguf::{JsonOptions, encode_header};
use ggraph::progress::Progress;
use ggraph::values;

use super::Failure;
use super::model::{Source, load};

/// What `ggraph header --help` says after the options.
pub const JSON_HELP: &str = "\
The JSON: {\"version\": 3, \"kv\": {...}, \"tensors\": [{\"name\", \"type\", \"shape\"}]}.
A JSON integer is a uint32, a float a float32, a list of integers an
array[int32]; other types are {\"type\": T, \"value\": v}, arrays
{\"type\": \"array[T]\", \"values\": [...]} or, known only by length,
{\"type\": \"array[T]\", \"size\": N}.";

// `ggraph header`'s options (its help text is the subcommand's doc).
#[derive(clap::Args, Clone, Debug)]
#[command(after_long_help = JSON_HELP)]
pub struct HeaderArgs {
    /// A .gguf, a GGUF header prefix or a header JSON
    #[arg(value_name = "MODEL")]
    pub model: String,
    /// Write the JSON to FILE instead of stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<String>,
    /// Write arrays longer than N by length only
    #[arg(long = "max-array", value_name = "N", default_value_t = 1024,
          value_parser = values::u64_number)]
    pub max_array: u64,
    /// Write every array value (vocabularies included)
    #[arg(long = "all-arrays")]
    pub all_arrays: bool,
    /// Also write a GGUF header prefix (metadata and tensor infos, no
    /// tensor data) to FILE, for estimating elsewhere
    #[arg(long = "prefix-out", value_name = "FILE")]
    pub prefix_out: Option<String>,
}

/// Copies the first `len` bytes of `from` to `to`, with progress.
fn copy_prefix(from: &std::path::Path, to: &str, len: u64) -> Result<(), String> {
    let src = std::fs::File::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let mut src = src.take(len);
    let mut dst = std::fs::File::create(to).map_err(|e| format!("{to}: {e}"))?;
    let mut progress = Progress::bytes(format!("copying the header to {to}"));
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

/// The output of `ggraph header` (files named by --out and --prefix-out
/// are written on the way).
pub fn render(a: &HeaderArgs) -> Result<String, Failure> {
    let max_array_values = if a.all_arrays {
        None
    } else {
        Some(a.max_array)
    };
    let model = load(&a.model).map_err(Failure::other)?;
    let j = model.header.to_json(&JsonOptions { max_array_values });
    let mut text = format!("{j:#}\n");
    if let Some(path) = &a.out {
        std::fs::write(path, &text).map_err(|e| Failure::other(format!("{path}: {e}")))?;
        text.clear();
    }
    if let Some(out) = &a.prefix_out {
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
