//! Subcommands of `ggraph` for model files: `estimate`, `header`, `check`.

use std::process::ExitCode;

pub use ggraph::args;
pub mod check;
pub mod devices_sample;
pub mod estimate;
pub mod header;
pub mod make;
pub mod model;
pub mod plan;
pub mod progress;

/// One line per subcommand, for the tool's usage text.
pub const SUMMARY: &str = "\
plan MODEL       per-device memory and splits by a dry run of ggraph (--help)
estimate MODEL   memory a model needs on given GPUs (Ollama's and ggraph's; --help)
header MODEL     a model's header as JSON, or as a GGUF header prefix (--help)
check MODEL      read and check a whole GGUF, with a checksum (--help)
make-model OUT   write a random-weight llama GGUF of any shape (--help)";

/// Writes `text` to stdout. A closed pipe (`ggraph ... | head`) is not an
/// error worth a panic: the output is simply cut.
pub fn out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush());
}

/// Why a subcommand failed: exit code 2 for a usage mistake (the usage
/// text follows the message), 1 for anything else.
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    pub fn usage(msg: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            msg: msg.into(),
        }
    }

    pub fn other(msg: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            msg: msg.to_string(),
        }
    }
}

/// Prints what `render` made, or its failure prefixed with `name` (and
/// `usage` for usage mistakes).
fn finish(name: &str, usage: &str, result: Result<String, Failure>) -> ExitCode {
    match result {
        Ok(text) => {
            out(&text);
            ExitCode::SUCCESS
        }
        Err(f) if f.code == 2 => {
            eprintln!("ggraph {name}: {}\n\n{usage}", f.msg);
            ExitCode::from(2)
        }
        Err(f) => {
            eprintln!("ggraph {name}: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

/// Runs subcommand `cmd` if it is one of these; `None` otherwise.
pub fn run(cmd: &str, args: &[String]) -> Option<ExitCode> {
    Some(match cmd {
        "estimate" => finish(cmd, estimate::USAGE, estimate::render(args)),
        "plan" => finish(cmd, &plan::usage(), plan::render(args)),
        "header" => finish(cmd, header::USAGE, header::render(args)),
        "check" => finish(cmd, check::USAGE, check::render(args)),
        "make-model" => finish(cmd, make::USAGE, make::render(args)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        format!(
            "{}/../ggraph-model/tests/fixtures/gguf/{name}",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    fn temp(name: &str) -> String {
        std::env::temp_dir()
            .join(format!("ggraph-cli-{}-{name}", std::process::id()))
            .display()
            .to_string()
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn json(text: &str) -> ggraph::model::serde_json::Value {
        ggraph::model::serde_json::from_str(text).unwrap()
    }

    fn estimate_json(model: &str, extra: &[&str]) -> ggraph::model::serde_json::Value {
        let mut a = args(&[model, "--json"]);
        a.extend(args(extra));
        let Ok(text) = estimate::render(&a) else {
            panic!("estimate {a:?} failed")
        };
        json(&text)
    }

    #[test]
    fn estimate_json_has_the_documented_members() {
        let j = estimate_json(
            &fixture("tiny_llama.gguf"),
            &[
                "--ctx",
                "128",
                "--gpu-free",
                "1GiB",
                "--gpu-free=512MiB",
                "--kv-type",
                "q8_0",
                "--flash-attn",
                "on",
            ],
        );
        assert_eq!(j["model"]["source"], "gguf");
        assert_eq!(
            j["request"]["gpu_free"],
            ggraph::model::serde_json::json!([1u64 << 30, 512u64 << 20])
        );
        let o = &j["ollama"];
        // 128 * (16 + 16) * 1 KV head * 1 byte (q8_0 with flash attention).
        assert_eq!(o["kv"], ggraph::model::serde_json::json!([4096, 4096]));
        assert_eq!(o["kv_total"], 8192);
        assert_eq!(o["kv_type"], "q8_0");
        assert!(o["graph_partial"].as_u64().unwrap() > 0);
        assert!(o["graph_full"].as_u64().unwrap() > 0);
        assert_eq!(o["gpus"][0]["id"], "0");
        assert_eq!(
            o["gpus"][0]["layers"],
            ggraph::model::serde_json::json!([0, 1, 2])
        );
        assert_eq!(o["gpus"][1]["layers"], ggraph::model::serde_json::json!([]));
        assert_eq!(o["layers_on_gpu"], 3);
        assert_eq!(o["graph_kind"], "full");
        // this model's K rows (16 values) are no whole Q8_0 block: ggraph
        // says so instead of guessing
        let err = j["exact"]["error"].as_str().unwrap();
        assert!(err.contains("Q8_0"), "{err}");
        let j = estimate_json(
            &fixture("tiny_llama.gguf"),
            &["--ctx", "128", "--gpu-free", "1GiB", "--gpu-free=512MiB"],
        );
        let x = &j["exact"];
        assert_eq!(x["devices"][0]["name"], "CPU");
        assert_eq!(x["devices"][1]["name"], "sim:0");
        assert_eq!(x["devices"][2]["name"], "sim:1");
        assert_eq!(x["n_ctx"], 128);
        let total = |d: &ggraph::model::serde_json::Value| d["total"].as_u64().unwrap();
        assert!(total(&x["devices"][1]) > 0);
        assert!(total(&x["devices"][1]) <= 1 << 30, "fits the 1 GiB GPU");
        assert!(x["fit"].as_str().is_some());
    }

    #[test]
    fn a_header_prefix_and_a_header_json_estimate_like_the_file() {
        let full = estimate_json(&fixture("tiny_llama.gguf"), &["--gpu-free", "600MiB"]);

        let prefix = temp("tiny.prefix.gguf");
        let json_path = temp("tiny.header.json");
        header::render(&args(&[
            &fixture("tiny_llama.gguf"),
            "--out",
            &json_path,
            "--prefix-out",
            &prefix,
        ]))
        .ok()
        .unwrap();
        let from_prefix = estimate_json(&prefix, &["--gpu-free", "600MiB"]);
        assert_eq!(from_prefix["model"]["source"], "gguf-prefix");
        assert_eq!(from_prefix["ollama"], full["ollama"]);
        let from_json = estimate_json(&json_path, &["--gpu-free", "600MiB"]);
        assert_eq!(from_json["model"]["source"], "json");
        assert_eq!(from_json["ollama"], full["ollama"]);
        // A prefix written from the JSON is the file's header prefix.
        let prefix2 = temp("tiny.prefix2.gguf");
        header::render(&args(&[&json_path, "--prefix-out", &prefix2]))
            .ok()
            .unwrap();
        assert_eq!(
            std::fs::read(&prefix).unwrap(),
            std::fs::read(&prefix2).unwrap()
        );
        for p in [prefix, prefix2, json_path] {
            std::fs::remove_file(p).ok();
        }
    }

    #[test]
    fn a_context_too_large_to_count_is_an_error_not_an_overflow() {
        let huge = u64::MAX / 2;
        let a = args(&["--ctx", &huge.to_string(), "--parallel", "4"]);
        let parsed = ggraph::args::Args::parse(&ggraph::options::CONTEXT_SPEC, &a).unwrap();
        let e = ggraph::options::context(&parsed).err().unwrap();
        assert!(e.contains("too large a context"), "{e}");

        let j = estimate_json(
            &fixture("tiny_llama.gguf"),
            &["--ctx", &huge.to_string(), "--parallel", "4"],
        );
        let e = j["exact"]["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains("too large a context"), "{j:#}");
    }

    #[test]
    fn the_table_shows_layers_per_gpu_and_the_graph_kind() {
        let Ok(t) = estimate::render(&args(&[&fixture("tiny_llama.gguf"), "--gpu-free", "1GiB"]))
        else {
            panic!()
        };
        assert!(t.contains("0-2"), "{t}");
        assert!(t.contains("3 of 3 layers on GPUs"), "{t}");
        assert!(t.contains("full graph"), "{t}");
        assert!(t.contains("context_length 256"), "{t}");
        assert!(t.contains("exact      ggraph's dry run"), "{t}");
    }

    #[test]
    fn usage_mistakes_exit_2_and_bad_files_exit_1() {
        let code = |r: Result<String, Failure>| r.err().map(|f| f.code);
        assert_eq!(code(estimate::render(&args(&[]))), Some(2));
        assert_eq!(
            code(estimate::render(&args(&["m", "--kv-type", "q5"]))),
            Some(2)
        );
        assert_eq!(
            code(estimate::render(&args(&["m", "--gpu-free", "lots"]))),
            Some(2)
        );
        assert_eq!(
            code(estimate::render(&args(&["/nonexistent.gguf"]))),
            Some(1)
        );
        let bad = temp("bad.gguf");
        std::fs::write(&bad, b"GGUF\x03\0\0\0").unwrap();
        let e = estimate::render(&args(&[&bad])).err().unwrap();
        assert!(e.code == 1 && e.msg.contains("truncated"), "{}", e.msg);
        std::fs::remove_file(bad).ok();
        assert_eq!(code(check::render(&args(&[]))), Some(2));
    }

    #[test]
    fn check_reads_every_tensor_and_names_types_ggraph_does_not_compute() {
        let Ok(t) = check::render(&args(&[&fixture("all_types.gguf")])) else {
            panic!()
        };
        assert!(t.contains("12 tensors"), "{t}");
        assert!(t.contains("Q5_K") && t.contains("does not compute"), "{t}");
        assert!(t.contains("checksum "), "{t}");
    }

    #[test]
    fn plan_prints_a_row_per_device_and_the_splits() {
        let Ok(t) = plan::render(&args(&[
            &fixture("tiny_llama.gguf"),
            "--ctx",
            "64",
            "--gpu-free",
            "1MiB",
            "--gpu-free",
            "1MiB",
            "--split-mode",
            "row",
        ])) else {
            panic!("plan failed")
        };
        assert!(
            t.contains("\nCPU ") && t.contains("\nsim:0 ") && t.contains("\nsim:1 "),
            "{t}"
        );
        assert!(t.contains("split(s):"), "{t}");
        let Ok(f) = plan::render(&args(&[
            &fixture("tiny_llama.gguf"),
            "--ctx",
            "64",
            "--gpu-free",
            "64KiB",
            "--fit",
        ])) else {
            panic!("plan --fit failed")
        };
        assert!(f.contains("fit      "), "{f}");
        assert!(
            plan::render(&args(&[
                &fixture("tiny_llama.gguf"),
                "--split-mode",
                "diagonal"
            ]))
            .is_err()
        );
    }
}
