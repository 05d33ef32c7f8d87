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
    assert!(e.contains("sampling seed 7"), "{e}");
    // a random seed is reported, so the run can be repeated
    let (_, e) = ok(&["-n", "4"]);
    assert!(e.contains("sampling seed "), "{e}");
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
