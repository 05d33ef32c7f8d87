//! The tokenizer on arbitrary text: never panics, and where the
//! vocabulary can spell any text (byte-level BPE without space cleaning,
//! SentencePiece with byte pieces), the ids read back as the text.
//!
//!     scripts/fuzz 600 tokenizer
#![no_main]

use std::sync::OnceLock;

use ggraph_model::make::{bpe_vocab_header, make_vocab, vocab_header};
use ggraph_model::tokenizer::{StreamDecoder, Tokenizer, VocabKind};
use libfuzzer_sys::fuzz_target;

/// Pre-tokenizer families with their regexes of every shape: plain, with
/// lookahead, with literal Unicode ranges, with several passes.
const PRES: &[&str] = &[
    "gpt-2",
    "llama3",
    "qwen2",
    "gpt-4o",
    "tekken",
    "deepseek-llm",
    "deepseek-v3",
    "falcon",
    "chameleon",
    "bloom",
    "default",
    "smollm",
    "exaone-moe",
];

fn tokenizers() -> &'static [Tokenizer] {
    static T: OnceLock<Vec<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let mut v = vec![Tokenizer::from_header(&vocab_header(make_vocab(600)).unwrap()).unwrap()];
        for pre in PRES {
            v.push(Tokenizer::from_header(&bpe_vocab_header(pre).unwrap()).unwrap());
        }
        v
    })
}

fuzz_target!(|data: &[u8]| {
    let [pick, flags, rest @ ..] = data else {
        return;
    };
    let all = tokenizers();
    let t = &all[*pick as usize % all.len()];
    let text = String::from_utf8_lossy(rest);
    let (add_special, parse_special) = (flags & 1 != 0, flags & 2 != 0);
    let Ok(ids) = t.encode(&text, add_special, parse_special) else {
        return;
    };
    let decoded = t.decode(&ids, false, true).unwrap();
    let mut stream = StreamDecoder::new();
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&stream.push(t.piece(id, true).unwrap()));
    }
    streamed.push_str(&stream.finish());
    let is_spm = matches!(t.vocab().kind(), VocabKind::Spm);
    let cleans = t.vocab().cleans_spaces();
    // the text comes back only when nothing was added, parsed or cleaned,
    // and SentencePiece's space mark was not in it
    let spm_space = is_spm && text.contains('\u{2581}');
    if !(add_special || parse_special || cleans || spm_space) {
        assert_eq!(decoded, text, "{ids:?}");
    }
    if !is_spm && !cleans {
        assert_eq!(streamed, decoded, "streaming and whole decoding differ");
    }
});
