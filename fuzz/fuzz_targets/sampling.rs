//! Sampling on arbitrary input: the first byte picks what the rest is.
//!
//! * a GBNF grammar: converted (ggraph's converter) and compiled by
//!   llguidance over a small vocabulary, then a few tokens checked and
//!   taken; a grammar that does not parse is an error, never a panic;
//! * a JSON schema, the same way;
//! * sampling parameters and logits (every float bit pattern, NaNs and
//!   infinities included): a chain that accepts its parameters always
//!   chooses a token of the vocabulary or says why not.
//!
//!     scripts/fuzz 600 sampling
#![no_main]

use std::sync::OnceLock;

use ggraph_model::make::{make_vocab, vocab_header};
use ggraph_model::sampling::{
    Candidates, Constraint, GrammarSource, GrammarVocab, SamplerType, SamplingParams, TokenSampler,
};
use ggraph_model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

const N_VOCAB: usize = 300;

fn vocab() -> &'static (Tokenizer, GrammarVocab) {
    static V: OnceLock<(Tokenizer, GrammarVocab)> = OnceLock::new();
    V.get_or_init(|| {
        let header = vocab_header(make_vocab(N_VOCAB)).unwrap();
        let t = Tokenizer::from_header(&header).unwrap();
        let g = GrammarVocab::new(&t).unwrap();
        (t, g)
    })
}

fn grammar(source: GrammarSource, steps: &[u8]) {
    let (_, vocab) = vocab();
    let Ok(mut g) = vocab.compile(&source) else {
        return;
    };
    for &b in steps.iter().take(8) {
        let mut c = Candidates::from_logits(&[0.0; N_VOCAB]);
        if g.apply(&mut c).is_err() {
            return;
        }
        let allowed: Vec<i32> = c
            .data
            .iter()
            .filter(|t| t.logit == 0.0)
            .map(|t| t.id)
            .collect();
        let Some(&id) = allowed.get(b as usize % allowed.len().max(1)) else {
            return;
        };
        if g.accept(id).is_err() {
            return;
        }
    }
}

fn sampling(data: &[u8]) {
    let (t, _) = vocab();
    if data.len() < 16 {
        return;
    }
    let f = |i: usize| f32::from_le_bytes(data[i..i + 4].try_into().unwrap_or([0; 4]));
    let order: Vec<SamplerType> = data[12..16]
        .iter()
        .map(|b| SamplerType::ALL[*b as usize % SamplerType::ALL.len()].0)
        .collect();
    let p = SamplingParams {
        seed: data[0] as u32,
        temp: f(0),
        top_k: data[1] as i32 % 50,
        top_p: (data[2] as f32 / 255.0),
        min_p: (data[3] as f32 / 255.0),
        typ_p: (data[4] as f32 / 255.0),
        xtc_probability: (data[5] as f32 / 255.0),
        xtc_threshold: (data[6] as f32 / 510.0),
        mirostat: data[7] % 3,
        penalty_repeat: 1.0 + data[8] as f32 / 100.0,
        dry_multiplier: data[9] as f32 / 100.0,
        top_n_sigma: data[10] as f32 / 50.0 - 1.0,
        dynatemp_range: data[11] as f32 / 100.0,
        samplers: order,
        ..SamplingParams::default()
    };
    let Ok(chain) = p.chain(N_VOCAB, Some(t)) else {
        return;
    };
    let mut s = TokenSampler::new(chain);
    let logits: Vec<f32> = data[16..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .chain(std::iter::repeat(0.5))
        .take(N_VOCAB)
        .collect();
    for _ in 0..3 {
        match s.sample(&logits) {
            Ok(id) => {
                assert!(
                    (0..N_VOCAB as i32).contains(&id),
                    "token {id} outside the vocabulary"
                );
                let _ = s.accept(id, true);
            }
            Err(_) => return,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => {
            let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            if let Ok(text) = std::str::from_utf8(&rest[..split]) {
                grammar(GrammarSource::Gbnf(text.to_string()), &rest[split..]);
            }
        }
        1 => {
            let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            if let Ok(schema) = ggraph_model::serde_json::from_slice(&rest[..split]) {
                grammar(GrammarSource::JsonSchema(schema), &rest[split..]);
            }
        }
        _ => sampling(rest),
    }
});
