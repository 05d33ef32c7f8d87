//! `ggraph tokenize MODEL TEXT`: the token ids of a text with the model's
//! own tokenizer, printed as llama.cpp's `llama-tokenize --ids` prints
//! them (`[1, 2, 3]`), or one token per line with its piece.

use std::fmt::Write;

use ggraph::model::tokenizer::Tokenizer;

use super::Failure;
use super::model::load;

// `ggraph tokenize`'s options (its help text is the subcommand's doc).
#[derive(clap::Args, Clone, Debug)]
pub struct TokenizeArgs {
    /// A .gguf, a GGUF header prefix or a header JSON with its vocabulary
    #[arg(value_name = "MODEL")]
    pub model: String,
    /// The text (escapes such as \n and \x41 are processed, as
    /// llama-tokenize does; see --no-escape)
    #[arg(
        value_name = "TEXT",
        allow_hyphen_values = true,
        required_unless_present = "file"
    )]
    pub text: Option<String>,
    /// Read the text from FILE, byte for byte, instead of TEXT
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "text")]
    pub file: Option<String>,
    /// Control tokens written in the text (<|im_end|>) stay text
    #[arg(long = "no-parse-special")]
    pub no_parse_special: bool,
    /// No BOS (or EOS) even where the vocabulary adds them
    #[arg(long = "no-bos")]
    pub no_bos: bool,
    /// Take backslashes in the text literally
    #[arg(long = "no-escape")]
    pub no_escape: bool,
    /// One token per line with its piece, instead of the id list
    #[arg(long)]
    pub pieces: bool,
}

/// llama.cpp's `string_process_escapes`: `\n`, `\r`, `\t`, `\'`, `\"`,
/// `\\` and `\xHH`; any other backslash stays as it is.
pub fn process_escapes(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        let c = input[i];
        if c != b'\\' || i + 1 >= input.len() {
            out.push(c);
            i += 1;
            continue;
        }
        i += 1;
        let e = input[i];
        match e {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'\'' | b'"' | b'\\' => out.push(e),
            b'x' if i + 2 < input.len()
                && input[i + 1].is_ascii_hexdigit()
                && input[i + 2].is_ascii_hexdigit() =>
            {
                let hex = [input[i + 1], input[i + 2]];
                let hex = std::str::from_utf8(&hex).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(0));
                i += 2;
            }
            _ => out.extend_from_slice(&[b'\\', e]),
        }
        i += 1;
    }
    out
}

/// The output of `ggraph tokenize`.
pub fn render(a: &TokenizeArgs) -> Result<String, Failure> {
    let loaded = load(&a.model).map_err(Failure::other)?;
    let tokenizer = Tokenizer::from_header(&loaded.header).map_err(Failure::other)?;
    let raw = match (&a.file, &a.text) {
        (Some(f), _) => std::fs::read(f).map_err(|e| Failure::other(format!("{f}: {e}")))?,
        (None, Some(t)) => t.as_bytes().to_vec(),
        (None, None) => return Err(Failure::usage("give TEXT or --file FILE")),
    };
    let bytes = if a.no_escape {
        raw
    } else {
        process_escapes(&raw)
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        Failure::other(format!(
            "the text is not UTF-8 (byte {} of it)",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let ids = tokenizer
        .encode(&text, !a.no_bos, !a.no_parse_special)
        .map_err(Failure::other)?;
    let mut out = String::new();
    if a.pieces {
        for &id in &ids {
            let piece = tokenizer.piece(id, true).map_err(Failure::other)?;
            let _ = writeln!(out, "{id:6} -> '{}'", String::from_utf8_lossy(piece));
        }
    } else {
        let list: Vec<String> = ids.iter().map(i32::to_string).collect();
        let _ = writeln!(out, "[{}]", list.join(", "));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_follow_llama_cpp() {
        assert_eq!(process_escapes(br"a\nb\tc\\d"), b"a\nb\tc\\d");
        assert_eq!(process_escapes(br"\x41\x4"), b"A\\x4");
        assert_eq!(process_escapes(br"\q\"), b"\\q\\");
    }
}
