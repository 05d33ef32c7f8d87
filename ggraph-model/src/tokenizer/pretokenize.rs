//! The pre-tokenizer of a byte-level BPE vocabulary: the regexes that
//! `tokenizer.ggml.pre` names, as llama.cpp applies them
//! (`llm_tokenizer_bpe` and `unicode_regex_split`). Each regex splits
//! every piece the previous one left into its matches and the text
//! between them.
//!
//! llama.cpp runs these regexes with `std::regex` over text whose non-ASCII
//! characters it collapses to their Unicode category, and runs hand-written
//! equivalents for the GPT-2, Llama 3 and Qwen 2 patterns. Both agree with
//! the patterns' Unicode meaning, which is what `fancy_regex` gives here
//! directly: `\s` is White_Space, `\p{L}` a letter, `\p{N}` a number.
//! Lookahead (`\s+(?!\S)`) needs `fancy_regex` rather than `regex`.

use ggraph_core::error::{Error, Result};

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const JAIS2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const DEEPSEEK_LLM: &[&str] = &[
    "[\r\n]",
    "\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+",
    "\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+",
    r"\s+$",
    "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+",
    r"\p{N}+",
];
const DEEPSEEK3: &[&str] = &[
    r"\p{N}{1,3}",
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];
const SPARK2_5: &[&str] = &[
    r"\p{N}{1,3}",
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
    r"\p{N}",
];
const YOUTU: &[&str] = &[
    "[\u{ac00}-\u{d7a3}\u{3131}-\u{318e}]+|[\u{ff01}\u{2026}\u{201c}\u{201d}\u{2018}\u{2019}\u{2014}\u{ff1a}\u{ff1b}\u{ff0c}\u{3001}-\u{303f}\u{fe30}-\u{fe4f}]+|[\u{3105}-\u{312f}]+|[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const DEEPSEEK_CODER: &[&str] = &[
    "[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+",
    r"\p{N}",
];
const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"];
const STARCODER: &[&str] = &[r"\p{N}", GPT2];
const BLOOM: &[&str] = &[" ?[^(\\s|.,!?\u{2026}\u{3002}\u{ff0c}\u{3001}\u{964}\u{6d4}\u{60c})]+"];
const VIKING: &[&str] = &[
    " ?[^(\\s|.,!?\u{2026}\u{3002}\u{ff0c}\u{3001}\u{964}\u{6d4}\u{60c})]+",
    r"\p{N}",
];
const TEKKEN: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const CHAMELEON: &[&str] = &[
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\t\n]|    |  )",
    r"\p{N}",
    r"[\p{P}!-/:-@\[-`{-~]",
    GPT2,
];
const GPT4O: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const GRANITE_EMB_MULTI: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const BAILINGMOE: &[&str] = &[
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
];
const SEED_CODER: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const UFAKZEKA: &[&str] =
    &[r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"];
const LAGUNA: &[&str] = &["[^\n]+|[\n]+", QWEN2];
const EXAONE_MOE: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
];
const MINICPM5: &[&str] = &[
    r"\p{N}{1,3}",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
/// llama.cpp's `\d` (std::wregex in the C locale) is ASCII only.
const SUPERBPE: &[&str] = &[r"\p{N}+", r"(?=([0-9]{3})+(?![0-9]))"];
const NEWLINES: &[&str] = &["[^\n]+|[\n]+"];
const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];

/// One family of pre-tokenizers: the names `tokenizer.ggml.pre` gives it,
/// its regexes and what llama.cpp sets with it.
struct Family {
    names: &'static [&'static str],
    regexes: &'static [&'static str],
    /// `clean_up_tokenization_spaces`: detokenised text loses the space
    /// before `?!.,` and some apostrophes.
    clean_spaces: bool,
    /// A pre-tokenized word that is a token is that token, unmerged.
    ignore_merges: bool,
    /// BOS is added unless the file says otherwise.
    add_bos: bool,
    /// The family has no BOS token unless the file names one.
    no_default_bos: bool,
    /// BPE over the byte-level alphabet (GPT-2's); otherwise over raw
    /// UTF-8 with spaces as `▁` and `<0xXX>` byte pieces (Gemma 4).
    byte_level: bool,
    /// Spaces become `▁` before the split (Gemma 4, Sarvam).
    escape_spaces: bool,
    /// A word of newlines only that is a token is that token (Gemma 4).
    whole_newlines: bool,
    /// BOS is added even when the file says not to (llama.cpp's Gemma 4
    /// workaround).
    force_bos: bool,
}

const fn family(names: &'static [&'static str], regexes: &'static [&'static str]) -> Family {
    Family {
        names,
        regexes,
        clean_spaces: true,
        ignore_merges: false,
        add_bos: false,
        no_default_bos: false,
        byte_level: true,
        escape_spaces: false,
        whole_newlines: false,
        force_bos: false,
    }
}

/// BPE over raw UTF-8 with `▁` for spaces, split at newlines only.
const fn spm_style(f: Family) -> Family {
    Family {
        byte_level: false,
        escape_spaces: true,
        ..f
    }
}

const fn keep_spaces(f: Family) -> Family {
    Family {
        clean_spaces: false,
        ..f
    }
}

const fn ignore_merges(f: Family) -> Family {
    Family {
        ignore_merges: true,
        ..f
    }
}

const fn with_bos(f: Family) -> Family {
    Family { add_bos: true, ..f }
}

const fn no_bos(f: Family) -> Family {
    Family {
        no_default_bos: true,
        ..f
    }
}

/// llama.cpp's table (`llama_vocab::impl::load` and `llm_tokenizer_bpe`).
const FAMILIES: &[Family] = &[
    family(&["default"], DEFAULT),
    ignore_merges(family(&["minicpm5"], MINICPM5)),
    with_bos(ignore_merges(family(
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        &[LLAMA3],
    ))),
    family(&["dbrx", "smaug-bpe"], &[LLAMA3]),
    keep_spaces(family(&["deepseek-llm"], DEEPSEEK_LLM)),
    keep_spaces(family(&["deepseek-coder"], DEEPSEEK_CODER)),
    keep_spaces(family(
        &["deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"],
        DEEPSEEK3,
    )),
    keep_spaces(family(&["spark2_5"], SPARK2_5)),
    keep_spaces(ignore_merges(family(&["youtu"], YOUTU))),
    family(&["falcon"], FALCON),
    family(
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
        ],
        &[GPT2],
    ),
    keep_spaces(family(&["trillion", "granite-docling"], &[GPT2])),
    family(&["jais-2"], &[JAIS2]),
    family(
        &[
            "starcoder",
            "refact",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        STARCODER,
    ),
    keep_spaces(family(&["command-r", "smollm"], STARCODER)),
    family(&["stablelm2"], &[QWEN2]),
    keep_spaces(family(
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        &[QWEN2],
    )),
    keep_spaces(family(&["qwen35"], &[QWEN35])),
    keep_spaces(family(&["poro-chat"], BLOOM)),
    family(&["bloom", "gpt3-finnish"], BLOOM),
    no_bos(family(&["chatglm-bpe"], &[LLAMA3])),
    no_bos(ignore_merges(family(&["glm4", "glm5"], &[LLAMA3]))),
    keep_spaces(family(&["viking"], VIKING)),
    keep_spaces(with_bos(ignore_merges(family(&["tekken"], TEKKEN)))),
    keep_spaces(with_bos(family(&["chameleon"], CHAMELEON))),
    keep_spaces(family(
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        GPT4O,
    )),
    keep_spaces(ignore_merges(family(
        &["granite-embed-multi-97m"],
        GRANITE_EMB_MULTI,
    ))),
    keep_spaces(family(
        &["bailingmoe", "bailingmoe2", "llada-moe"],
        BAILINGMOE,
    )),
    keep_spaces(family(&["seed-coder"], SEED_CODER)),
    keep_spaces(family(&["ufakzeka"], UFAKZEKA)),
    keep_spaces(family(&["laguna"], LAGUNA)),
    family(&["exaone-moe"], EXAONE_MOE),
    Family {
        whole_newlines: true,
        force_bos: true,
        ..spm_style(family(&["gemma4", "granite-embed-multi-311m"], NEWLINES))
    },
    keep_spaces(spm_style(family(&["sarvam-moe"], NEWLINES))),
    Family {
        byte_level: false,
        ..family(&["whitespace"], &[r"\S+"])
    },
    keep_spaces(family(&["superbpe"], SUPERBPE)),
];

/// Pre-tokenizers llama.cpp knows that ggraph does not run: llama.cpp
/// splits with hand-written code there that no regex here reproduces
/// (Kimi K2's Han and case rules, AFMoE's and Tiny Aya's digit groups).
const NOT_RUN: &[&str] = &["kimi-k2", "afmoe", "tiny_aya", "cohere2moe"];

/// A named pre-tokenizer with its compiled regexes.
#[derive(Clone, Debug)]
pub struct PreTokenizer {
    /// llama.cpp's name for it, as `tokenizer.ggml.pre` gives it (`llama3`,
    /// `qwen2`, ...).
    pub name: String,
    regexes: Vec<fancy_regex::Regex>,
    pub(crate) clean_spaces: bool,
    pub(crate) ignore_merges: bool,
    pub(crate) add_bos: bool,
    pub(crate) no_default_bos: bool,
    pub(crate) byte_level: bool,
    pub(crate) escape_spaces: bool,
    pub(crate) whole_newlines: bool,
    pub(crate) force_bos: bool,
}

impl PreTokenizer {
    /// The pre-tokenizer `tokenizer.ggml.pre` names.
    pub fn named(name: &str) -> Result<PreTokenizer> {
        let Some(f) = FAMILIES.iter().find(|f| f.names.contains(&name)) else {
            let why = if NOT_RUN.contains(&name) {
                "llama.cpp knows it, ggraph does not run it yet"
            } else {
                "neither llama.cpp 0.3.36 nor ggraph knows it"
            };
            return Err(Error::Unsupported {
                device: "ggraph's tokenizer".into(),
                what: format!("pre-tokenizer '{name}' (tokenizer.ggml.pre): {why}"),
            });
        };
        let regexes = f
            .regexes
            .iter()
            .map(|r| {
                fancy_regex::Regex::new(r)
                    .map_err(|e| Error::InvalidArgument(format!("pre-tokenizer '{name}': {e}")))
            })
            .collect::<Result<_>>()?;
        Ok(PreTokenizer {
            name: name.to_string(),
            regexes,
            clean_spaces: f.clean_spaces,
            ignore_merges: f.ignore_merges,
            add_bos: f.add_bos,
            no_default_bos: f.no_default_bos,
            byte_level: f.byte_level,
            escape_spaces: f.escape_spaces,
            whole_newlines: f.whole_newlines,
            force_bos: f.force_bos,
        })
    }

    /// Every name a vocabulary may give in `tokenizer.ggml.pre` that ggraph
    /// runs.
    pub fn known_names() -> impl Iterator<Item = &'static str> {
        FAMILIES.iter().flat_map(|f| f.names.iter().copied())
    }

    /// `text` cut into words: byte ranges that cover it in order.
    pub fn split(&self, text: &str) -> Result<Vec<std::ops::Range<usize>>> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let mut pieces = Vec::with_capacity(text.len() / 4);
        pieces.push(0..text.len());
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for r in pieces {
                let s = &text[r.clone()];
                let mut done = 0;
                for m in re.find_iter(s) {
                    let m = m.map_err(|e| {
                        Error::InvalidArgument(format!(
                            "pre-tokenizer '{}' gave up on {} bytes of text: {e}",
                            self.name,
                            s.len()
                        ))
                    })?;
                    if m.start() > done {
                        next.push(r.start + done..r.start + m.start());
                    }
                    if m.end() > m.start() {
                        next.push(r.start + m.start()..r.start + m.end());
                    }
                    done = m.end();
                }
                if done < s.len() {
                    next.push(r.start + done..r.end);
                }
            }
            pieces = next;
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::named(pre).unwrap();
        p.split(text)
            .unwrap()
            .into_iter()
            .map(|r| text[r].to_string())
            .collect()
    }

    #[test]
    fn every_family_compiles() {
        for name in PreTokenizer::known_names() {
            PreTokenizer::named(name).unwrap();
        }
    }

    #[test]
    fn gpt2_keeps_one_space_before_a_word() {
        assert_eq!(
            words("gpt-2", "Hello  world's 123"),
            ["Hello", " ", " world", "'s", " 123"]
        );
        assert_eq!(words("gpt-2", "a \n"), ["a", " \n"]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_newlines_apart() {
        assert_eq!(
            words("llama3", "12345 x\n\ny"),
            ["123", "45", " x", "\n\n", "y"]
        );
        assert_eq!(words("llama3", "I'LL"), ["I", "'LL"]);
    }

    #[test]
    fn unknown_and_unsupported_names_are_errors() {
        let e = PreTokenizer::named("kimi-k2").err().unwrap().to_string();
        assert!(
            e.contains("kimi-k2") && e.contains("llama.cpp knows it"),
            "{e}"
        );
        let e = PreTokenizer::named("nonsense").err().unwrap().to_string();
        assert!(e.contains("nonsense"), "{e}");
    }
}
