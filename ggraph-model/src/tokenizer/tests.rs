//! The tokenizer on small vocabularies; the byte-exact checks against
//! llama.cpp are tests/tokenizer_fixtures.rs.

use super::*;
use crate::make::{make_vocab, vocab_header};

fn random_model_tokenizer() -> Tokenizer {
    Tokenizer::from_header(&vocab_header(make_vocab(512)).unwrap()).unwrap()
}

#[test]
fn spm_text_round_trips_with_bos_and_a_space_prefix() {
    let t = random_model_tokenizer();
    for text in [
        "hello world",
        "the graph model is in the world",
        "Zebra & π!\n\tend",
    ] {
        let ids = t.encode(text, true, true).unwrap();
        assert_eq!(ids[0], 1, "BOS first");
        assert_eq!(t.decode(&ids[1..], false, false).unwrap(), text);
        // after a BOS, llama.cpp keeps the prefix space
        assert_eq!(t.decode(&ids, true, false).unwrap(), format!(" {text}"));
    }
}

#[test]
fn spm_merges_by_score_into_whole_pieces() {
    let t = random_model_tokenizer();
    let v = t.vocab();
    // ▁i + n make ▁in; ▁t + h make no piece, so ▁the is out of reach
    let ids = t.encode("in", false, false).unwrap();
    assert_eq!(ids, vec![v.id_of("▁in").unwrap()]);
    let ids = t.encode("the", false, false).unwrap();
    let pieces: Vec<&str> = ids.iter().map(|&i| v.text_of(i).unwrap()).collect();
    assert_eq!(pieces, ["▁t", "h", "e"]);
    // a character no piece covers falls back to its bytes
    let ids = t.encode("π", false, false).unwrap();
    let bytes: Vec<i32> = "▁π"
        .bytes()
        .skip(3)
        .map(|b| v.id_of(&format!("<0x{b:02X}>")).unwrap())
        .collect();
    assert_eq!(&ids[1..], &bytes[..]);
}

#[test]
fn control_tokens_in_text_are_tokens_only_when_asked() {
    let t = random_model_tokenizer();
    let with = t.encode("a</s>b", false, true).unwrap();
    assert!(with.contains(&2), "{with:?}");
    let without = t.encode("a</s>b", false, false).unwrap();
    assert!(!without.contains(&2), "{without:?}");
    assert_eq!(t.decode(&without, false, false).unwrap(), "a</s>b");
    assert!(t.is_eog(2));
}

#[test]
fn pieces_of_ids_outside_the_vocabulary_are_errors() {
    let t = random_model_tokenizer();
    assert!(t.piece(512, true).is_err());
    assert!(t.piece(-1, true).is_err());
    assert!(t.decode(&[5, 9999], false, false).is_err());
    assert_eq!(t.piece(1, false).unwrap(), b"", "BOS hidden");
    assert_eq!(t.piece(1, true).unwrap(), b"<s>");
}

#[test]
fn bpe_merges_by_rank_and_pre_tokenizes_by_family() {
    let h = crate::make::bpe_vocab_header("qwen2").unwrap();
    let t = Tokenizer::from_header(&h).unwrap();
    let v = t.vocab();
    let ids = t.encode(" hello world", false, false).unwrap();
    let texts: Vec<&str> = ids.iter().map(|&i| v.text_of(i).unwrap()).collect();
    assert_eq!(texts, ["Ġhello", "Ġworld"]);
    assert_eq!(t.decode(&ids, false, false).unwrap(), " hello world");
    // qwen2 splits digits one by one, llama3 by three
    let one = t.encode("123", false, false).unwrap();
    assert_eq!(one.len(), 3);
    let h3 = crate::make::bpe_vocab_header("llama3").unwrap();
    let t3 = Tokenizer::from_header(&h3).unwrap();
    let three = t3.encode("123", true, false).unwrap();
    let bos = t3.vocab().special.bos.unwrap();
    assert_eq!(
        three,
        [bos, t3.vocab().id_of("123").unwrap()],
        "llama3 adds BOS"
    );
}

#[test]
fn user_defined_tokens_are_found_even_without_parse_special() {
    let t = Tokenizer::from_header(&crate::make::bpe_vocab_header("gpt-2").unwrap()).unwrap();
    let v = t.vocab();
    let tag = v.id_of("<tag>").unwrap();
    let im_end = v.id_of("<|im_end|>").unwrap();
    let ids = t.encode("a<tag>b<|im_end|>", false, false).unwrap();
    assert!(ids.contains(&tag) && !ids.contains(&im_end), "{ids:?}");
    let ids = t.encode("a<tag>b<|im_end|>", false, true).unwrap();
    assert!(ids.contains(&tag) && ids.contains(&im_end), "{ids:?}");
    assert!(t.is_eog(im_end));
}
