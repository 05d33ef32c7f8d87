//! The programs' command lines as a user meets them: help with the
//! defaults, errors that name the flag (exit code 2), completions, logs
//! only when asked for.

use std::process::{Command, Output};

fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin);
    c.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the program starts")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const BINS: [&str; 4] = [
    env!("CARGO_BIN_EXE_ggraph"),
    env!("CARGO_BIN_EXE_llama"),
    env!("CARGO_BIN_EXE_split-experiment"),
    env!("CARGO_BIN_EXE_gpu-check"),
];

fn fixture(name: &str) -> String {
    format!(
        "{}/../ggraph-model/tests/fixtures/gguf/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn every_program_has_help_completions_and_named_errors() {
    for bin in BINS {
        let help = run(bin, &["--help"], &[]);
        assert_eq!(help.status.code(), Some(0), "{bin} --help");
        let h = text(&help.stdout);
        assert!(
            h.contains("Usage:") && h.contains("[default: "),
            "{bin}:\n{h}"
        );
        assert!(h.contains("-v..."), "{bin}: no -v in\n{h}");

        let completions = if bin.ends_with("ggraph") {
            run(bin, &["completions", "bash"], &[])
        } else {
            run(bin, &["--completions", "bash"], &[])
        };
        assert_eq!(completions.status.code(), Some(0), "{bin}");
        assert!(text(&completions.stdout).contains("complete -F"), "{bin}");

        let bad = run(bin, &["--no-such-flag"], &[]);
        assert_eq!(bad.status.code(), Some(2), "{bin}");
        assert!(text(&bad.stderr).contains("--no-such-flag"), "{bin}");
    }
}

#[test]
fn bad_values_exit_2_naming_the_flag() {
    let ggraph = BINS[0];
    for (args, flag) in [
        (&["plan", "m.gguf", "--gpu-free", "lots"][..], "--gpu-free"),
        (&["plan", "m.gguf", "-ts", "3,x"], "--tensor-split"),
        (&["estimate", "m.gguf", "--kv-type", "q5"], "--kv-type"),
        (&["devices", "--weights", "Q9_9"], "--weights"),
    ] {
        let o = run(ggraph, args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(flag),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    let o = run(BINS[1], &["-n", "many", "--random", "tiny"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("-n"), "{}", text(&o.stderr));
    let o = run(BINS[1], &["-ngl", "99"], &[]);
    assert_eq!(o.status.code(), Some(2), "no model is a usage mistake");
}

#[test]
fn rust_log_and_v_show_the_scheduler_passes_and_splits_and_nothing_by_default() {
    let ggraph = BINS[0];
    let model = fixture("tiny_llama.gguf");
    let plan = ["plan", model.as_str(), "--ctx", "64", "--gpu-free", "1MiB"];
    let quiet = run(ggraph, &plan, &[]);
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    assert_eq!(text(&quiet.stderr), "", "stderr without logs");
    let want = [
        "pass 1 weights location",
        "pass 2 expansion",
        "pass 4 copy insertion",
        "split 0: ",
        "graph allocator",
        "placement: layers",
        "ggraph_core::sched",
    ];
    let logged = run(ggraph, &plan, &[("RUST_LOG", "ggraph=debug")]);
    let mut args = vec!["-vv"];
    args.extend(plan);
    let vv = run(ggraph, &args, &[]);
    for o in [&logged, &vv] {
        assert!(o.status.success());
        let e = text(&o.stderr);
        for w in want {
            assert!(e.contains(w), "{w} not in:\n{e}");
        }
        // the same table on stdout, but for the CPU's free memory, which
        // is the system's and moves between runs
        let table = |b: &[u8]| -> Vec<String> {
            text(b)
                .lines()
                .map(|l| match l.strip_prefix("CPU ") {
                    Some(_) => l.rsplitn(3, ' ').nth(2).unwrap_or(l).to_string(),
                    None => l.to_string(),
                })
                .collect()
        };
        assert_eq!(table(&o.stdout), table(&quiet.stdout));
    }
}

/// `--fit` gives a plan (and `llama --fit` a run) whatever the GPUs' sizes,
/// from smaller than any weight to room for everything, and says what
/// limited it.
#[test]
fn fit_always_gives_a_plan_and_says_what_limited_it() {
    let [ggraph, llama, ..] = BINS;
    let model = fixture("tiny_llama.gguf");
    let mut layers_seen = Vec::new();
    for gpus in [
        &["1KiB"][..],
        &["16KiB", "8KiB"],
        &["64KiB", "32KiB", "16KiB"],
        &["256KiB"],
        &["1GiB"],
    ] {
        let mut args = vec!["plan", model.as_str(), "--ctx", "64", "--fit"];
        for g in gpus {
            args.extend(["--gpu-free", g]);
        }
        let o = run(ggraph, &args, &[]);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{gpus:?}: {}", text(&o.stderr));
        let fit_line = out.lines().find(|l| l.starts_with("fit ")).unwrap_or("");
        assert!(!fit_line.is_empty(), "{gpus:?}: no fit line in\n{out}");
        assert!(!out.contains("does not fit"), "{gpus:?}:\n{out}");
        layers_seen.push(fit_line.to_string());

        let mut args = vec!["--random", "tiny", "-n", "2", "--ctx", "64", "--fit"];
        for g in gpus {
            args.extend(["--gpu-free", g]);
        }
        let o = run(llama, &args, &[]);
        assert!(o.status.success(), "llama {gpus:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("fit: "), "{}", text(&o.stderr));
    }
    assert!(layers_seen[0].contains("0 of"), "{layers_seen:?}");
    assert!(
        layers_seen[4].contains("everything fits"),
        "{layers_seen:?}"
    );
}

#[test]
fn tokenize_prints_llama_tokenize_ids_and_llama_takes_the_same_prompt() {
    let [ggraph, llama, ..] = BINS;
    let path =
        std::env::temp_dir().join(format!("ggraph-cli-tokenize-{}.gguf", std::process::id()));
    let p = path.to_str().unwrap();
    let made = run(ggraph, &["make-model", p, "--shape", "tiny"], &[]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made.stderr));

    let ids = run(ggraph, &["tokenize", p, "hello world</s>"], &[]);
    assert_eq!(ids.status.code(), Some(0), "{}", text(&ids.stderr));
    let ids = text(&ids.stdout);
    assert!(
        ids.starts_with("[1, ") && ids.ends_with(", 2]\n"),
        "BOS first, </s> parsed: {ids}"
    );
    let plain = text(
        &run(
            ggraph,
            &["tokenize", p, "hello world</s>", "--no-parse-special"],
            &[],
        )
        .stdout,
    );
    assert!(
        !plain.ends_with(", 2]\n") && plain.len() > ids.len(),
        "{plain}"
    );
    let escaped = text(&run(ggraph, &["tokenize", p, r"a\nb"], &[]).stdout);
    let literal = text(&run(ggraph, &["tokenize", p, r"a\nb", "--no-escape"], &[]).stdout);
    assert_ne!(escaped, literal);

    // -n 0 only processes the prompt: its ids, then its text
    let o = run(
        llama,
        &[
            p,
            "--cpu-only",
            "-p",
            "hello world</s>",
            "-n",
            "0",
            "--print-prompt-ids",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next().map(|l| format!("{l}\n")), Some(ids.clone()));
    assert_eq!(
        lines.next(),
        Some(" hello world"),
        "BOS and </s> are not text"
    );
    assert!(
        text(&o.stderr).contains("generation 0 tokens"),
        "{}",
        text(&o.stderr)
    );

    // no chat template in this file: a clear error, not a guess
    let o = run(llama, &[p, "--cpu-only", "--chat", "hi"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("chat template"),
        "{}",
        text(&o.stderr)
    );
    let o = run(llama, &[p, "--system", "be brief"], &[]);
    assert_eq!(o.status.code(), Some(2), "--system needs --chat");
    std::fs::remove_file(&path).ok();
}
