//! A GGUF vocabulary as llama.cpp reads it (`llama-vocab.cpp`, `load`):
//! the pieces with their scores and attributes, the BPE merges, the
//! special tokens (read, defaulted and found by their text) and the flags
//! that steer tokenisation (BOS/EOS, space prefix, space cleaning).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use ggraph_core::error::{Error, Result};

use super::pretokenize::PreTokenizer;
use super::text_index::TextIndex;
use crate::gguf::{ArrayValues, GgufHeader};

/// The hash of a pair of token ids: a multiply per id (FxHash's), as
/// the merge table is looked up for every pair of adjacent symbols.
#[derive(Default)]
pub(crate) struct PairHasher(u64);

impl Hasher for PairHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(b as u64);
        }
    }

    fn write_i32(&mut self, i: i32) {
        self.add(i as u32 as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl PairHasher {
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A token's attributes (llama.cpp's `llama_token_attr` bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenAttr(u16);

impl TokenAttr {
    /// No attribute: a `tokenizer.ggml.token_type` llama.cpp does not know.
    pub const UNDEFINED: TokenAttr = TokenAttr(0);
    /// The unknown token, `<unk>` (`token_type` 2).
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 0);
    /// A reserved token (`token_type` 5, or a control token whose text
    /// says `unused`).
    pub const UNUSED: TokenAttr = TokenAttr(1 << 1);
    /// An ordinary piece (`token_type` 1, and the default without types).
    pub const NORMAL: TokenAttr = TokenAttr(1 << 2);
    /// A control token: BOS, EOS, chat markers (`token_type` 3); found in
    /// text only with `parse_special`.
    pub const CONTROL: TokenAttr = TokenAttr(1 << 3);
    /// A token the model's authors added (`token_type` 4); always found in
    /// text as a whole.
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 4);
    /// A byte piece `<0xXX>` of a SentencePiece vocabulary (`token_type` 6).
    pub const BYTE: TokenAttr = TokenAttr(1 << 5);
    /// Found in text, the token swallows the whitespace before it.
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 7);
    /// Found in text, the token swallows the whitespace after it.
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 8);

    /// The attribute of a `tokenizer.ggml.token_type` value.
    fn of_token_type(t: i32) -> TokenAttr {
        match t {
            1 => TokenAttr::NORMAL,
            2 => TokenAttr::UNKNOWN,
            3 => TokenAttr::CONTROL,
            4 => TokenAttr::USER_DEFINED,
            5 => TokenAttr::UNUSED,
            6 => TokenAttr::BYTE,
            _ => TokenAttr::UNDEFINED,
        }
    }

    /// Whether any bit of `other` is set.
    pub fn has(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }

    /// These attributes and those of `other`.
    pub fn with(self, other: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 | other.0)
    }

    /// These attributes less those of `other`.
    pub fn without(self, other: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 & !other.0)
    }
}

/// BERT's normaliser options (`tokenizer.ggml.normalizer.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WpmOptions {
    /// Letters lowercased (`lowercase`, true when absent).
    pub lowercase: bool,
    /// Accents stripped: each character decomposed (its first NFD
    /// character kept) and marks dropped (`strip_accents`, else as
    /// `lowercase`).
    pub strip_accents: bool,
}

/// SentencePiece's unigram options read from the header: the
/// normaliser's character map (`tokenizer.ggml.precompiled_charsmap`,
/// checked and split into its XOR-compressed double array and the
/// replacement strings after it) and its space rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UgmOptions {
    /// The map's XCDA entries (empty: no normalisation beyond spaces).
    pub xcda: Vec<u32>,
    /// The NUL-terminated replacements the entries point into.
    pub replacements: Vec<u8>,
    /// Runs of spaces become one (`tokenizer.ggml.remove_extra_whitespaces`).
    pub remove_extra_whitespaces: bool,
}

impl UgmOptions {
    /// The options of a character map as the file holds it: its array's
    /// byte size, the array, the strings; sizes that do not fit are an
    /// error.
    fn from_charsmap(map: &[u8], remove_extra_whitespaces: bool) -> Result<UgmOptions> {
        let key = "'tokenizer.ggml.precompiled_charsmap'";
        let mut opts = UgmOptions {
            remove_extra_whitespaces,
            ..UgmOptions::default()
        };
        if map.is_empty() {
            return Ok(opts);
        }
        let size = map
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| vocab_error(format!("{key} is shorter than its size")))?;
        if size.saturating_add(4) >= map.len() || size % 4 != 0 {
            return Err(vocab_error(format!(
                "{key}: an array of {size} bytes does not fit its {} bytes",
                map.len()
            )));
        }
        opts.xcda = map[4..4 + size]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        opts.replacements = map[4 + size..].to_vec();
        Ok(opts)
    }
}

/// How text becomes pieces.
#[derive(Clone, Debug)]
pub enum VocabKind {
    /// SentencePiece (`tokenizer.ggml.model = llama`): merges by piece score,
    /// spaces as `▁`, bytes as `<0xXX>` pieces.
    Spm,
    /// GPT-2 byte-level BPE (`gpt2`): a pre-tokenizer split, bytes mapped to
    /// printable characters, merges by rank.
    Bpe(PreTokenizer),
    /// WordPiece (`bert`): BERT's normaliser, the longest pieces of each
    /// word.
    Wpm(WpmOptions),
    /// SentencePiece's unigram model (`t5`): the file's character map,
    /// the best-scoring split.
    Ugm(UgmOptions),
}

#[derive(Clone, Debug)]
pub(crate) struct TokenData {
    pub text: String,
    pub score: f32,
    pub attr: TokenAttr,
}

impl AsRef<str> for TokenData {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

/// The special tokens a vocabulary names (absent ones are `None`): read
/// from `tokenizer.ggml.*_token_id`, else the vocabulary type's defaults;
/// EOT, EOM and the fill-in-the-middle tokens also found by their text, as
/// llama.cpp finds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence (`tokenizer.ggml.bos_token_id`).
    pub bos: Option<i32>,
    /// End of sequence (`eos_token_id`).
    pub eos: Option<i32>,
    /// End of turn (`eot_token_id`, or a text such as `<|eot_id|>` or
    /// `<|im_end|>`).
    pub eot: Option<i32>,
    /// End of message, llama 3's `<|eom_id|>` (`eom_token_id`).
    pub eom: Option<i32>,
    /// The unknown token (`unknown_token_id`).
    pub unk: Option<i32>,
    /// Separator (`seperator_token_id`, as GGUF spells it).
    pub sep: Option<i32>,
    /// Padding (`padding_token_id`).
    pub pad: Option<i32>,
    /// Mask, for masked-language models (`mask_token_id`).
    pub mask: Option<i32>,
    /// Fill-in-the-middle prefix (`fim_pre_token_id` or `prefix_token_id`).
    pub fim_pre: Option<i32>,
    /// Fill-in-the-middle suffix (`fim_suf_token_id` or `suffix_token_id`).
    pub fim_suf: Option<i32>,
    /// Fill-in-the-middle middle (`fim_mid_token_id` or `middle_token_id`).
    pub fim_mid: Option<i32>,
    /// Fill-in-the-middle padding (`fim_pad_token_id`); ends generation.
    pub fim_pad: Option<i32>,
    /// Fill-in-the-middle repository name (`fim_rep_token_id`); ends
    /// generation.
    pub fim_rep: Option<i32>,
    /// Fill-in-the-middle file separator (`fim_sep_token_id`); ends
    /// generation.
    pub fim_sep: Option<i32>,
}

/// A vocabulary, ready to tokenise with.
#[derive(Clone, Debug)]
pub struct Vocab {
    pub(crate) kind: VocabKind,
    pub(crate) tokens: Vec<TokenData>,
    /// Piece text to id; for a text that appears twice, the later id (as
    /// llama.cpp's map keeps it).
    index: TextIndex,
    /// BPE: (left id, right id) to (rank, id of the merged piece or -1).
    pub(crate) merges: HashMap<(i32, i32), (u32, i32), BuildHasherDefault<PairHasher>>,
    /// The special tokens' ids, read from the file, defaulted or found by
    /// their text.
    pub special: SpecialTokens,
    /// Tokens that end generation.
    pub(crate) eog: HashSet<i32>,
    /// Encoding with `add_special` puts BOS first
    /// (`tokenizer.ggml.add_bos_token`, else the vocabulary type's default).
    pub add_bos: bool,
    /// Encoding with `add_special` puts EOS last
    /// (`tokenizer.ggml.add_eos_token`; false by default).
    pub add_eos: bool,
    /// Encoding with `add_special` puts the separator last (WordPiece's
    /// `[SEP]`).
    pub add_sep: bool,
    /// The longest piece's bytes.
    max_token_len: usize,
    pub(crate) add_space_prefix: bool,
    pub(crate) clean_spaces: bool,
    pub(crate) ignore_merges: bool,
    /// Control, user-defined and unknown tokens, longest text first: the
    /// order in which text is searched for them.
    pub(crate) special_order: Vec<i32>,
}

/// Token texts llama.cpp takes as end of turn when the file names none
/// (`load`'s auto-detection), in the order it prefers them here.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Token texts that end generation whatever the file says.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

type Slot = fn(&mut SpecialTokens) -> &mut Option<i32>;

/// The `tokenizer.ggml.*` keys of special tokens and where each goes (the
/// deprecated prefix/suffix/middle keys after the fim ones, as llama.cpp
/// reads them).
const SPECIAL_KEYS: [(&str, Slot); 17] = [
    ("bos_token_id", |s| &mut s.bos),
    ("eos_token_id", |s| &mut s.eos),
    ("eot_token_id", |s| &mut s.eot),
    ("eom_token_id", |s| &mut s.eom),
    ("unknown_token_id", |s| &mut s.unk),
    ("seperator_token_id", |s| &mut s.sep),
    ("padding_token_id", |s| &mut s.pad),
    ("mask_token_id", |s| &mut s.mask),
    ("fim_pre_token_id", |s| &mut s.fim_pre),
    ("fim_suf_token_id", |s| &mut s.fim_suf),
    ("fim_mid_token_id", |s| &mut s.fim_mid),
    ("fim_pad_token_id", |s| &mut s.fim_pad),
    ("fim_rep_token_id", |s| &mut s.fim_rep),
    ("fim_sep_token_id", |s| &mut s.fim_sep),
    ("prefix_token_id", |s| &mut s.fim_pre),
    ("suffix_token_id", |s| &mut s.fim_suf),
    ("middle_token_id", |s| &mut s.fim_mid),
];

fn vocab_error(msg: impl Into<String>) -> Error {
    Error::Format {
        file: "GGUF vocabulary".into(),
        msg: msg.into(),
    }
}

/// What a header says about the vocabulary, before the pieces.
struct Flags {
    kind: VocabKind,
    special: SpecialTokens,
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    ignore_merges: bool,
}

fn flags_of(model: &str, pre: Option<&str>) -> Result<Flags> {
    match model {
        "llama" => Ok(Flags {
            kind: VocabKind::Spm,
            special: SpecialTokens {
                bos: Some(1),
                eos: Some(2),
                unk: Some(0),
                ..SpecialTokens::default()
            },
            add_bos: true,
            add_eos: false,
            add_sep: false,
            add_space_prefix: true,
            clean_spaces: false,
            ignore_merges: false,
        }),
        // llama.cpp's defaults for BERT vocabularies: [CLS] first, [SEP]
        // last; the normaliser's options come from the header
        // llama.cpp's defaults for unigram vocabularies: EOS last, no BOS
        "t5" => Ok(Flags {
            kind: VocabKind::Ugm(UgmOptions::default()),
            special: SpecialTokens {
                eos: Some(1),
                unk: Some(2),
                pad: Some(0),
                ..SpecialTokens::default()
            },
            add_bos: false,
            add_eos: true,
            add_sep: false,
            add_space_prefix: false,
            clean_spaces: false,
            ignore_merges: false,
        }),
        "bert" => Ok(Flags {
            kind: VocabKind::Wpm(WpmOptions {
                lowercase: false,
                strip_accents: false,
            }),
            special: SpecialTokens {
                bos: Some(101),
                unk: Some(100),
                sep: Some(102),
                pad: Some(0),
                mask: Some(103),
                ..SpecialTokens::default()
            },
            add_bos: true,
            add_eos: false,
            add_sep: true,
            add_space_prefix: false,
            clean_spaces: true,
            ignore_merges: false,
        }),
        "gpt2" => {
            let pre_name = pre.unwrap_or("default");
            let pre = PreTokenizer::named(pre_name)?;
            let mut special = SpecialTokens {
                bos: Some(11),
                eos: Some(11),
                ..SpecialTokens::default()
            };
            if pre.no_default_bos {
                special.bos = None;
            }
            Ok(Flags {
                add_bos: pre.add_bos,
                add_eos: false,
                add_sep: false,
                add_space_prefix: false,
                clean_spaces: pre.clean_spaces,
                ignore_merges: pre.ignore_merges,
                kind: VocabKind::Bpe(pre),
                special,
            })
        }
        "gemma4" => {
            let pre = PreTokenizer::named("gemma4")?;
            Ok(Flags {
                add_bos: pre.add_bos,
                add_eos: false,
                add_sep: false,
                add_space_prefix: false,
                clean_spaces: pre.clean_spaces,
                ignore_merges: pre.ignore_merges,
                kind: VocabKind::Bpe(pre),
                special: SpecialTokens::default(),
            })
        }
        other => Err(Error::Unsupported {
            device: "ggraph's tokenizer".into(),
            what: format!(
                "'{other}' vocabularies (tokenizer.ggml.model): ggraph tokenises 'llama' (SentencePiece), 'gpt2' (BPE), 'gemma4', 'bert' (WordPiece) and 't5' (unigram) vocabularies; give the prompt as token ids"
            ),
        }),
    }
}

/// A per-token array, when present, must have a value for every token.
fn one_per_token(key: &str, len: Option<usize>, n: usize) -> Result<()> {
    match len {
        Some(len) if len < n => Err(vocab_error(format!(
            "'{key}' has {len} values for {n} tokens"
        ))),
        _ => Ok(()),
    }
}

/// An optional key of the wrong type counts as absent, as llama.cpp's
/// optional getters treat it (after a warning there).
fn opt_bool(h: &GgufHeader, key: &str) -> Option<bool> {
    h.opt_bool(key).ok().flatten()
}

impl Vocab {
    /// The vocabulary of a GGUF header. Errors name what is missing or of
    /// the wrong type; a vocabulary kind or pre-tokenizer ggraph does not
    /// know is an error, not a guess.
    pub fn from_header(h: &GgufHeader) -> Result<Vocab> {
        let model = h.opt_str("tokenizer.ggml.model")?.ok_or_else(|| {
            vocab_error("'tokenizer.ggml.model' is missing: the file has no vocabulary")
        })?;
        let pre = h.opt_str("tokenizer.ggml.pre")?;
        let mut flags = flags_of(model, pre)?;
        let texts = match h.opt_array("tokenizer.ggml.tokens")? {
            None => return Err(vocab_error("'tokenizer.ggml.tokens' is missing")),
            Some(a) => match a.values() {
                Some(ArrayValues::String(v)) => v.clone(),
                Some(_) => {
                    return Err(vocab_error(format!(
                        "'tokenizer.ggml.tokens' has type {}, expected array[string]",
                        a.type_name()
                    )));
                }
                None => {
                    return Err(vocab_error(
                        "'tokenizer.ggml.tokens' was not read (a header prefix): open the whole file",
                    ));
                }
            },
        };
        let n = texts.len();
        let scores: Option<Vec<f32>> = match h.opt_array("tokenizer.ggml.scores")? {
            None => None,
            Some(a) => match a.values() {
                Some(ArrayValues::F32(v)) => Some(v.clone()),
                Some(ArrayValues::I32(v)) => Some(v.iter().map(|&x| x as f32).collect()),
                _ => {
                    return Err(vocab_error(format!(
                        "'tokenizer.ggml.scores' has type {}, expected array[float32] or array[int32]",
                        a.type_name()
                    )));
                }
            },
        };
        one_per_token("tokenizer.ggml.scores", scores.as_ref().map(Vec::len), n)?;
        let types: Option<&[i32]> = match h.opt_array("tokenizer.ggml.token_type")? {
            None => None,
            Some(a) => match a.values() {
                Some(ArrayValues::I32(v)) => Some(v),
                _ => {
                    return Err(vocab_error(format!(
                        "'tokenizer.ggml.token_type' has type {}, expected array[int32]",
                        a.type_name()
                    )));
                }
            },
        };
        one_per_token("tokenizer.ggml.token_type", types.map(<[i32]>::len), n)?;
        let merges: &[String] = match (&flags.kind, h.opt_array("tokenizer.ggml.merges")?) {
            (VocabKind::Spm | VocabKind::Wpm(_) | VocabKind::Ugm(_), _) => &[],
            (VocabKind::Bpe(_), None) => {
                return Err(vocab_error(
                    "a BPE vocabulary without 'tokenizer.ggml.merges'",
                ));
            }
            (VocabKind::Bpe(_), Some(a)) => match a.values() {
                Some(ArrayValues::String(v)) => v,
                _ => {
                    return Err(vocab_error(format!(
                        "'tokenizer.ggml.merges' has type {}, expected array[string]",
                        a.type_name()
                    )));
                }
            },
        };
        if let Some(p) = opt_bool(h, "tokenizer.ggml.add_space_prefix") {
            flags.add_space_prefix = p;
        }
        if let VocabKind::Ugm(opts) = &mut flags.kind {
            let key = "tokenizer.ggml.precompiled_charsmap";
            let map = match h.opt_array(key)? {
                None => Vec::new(),
                Some(a) => match a.values() {
                    Some(ArrayValues::U8(v)) => v.clone(),
                    Some(ArrayValues::I8(v)) => v.iter().map(|&b| b as u8).collect(),
                    _ => {
                        return Err(vocab_error(format!(
                            "'{key}' has type {}, expected array[uint8] or array[int8]",
                            a.type_name()
                        )));
                    }
                },
            };
            let remove = opt_bool(h, "tokenizer.ggml.remove_extra_whitespaces").unwrap_or(false);
            *opts = UgmOptions::from_charsmap(&map, remove)?;
        }
        if let VocabKind::Wpm(opts) = &mut flags.kind {
            // BERT's normaliser: letters lowercased and accents stripped
            // where letters are, unless the file says otherwise
            opts.lowercase = opt_bool(h, "tokenizer.ggml.normalizer.lowercase").unwrap_or(true);
            opts.strip_accents =
                opt_bool(h, "tokenizer.ggml.normalizer.strip_accents").unwrap_or(opts.lowercase);
        }
        let tokens: Vec<TokenData> = texts
            .into_iter()
            .enumerate()
            .map(|(i, text)| TokenData {
                text: if text.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    text
                },
                score: scores.as_ref().map_or(0.0, |s| s[i]),
                attr: types
                    .as_ref()
                    .map_or(TokenAttr::NORMAL, |t| TokenAttr::of_token_type(t[i])),
            })
            .collect();

        let mut special = flags.special.clone();
        for (key, slot) in SPECIAL_KEYS {
            let id = slot(&mut special);
            if id.is_some_and(|i| i as usize >= n) {
                *id = None;
            }
            // an id outside the vocabulary keeps the default, as in llama.cpp
            if let Ok(Some(v)) = h.opt_u32(&format!("tokenizer.ggml.{key}"))
                && (v as usize) < n
            {
                *id = Some(v as i32);
            }
        }
        let mut add_bos = flags.add_bos;
        let mut add_eos = flags.add_eos;
        if let Some(b) = opt_bool(h, "tokenizer.ggml.add_bos_token") {
            add_bos = b;
        }
        if let Some(b) = opt_bool(h, "tokenizer.ggml.add_eos_token") {
            add_eos = b;
        }
        if let VocabKind::Bpe(pre) = &flags.kind
            && pre.force_bos
        {
            add_bos = true;
        }
        let name = h
            .opt_str("general.name")
            .ok()
            .flatten()
            .unwrap_or("")
            .to_lowercase();
        let mut v = Vocab::assemble(tokens, merges, flags, special, add_bos, add_eos)?;
        if name.contains("phi-3") || name.contains("phi3") {
            v.strip_spaces_after_specials();
        }
        Ok(v)
    }

    /// A vocabulary from its parts: pieces, BPE merges (`"left right"`),
    /// and what the header would say. Used by [`Vocab::from_header`] and
    /// by tests that build small vocabularies.
    fn assemble(
        tokens: Vec<TokenData>,
        merges: &[String],
        flags: Flags,
        special: SpecialTokens,
        add_bos: bool,
        add_eos: bool,
    ) -> Result<Vocab> {
        if tokens.is_empty() {
            return Err(vocab_error("an empty vocabulary"));
        }
        if i32::try_from(tokens.len()).is_err() {
            return Err(vocab_error(format!(
                "{} tokens: more than ids can name",
                tokens.len()
            )));
        }
        if add_bos && special.bos.is_none() {
            return Err(vocab_error(
                "the vocabulary asks for a BOS token (add_bos_token) but names none",
            ));
        }
        if add_eos && special.eos.is_none() {
            return Err(vocab_error(
                "the vocabulary asks for an EOS token (add_eos_token) but names none",
            ));
        }
        let index = TextIndex::new(&tokens);
        let id_of = |parts: &[&[u8]]| index.find(&tokens, parts);
        let mut merge_ranks = HashMap::with_capacity_and_hasher(merges.len(), Default::default());
        for (rank, m) in merges.iter().enumerate() {
            // split at the first space after the first byte, as llama.cpp
            // does; a merge with no space pairs two empty texts
            let space = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
            let (left, right) = match space {
                Some(p) => (&m[..p], &m[p + 1..]),
                None => ("", ""),
            };
            let (left, right) = (left.as_bytes(), right.as_bytes());
            let (Some(l), Some(r)) = (id_of(&[left]), id_of(&[right])) else {
                // a merge of texts that are no tokens can never apply to
                // pieces that are
                continue;
            };
            let merged = id_of(&[left, right]).unwrap_or(-1);
            merge_ranks.entry((l, r)).or_insert((rank as u32, merged));
        }
        let max_token_len = tokens.iter().map(|t| t.text.len()).max().unwrap_or(0);
        if flags.add_sep && special.sep.is_none() {
            return Err(vocab_error(
                "the vocabulary adds a separator token but names none",
            ));
        }
        let mut v = Vocab {
            kind: flags.kind,
            tokens,
            index,
            merges: merge_ranks,
            special,
            eog: HashSet::new(),
            add_bos,
            add_eos,
            add_sep: flags.add_sep,
            max_token_len,
            add_space_prefix: flags.add_space_prefix,
            clean_spaces: flags.clean_spaces,
            ignore_merges: flags.ignore_merges,
            special_order: Vec::new(),
        };
        v.find_specials_by_text();
        v.special_order = (0..v.tokens.len() as i32)
            .filter(|&i| {
                v.attr(i).has(
                    TokenAttr::CONTROL
                        .with(TokenAttr::USER_DEFINED)
                        .with(TokenAttr::UNKNOWN),
                )
            })
            .collect();
        v.special_order
            .sort_by_key(|&i| std::cmp::Reverse(v.tokens[i as usize].text.len()));
        Ok(v)
    }

    /// llama.cpp's auto-detection: end-of-turn and fill-in-the-middle
    /// tokens by their text, the end-of-generation set, tokens that must be
    /// control tokens whatever their type says.
    fn find_specials_by_text(&mut self) {
        let by_text: [(Slot, &[&str]); 8] = [
            (|s| &mut s.eot, EOT_TEXTS),
            (|s| &mut s.eom, &["<|eom_id|>"]),
            (|s| &mut s.fim_pre, FIM_PRE_TEXTS),
            (|s| &mut s.fim_suf, FIM_SUF_TEXTS),
            (|s| &mut s.fim_mid, FIM_MID_TEXTS),
            (|s| &mut s.fim_pad, FIM_PAD_TEXTS),
            (|s| &mut s.fim_rep, FIM_REP_TEXTS),
            (|s| &mut s.fim_sep, FIM_SEP_TEXTS),
        ];
        let mut make_control = Vec::new();
        for (slot, texts) in by_text {
            if slot(&mut self.special).is_none()
                && let Some(id) = texts.iter().find_map(|t| self.id_of(t))
            {
                *slot(&mut self.special) = Some(id);
                make_control.push(id);
            }
        }
        for id in make_control {
            self.set_attr(id, self.attr(id).with(TokenAttr::CONTROL));
        }
        // control tokens with "unused" in their text are unused
        for i in 0..self.tokens.len() {
            let t = &mut self.tokens[i];
            if t.attr.has(TokenAttr::CONTROL) && t.text.contains("unused") {
                t.attr = t.attr.with(TokenAttr::UNUSED);
            }
        }
        let mut eog: HashSet<i32> = [
            self.special.fim_pad,
            self.special.fim_rep,
            self.special.fim_sep,
        ]
        .into_iter()
        .flatten()
        .collect();
        for text in EOG_TEXTS {
            if let Some(id) = self.id_of(text) {
                eog.insert(id);
                self.set_attr(id, self.attr(id).with(TokenAttr::CONTROL));
            }
        }
        for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.id_of(text) {
                self.set_attr(id, TokenAttr::USER_DEFINED);
            }
        }
        eog.extend(
            [self.special.eos, self.special.eot, self.special.eom]
                .into_iter()
                .flatten(),
        );
        // o200k_harmony and solar-open: "<|end|>" ends a message, not the
        // generation
        let has = |t: &str| self.id_of(t).is_some_and(|id| eog.contains(&id));
        let (ret, call, flush) = (
            has("<|return|>"),
            has("<|call|>") || has("<|calls|>"),
            has("<|flush|>"),
        );
        let normal_s = has("<|tool_response>") || has("<|plamo:eos|>");
        if let Some(end) = self.id_of("<|end|>")
            && eog.contains(&end)
            && call
            && (ret || flush)
        {
            eog.remove(&end);
            self.set_attr(end, TokenAttr::USER_DEFINED);
        }
        if let Some(s) = self.id_of("</s>")
            && normal_s
            && eog.remove(&s)
        {
            self.set_attr(s, TokenAttr::NORMAL);
        }
        self.eog = eog;
    }

    /// Phi-3's special tokens swallow the whitespace after them (llama.cpp
    /// sets this by model name).
    fn strip_spaces_after_specials(&mut self) {
        for i in self.special_order.clone() {
            self.set_attr(i, self.attr(i).with(TokenAttr::RSTRIP));
        }
        if let Some(id) = self.id_of("</s>") {
            self.set_attr(id, self.attr(id).with(TokenAttr::RSTRIP));
        }
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            if let Some(id) = self.id_of(t) {
                self.set_attr(id, self.attr(id).without(TokenAttr::RSTRIP));
            }
        }
    }

    fn set_attr(&mut self, id: i32, attr: TokenAttr) {
        self.tokens[id as usize].attr = attr;
    }

    pub(crate) fn attr(&self, id: i32) -> TokenAttr {
        self.tokens[id as usize].attr
    }

    /// SentencePiece or byte-level BPE, with its pre-tokenizer.
    pub fn kind(&self) -> &VocabKind {
        &self.kind
    }

    /// Whether decoding cleans spaces before punctuation and in
    /// contractions (HF's `clean_up_tokenization_spaces`): then text does
    /// not always read back from its ids.
    pub fn cleans_spaces(&self) -> bool {
        self.clean_spaces
    }

    /// A piece's score (0 for an id outside the vocabulary).
    pub(crate) fn score(&self, id: i32) -> f32 {
        self.tokens.get(id as usize).map_or(0.0, |t| t.score)
    }

    /// The bytes of the longest piece.
    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }

    /// Tokens in the vocabulary: ids are `0..n_tokens`.
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// The id of a piece's text.
    pub fn id_of(&self, text: &str) -> Option<i32> {
        self.index.find(&self.tokens, &[text.as_bytes()])
    }

    /// A token's text as the vocabulary stores it (`None` outside it).
    pub fn text_of(&self, id: i32) -> Option<&str> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.tokens.get(i))
            .map(|t| t.text.as_str())
    }

    /// Whether `id` ends generation (EOS, EOT, EOM and the texts llama.cpp
    /// knows as such).
    pub fn is_eog(&self, id: i32) -> bool {
        self.eog.contains(&id)
    }

    /// Whether a token is a control token (BOS, EOS, chat markers...).
    pub fn is_control(&self, id: i32) -> bool {
        self.in_range(id) && self.attr(id).has(TokenAttr::CONTROL)
    }

    pub(crate) fn in_range(&self, id: i32) -> bool {
        usize::try_from(id).is_ok_and(|i| i < self.tokens.len())
    }

    /// The id of a single byte as a piece: `<0xXX>`, else the byte itself
    /// as text (llama.cpp's `byte_to_token`).
    pub(crate) fn byte_token(&self, b: u8) -> Option<i32> {
        self.id_of(&format!("<0x{b:02X}>")).or_else(|| {
            if b.is_ascii() {
                self.id_of(std::str::from_utf8(&[b]).ok()?)
            } else {
                None
            }
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A vocabulary of these pieces (types from `<0xXX>` and `<...>`
    /// shapes), scored so that earlier pieces win.
    pub(crate) fn spm_vocab(pieces: &[&str]) -> Vocab {
        let tokens = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| TokenData {
                text: p.to_string(),
                score: -(i as f32),
                attr: if p.starts_with("<0x") {
                    TokenAttr::BYTE
                } else if p.starts_with('<') && p.ends_with('>') && p.len() > 2 {
                    TokenAttr::CONTROL
                } else {
                    TokenAttr::NORMAL
                },
            })
            .collect();
        let flags = flags_of("llama", None).unwrap();
        let special = flags.special.clone();
        Vocab::assemble(tokens, &[], flags, special, true, false).unwrap()
    }

    #[test]
    fn eog_tokens_are_found_by_text_and_made_control() {
        let v = spm_vocab(&["<unk>", "<s>", "</s>", "a", "<|im_end|>"]);
        assert!(v.is_eog(2), "EOS");
        assert!(v.is_eog(4), "<|im_end|> by its text");
        assert_eq!(v.special.eot, Some(4));
        assert!(!v.is_eog(3));
    }

    #[test]
    fn a_character_map_that_does_not_fit_is_an_error() {
        for map in [
            vec![8u8, 0, 0],
            vec![255, 0, 0, 0, 1, 2],
            vec![4, 0, 0, 0, 1, 2, 3],
        ] {
            let e = UgmOptions::from_charsmap(&map, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains("precompiled_charsmap"), "{e}");
        }
        let ok = UgmOptions::from_charsmap(&[4, 0, 0, 0, 1, 2, 3, 4, b'a', 0], false).unwrap();
        assert_eq!(
            (ok.xcda, ok.replacements),
            (vec![0x0403_0201], b"a\0".to_vec())
        );
    }

    #[test]
    fn unknown_kinds_and_pre_tokenizers_are_refused() {
        let e = flags_of("rwkv", None).err().unwrap().to_string();
        assert!(e.contains("'rwkv'"), "{e}");
        let e = flags_of("gpt2", Some("no-such-pre"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no-such-pre"), "{e}");
    }
}
