//! `llama`'s sampling as a user meets it: llama.cpp's flags and defaults,
//! the same seed the same tokens, a grammar or schema held, and bad
//! values refused before any token, naming the flag.

use std::process::{Command, Output};

fn llama(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llama"))
        .args(["--random", "tiny", "--cpu-only", "--prompt-ids", "1,2,3"])
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> (String, String) {
    let out = llama(args);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{args:?}:\n{e}");
    (o, e)
}

/// The generated ids `--print-ids` printed (the last line of stdout).
fn ids(stdout: &str) -> String {
    stdout.lines().last().unwrap_or("").to_string()
}

#[test]
fn the_same_seed_gives_the_same_tokens_and_temp_zero_is_greedy() {
    let a = ids(&ok(&["-n", "12", "--print-ids", "--seed", "7"]).0);
    let b = ids(&ok(&["-n", "12", "--print-ids", "-s", "7"]).0);
    assert_eq!(a, b);
    let (_, e) = ok(&["-n", "4", "--seed", "7"]);
    assert!(e.contains("sampler seed: 7"), "{e}");
    assert!(
        e.contains("top_k = 40, top_p = 0.950, min_p = 0.050"),
        "{e}"
    );
    assert!(
        e.contains(
            "sampler chain: logits -> top-k -> typical -> top-p -> min-p -> temp-ext -> dist"
        ),
        "{e}"
    );
    // a random seed is reported, so the run can be repeated
    let (_, e) = ok(&["-n", "4"]);
    assert!(e.contains("sampler seed: "), "{e}");
    // temperature 0: the chain keeps only the most likely token, the
    // same for every seed, as the greedy helpers choose it
    let g1 = ids(&ok(&["-n", "12", "--print-ids", "--temp", "0", "--seed", "1"]).0);
    let g2 = ids(&ok(&["-n", "12", "--print-ids", "--temp", "0", "--seed", "2"]).0);
    assert_eq!(g1, g2);
    // llama.cpp's spellings: a reordered chain, mirostat, penalties
    ok(&["-n", "4", "--samplers", "top_k;temperature", "--top-k", "5"]);
    ok(&[
        "-n",
        "4",
        "--sampling-seq",
        "kt",
        "--mirostat",
        "2",
        "--mirostat-ent",
        "3",
    ]);
    ok(&[
        "-n",
        "4",
        "--repeat-penalty",
        "1.3",
        "--dry-multiplier",
        "0.8",
        "-l",
        "5-inf",
    ]);
    let (_, e) = ok(&["-n", "2", "--n-probs", "3"]);
    assert!(e.contains("token "), "{e}");
}

#[test]
fn bad_sampling_values_are_refused_naming_the_flag() {
    for (args, flag) in [
        (&["--top-p", "1.5"][..], "--top-p"),
        (&["--top-k", "-3"], "--top-k"),
        (&["--min-p", "2"], "--min-p"),
        (&["--temp", "nan"], "--temp"),
        (&["--temp", "inf"], "--temp"),
        (&["--repeat-penalty", "0"], "--repeat-penalty"),
        (&["--mirostat", "3"], "--mirostat"),
        (&["-l", "999999+1"], "--logit-bias"),
        (&["-l", "abc"], "--logit-bias"),
        (&["--samplers", "top_k;bogus"], "bogus"),
        (&["--seed", "x"], "--seed"),
        (&["--repeat-last-n", "-1"], "--repeat-last-n"),
    ] {
        let out = llama(&[args, &["-n", "2"]].concat());
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(e.contains(flag), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
    }
}

#[test]
fn grammars_hold_the_output_and_bad_ones_stop_before_any_token() {
    // the tiny model's vocabulary has no end of generation to end a
    // grammar: a bad grammar is refused for what it is first
    for (args, says) in [
        (&["--grammar", "root ::= undefined"][..], "undefined"),
        (&["--json-schema", "{not json"], "--json-schema"),
        (
            &["--grammar-file", "/nonexistent.gbnf"],
            "/nonexistent.gbnf",
        ),
    ] {
        let out = llama(&[args, &["-n", "4"]].concat());
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(e.contains(says), "{args:?}: {e}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains(','),
            "{args:?}: tokens generated"
        );
    }
}

/// A GGUF's own sampling (`general.sampling.*`) replaces llama.cpp's
/// defaults, but not what the command line sets.
#[test]
fn the_model_s_sampling_keys_apply_where_the_command_line_is_silent() {
    use ggraph::model::gguf::Value;
    use ggraph::model::make::{make_vocab, model_gguf};
    let desc = ggraph::runner::random_model("tiny", ggraph::DType::Q8_0, 1).unwrap();
    let mut w = model_gguf(&desc, make_vocab(desc.config.n_vocab)).unwrap();
    w.kv("general.sampling.temp", Value::F32(0.0))
        .kv("general.sampling.top_k", Value::I32(7))
        .kv(
            "general.sampling.sequence",
            Value::String("top_k;temperature".into()),
        );
    let path = std::env::temp_dir().join(format!("sampling-keys-{}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_llama"))
            .arg(&path)
            .args(["--cpu-only", "--prompt-ids", "1,2,3", "-n", "2"])
            .args(extra)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{e}");
        e
    };
    let e = run(&[]);
    assert!(
        e.contains("top_k = 7,") && e.contains("temp = 0.000"),
        "{e}"
    );
    assert!(
        e.contains("sampler chain: logits -> top-k -> temp-ext -> dist"),
        "{e}"
    );
    let e = run(&["--temp", "0.5", "--top-k", "40"]);
    assert!(
        e.contains("top_k = 40,") && e.contains("temp = 0.500"),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
}
