//! Reading the MODEL argument: a GGUF file, a GGUF header prefix, or a
//! header JSON. GGUF files are read header-only (only the bytes that hold
//! the metadata and tensor infos), with progress on stderr when that is a
//! lot of bytes.

use std::io::Read;
use std::path::{Path, PathBuf};

use ggraph::model::gguf::{GgufHeader, ModelFile, header_from_json_str};
use ggraph::progress::Progress;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A complete GGUF (its data is all there, though not read).
    Gguf,
    /// A GGUF whose tensor data is absent or cut short.
    GgufPrefix,
    /// Header JSON.
    Json,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Gguf => "gguf",
            Source::GgufPrefix => "gguf-prefix",
            Source::Json => "json",
        }
    }
}

pub struct Loaded {
    pub path: PathBuf,
    pub header: GgufHeader,
    pub source: Source,
}

/// True when `path` holds header JSON rather than GGUF: a `.json` name, or
/// text that starts with `{`.
fn is_json(path: &Path) -> Result<bool, String> {
    if path.is_dir() {
        return Err(format!(
            "{}: is a directory, not a .gguf file",
            path.display()
        ));
    }
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        return Ok(true);
    }
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(head[..n]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{'))
}

pub fn load(path: &str) -> Result<Loaded, String> {
    let path = PathBuf::from(path);
    if is_json(&path)? {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let header =
            header_from_json_str(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
        return Ok(Loaded {
            path,
            header,
            source: Source::Json,
        });
    }
    let mut progress = Progress::bytes(format!("reading the header of {}", path.display()));
    let mut report = |done: u64, total: u64| progress.update(done, total);
    let file = ModelFile::open_header(&path, Some(&mut report)).map_err(|e| e.to_string())?;
    progress.finish();
    let source = if file.header().data_present() {
        Source::Gguf
    } else {
        Source::GgufPrefix
    };
    Ok(Loaded {
        path,
        header: file.header().clone(),
        source,
    })
}
