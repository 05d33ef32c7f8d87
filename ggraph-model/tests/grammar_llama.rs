//! Grammars over the real vocabulary (SmolLM2's, `GGRAPH_REAL_GGUF`):
//! llama.cpp's own `grammars/*.gbnf` (from its source,
//! `GGRAPH_LLAMA_CPP_SOURCE`, as `scripts/test` sets both) compile, and
//! text in their language, tokenised, is allowed token by token and may
//! end there; text outside it is refused at the token where it leaves.
//! JSON schemas and regexes the same way; a bad grammar or schema is an
//! error before any token.

use std::path::PathBuf;

use ggraph_model::gguf::ModelFile;
use ggraph_model::sampling::{
    Candidates, Constraint, Grammar, GrammarSource, GrammarVocab, TokenData,
};
use ggraph_model::tokenizer::Tokenizer;
use serde_json::json;

fn tokenizer() -> Option<Tokenizer> {
    let Some(dir) = std::env::var_os("GGRAPH_REAL_GGUF") else {
        eprintln!("grammar_llama: GGRAPH_REAL_GGUF unset: not checked (scripts/test sets it)");
        return None;
    };
    let file = ModelFile::open(PathBuf::from(dir).join("F16.gguf")).unwrap();
    Some(Tokenizer::from_header(file.header()).unwrap())
}

fn allows(g: &mut Grammar, token: i32) -> bool {
    let mut c = Candidates {
        data: vec![TokenData {
            id: token,
            logit: 1.0,
            p: 0.0,
        }],
        sorted: false,
        selected: None,
    };
    g.apply(&mut c).unwrap();
    c.data[0].logit != f32::NEG_INFINITY
}

/// How many tokens of `text` the grammar takes before it refuses one, and
/// whether it may end after all of them.
fn walk(t: &Tokenizer, g: &mut Grammar, text: &str) -> (usize, usize, bool) {
    let ids = t.encode(text, false, false).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        if !allows(g, id) {
            return (i, ids.len(), false);
        }
        g.accept(id).unwrap();
    }
    let eos = t.vocab().special.eos.unwrap();
    (ids.len(), ids.len(), allows(g, eos))
}

#[test]
fn llama_cpp_s_grammars_take_their_language() {
    let Some(t) = tokenizer() else { return };
    let Some(src) = std::env::var_os("GGRAPH_LLAMA_CPP_SOURCE") else {
        eprintln!("grammar_llama: GGRAPH_LLAMA_CPP_SOURCE unset: the .gbnf files are not checked");
        return;
    };
    let vocab = GrammarVocab::new(&t).unwrap();
    let dir = PathBuf::from(src).join("grammars");
    let cases: [(&str, &str, &str); 8] = [
        (
            "json.gbnf",
            "{\"name\": \"Ada\", \"age\": 36, \"tags\": [true, null, -1.5e3]}",
            "{\"a\" 1}",
        ),
        ("json_arr.gbnf", "[\n{\"a\": 1},\n\"two\"]", "[1]"),
        ("arithmetic.gbnf", "1+2 = x\n(a*b) = c\n", "1+2 = \n"),
        ("list.gbnf", "- apples\n- two pears\n", "apples\n"),
        ("chess.gbnf", "1. e4 e5\n2. Nf3 Nc6\n", "1. e4 e9\n"),
        (
            "c.gbnf",
            "int main(){x = 1;while(x<10){x = x+1;}}",
            "int main() {",
        ),
        ("japanese.gbnf", "こんにちは 世界", "hello"),
        ("english.gbnf", "Hello world. This is fine.", "Hello 世界"),
    ];
    for (file, good, bad) in cases {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let source = GrammarSource::Gbnf(text);
        let mut g = vocab
            .compile(&source)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let (took, of, may_end) = walk(&t, &mut g, good);
        assert!(
            took == of && may_end,
            "{file}: took {took} of {of} tokens of {good:?}, end {may_end}"
        );
        let mut g = vocab.compile(&source).unwrap();
        let (took, of, may_end) = walk(&t, &mut g, bad);
        assert!(took < of || !may_end, "{file}: took all of {bad:?}");
    }
}

#[test]
fn json_schemas_and_regexes_hold_the_text() {
    let Some(t) = tokenizer() else { return };
    let vocab = GrammarVocab::new(&t).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false
    });
    let source = GrammarSource::JsonSchema(schema);
    let mut g = vocab.compile(&source).unwrap();
    assert!(walk(&t, &mut g, "{\"name\": \"Ada\", \"age\": 36}").2);
    let mut g = vocab.compile(&source).unwrap();
    let (took, of, _) = walk(&t, &mut g, "{\"name\": \"Ada\", \"age\": \"old\"}");
    assert!(took < of);
    let mut g = vocab
        .compile(&GrammarSource::Regex("[0-9]{3}-[0-9]{4}".into()))
        .unwrap();
    let (took, of, may_end) = walk(&t, &mut g, "555-1234");
    assert!(took == of && may_end, "took {took} of {of}, end {may_end}");
    let mut g = vocab
        .compile(&GrammarSource::Regex("[0-9]{3}-[0-9]{4}".into()))
        .unwrap();
    assert!(walk(&t, &mut g, "555-12a").0 < t.encode("555-12a", false, false).unwrap().len());
}

#[test]
fn a_bad_grammar_or_schema_is_an_error_before_any_token() {
    let Some(t) = tokenizer() else { return };
    let vocab = GrammarVocab::new(&t).unwrap();
    for (source, says) in [
        (
            GrammarSource::Gbnf("root ::= undefined-rule\n".into()),
            "undefined-rule",
        ),
        (GrammarSource::Gbnf("root ::= \"a\" |\n)".into()), "line"),
        (GrammarSource::Lark("start: foo".into()), "foo"),
        (
            GrammarSource::JsonSchema(json!({"type": "object", "$ref": "http://example.com/x"})),
            "JSON schema",
        ),
        (GrammarSource::JsonSchema(json!([1, 2])), "JSON schema"),
        (GrammarSource::Regex("(ab".into()), "regex"),
    ] {
        let e = vocab
            .compile(&source)
            .err()
            .unwrap_or_else(|| panic!("{source:?} compiled"))
            .to_string();
        assert!(e.contains(says), "{source:?}: {e}");
    }
}
