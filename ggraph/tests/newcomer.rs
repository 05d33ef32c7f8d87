//! The tools as a newcomer meets them: defaults, one fit for every tool,
//! and bad values refused with the flag named.

use std::process::{Command, Output};

/// `llama` with `args`, greedy (`--temp 0`: the same tokens every run).
fn llama(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llama"))
        .args(args)
        .args(["--temp", "0"])
        .env_remove("RUST_LOG")
        .env_remove("GGRAPH_SOFTWARE_GPUS")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The software drivers this machine's backends find (Mesa's lavapipe).
fn software_gpus() -> Vec<String> {
    ggraph::registry()
        .devices()
        .iter()
        .filter(|d| d.is_software())
        .map(|d| d.name().to_string())
        .collect()
}

#[test]
fn a_software_gpu_is_used_only_when_named() {
    let tiny = ["--random", "tiny", "--prompt-ids", "1,2,3", "-n", "2"];
    let out = llama(&tiny);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("1 split(s): CPU["), "{stderr}");
    let software = software_gpus();
    for name in &software {
        assert!(
            !stderr.contains(name.as_str()),
            "{name} used by default:\n{stderr}"
        );
    }
    let Some(name) = software.first() else {
        assert!(
            std::env::var_os("GGRAPH_REQUIRE_WGPU").is_none(),
            "GGRAPH_REQUIRE_WGPU=1 but no software adapter (lavapipe) found"
        );
        return;
    };
    let out = llama(&[&tiny[..], &["--device", name]].concat());
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{name}[")),
        "{name} not used when named:\n{stderr}"
    );
    // `ggraph devices` lists it and says why it is left out
    let out = Command::new(env!("CARGO_BIN_EXE_ggraph"))
        .arg("devices")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("software drivers on the CPU, left out of default placement"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with(name.as_str())),
        "{stdout}"
    );
}

#[test]
fn a_device_that_is_not_there_is_named_in_the_error() {
    let out = llama(&[
        "--random",
        "tiny",
        "--prompt-ids",
        "1",
        "-n",
        "1",
        "--device",
        "nope:7",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--device nope:7"), "{stderr}");
}

fn ggraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ggraph"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// A small random GGUF, written once per test.
fn small_gguf(name: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "ggraph-newcomer-{}-{name}.gguf",
        std::process::id()
    ));
    let path = path.to_str().unwrap().to_string();
    let out = ggraph(&["make-model", &path, "--arch", "llama", "--shape", "small"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    path
}

/// The fit's verdict and the simulated GPU's weights, KV, compute and
/// total, as `ggraph plan` and `llama` print them.
fn fit_and_gpu(out: &str) -> (String, Vec<String>) {
    let verdict = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("fit: ")
                .or_else(|| l.strip_prefix("fit      "))
        })
        .unwrap_or_else(|| panic!("no fit line:\n{out}"))
        .to_string();
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("sim:0 "))
        .unwrap_or_else(|| panic!("no sim:0 row:\n{out}"))
        .split_whitespace()
        .collect();
    // "sim:0 [layers] W unit K unit C unit T unit [free after]": the four
    // sizes after the name (plan has the layers column first)
    let figures: Vec<String> = row
        .windows(2)
        .filter(|p| p[0].parse::<f64>().is_ok() && p[1].ends_with('B'))
        .map(|p| p.join(" "))
        .take(4)
        .collect();
    (verdict, figures)
}

#[test]
fn llama_fits_and_allocates_what_plan_printed() {
    let model = small_gguf("fit");
    for (free, margin) in [
        ("60MiB", None),
        ("100MiB", Some("8MiB")),
        ("300MiB", None),
        ("300MiB", Some("0")),
    ] {
        let mut common = vec!["--gpu-free", free, "--fit", "-c", "512"];
        if let Some(m) = margin {
            common.extend(["--fit-margin", m]);
        }
        let plan = ggraph(&[&["plan", model.as_str()][..], &common].concat());
        assert!(plan.status.success(), "{}", text(&plan.stderr));
        let run = llama(
            &[
                &[model.as_str(), "--prompt-ids", "1,2", "-n", "1"][..],
                &common,
            ]
            .concat(),
        );
        assert!(run.status.success(), "{}", text(&run.stderr));
        let (p, r) = (
            fit_and_gpu(&text(&plan.stdout)),
            fit_and_gpu(&text(&run.stderr)),
        );
        assert_eq!(p, r, "--gpu-free {free} --fit-margin {margin:?}");
    }
    std::fs::remove_file(&model).unwrap();
}

#[test]
fn fit_ctx_without_fit_is_refused() {
    for out in [
        ggraph(&["plan", "x.gguf", "--fit-ctx", "256"]),
        llama(&["--random", "tiny", "--fit-ctx", "256"]),
    ] {
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains("--fit"), "{}", text(&out.stderr));
    }
}

/// Every tool refuses a value it cannot use with clap's exit code 2, the
/// flag named, before any work.
#[test]
fn bad_values_exit_2_with_the_flag_named() {
    let model = small_gguf("values");
    let cases: &[(&[&str], &str)] = &[
        (&["-c", "0"], "--ctx"),
        (&["-b", "0"], "--batch"),
        (&["-ub", "0"], "--ubatch"),
        (&["-np", "0"], "--parallel"),
        (&["-t", "0"], "--threads"),
        (&["-t", "100000"], "--threads"),
        (&["--fit", "--fit-ctx", "0"], "--fit-ctx"),
        (
            &["-b", "8", "-ub", "16"],
            "--ubatch 16 is larger than --batch 8",
        ),
        (&["-ts", "0,0"], "--tensor-split"),
        (&["-ts", "1,-1"], "--tensor-split"),
        (&["--gpu-free", "1GiB", "-mg", "5"], "--main-device 5"),
        (&["--rpc", "localhost"], "--rpc"),
    ];
    for (args, named) in cases {
        let plan = ggraph(&[&["plan", model.as_str()][..], args].concat());
        let run = llama(&[&[model.as_str(), "--prompt-ids", "1", "-n", "1"][..], args].concat());
        for (tool, out) in [("plan", plan), ("llama", run)] {
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{tool} {args:?}: {stderr}");
            assert!(
                stderr.contains(named),
                "{tool} {args:?} does not name {named}: {stderr}"
            );
        }
    }
    std::fs::remove_file(&model).unwrap();
}

#[test]
fn a_bad_simulated_device_entry_is_refused_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_ggraph"))
        .arg("devices")
        .env("GGRAPH_SIM_DEVICES", "abc,2GiB")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'abc' is not a memory size"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_llama"))
        .args(["--random", "tiny", "--prompt-ids", "1", "-n", "1"])
        .env("GGRAPH_SIM_DEVICES", "1GiB,,2GiB")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// A context that fills mid-generation stops the run cleanly: exit 0, the
/// tokens generated printed, the statistics too.
#[test]
fn a_full_context_ends_generation_with_what_was_made() {
    let out = llama(&[
        "--random",
        "tiny",
        "--prompt-ids",
        "1,2,3",
        "-n",
        "100",
        "-c",
        "16",
        "--print-ids",
    ]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the context of 16 cells is full: generation stopped at 14 of 100 tokens"),
        "{stderr}"
    );
    assert!(stderr.contains("generation 14 tokens"), "{stderr}");
    let ids = text(&out.stdout);
    assert_eq!(ids.trim().split(',').count(), 14, "{ids}");
}

/// `-ts 3,1` counts layers as llama.cpp does, even where the first GPU
/// could hold them all; without it, layers fill the GPUs by free memory.
#[test]
fn a_tensor_split_shares_the_offloaded_layers_as_llama_cpp_does() {
    let model = small_gguf("ts");
    let layers = |extra: &[&str]| {
        let out = ggraph(
            &[
                &[
                    "plan",
                    model.as_str(),
                    "--gpu-free",
                    "2GiB",
                    "--gpu-free",
                    "2GiB",
                    "-c",
                    "256",
                ][..],
                extra,
            ]
            .concat(),
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        ["sim:0", "sim:1"].map(|d| {
            stdout
                .lines()
                .find(|l| l.starts_with(d))
                .and_then(|l| l.split_whitespace().nth(1))
                .unwrap_or_else(|| panic!("no {d} row:\n{stdout}"))
                .to_string()
        })
    };
    // nine layers (eight and the output): layer i on GPU 1 from i / 9 >= 3/4
    assert_eq!(layers(&["-ts", "3,1"]), ["0-6", "7-8"]);
    assert_eq!(layers(&["-ts", "1,3"]), ["0-2", "3-8"]);
    // by free memory (equal here): both GPUs get layers
    let even = layers(&[]);
    assert!(even.iter().all(|r| r != "-"), "{even:?}");
    std::fs::remove_file(&model).unwrap();
}

/// make-model refuses what it cannot make, or what llama would refuse,
/// before writing anything; no size aborts the process.
#[test]
fn make_model_refuses_before_writing() {
    let out_path = std::env::temp_dir().join(format!(
        "ggraph-newcomer-{}-refused.gguf",
        std::process::id()
    ));
    let out_path = out_path.to_str().unwrap();
    for (args, named) in [
        (
            &["--n-embd", "100000000", "--n-layer", "1000"][..],
            "of memory is free",
        ),
        (&["--weights", "I32"][..], "is not a weight type"),
        (&["--n-layer", "0"][..], "--n-layer"),
        (&["--n-vocab", "0"][..], "--n-vocab"),
    ] {
        let out = ggraph(&[&["make-model", out_path][..], args].concat());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(
            !std::path::Path::new(out_path).exists(),
            "{args:?} wrote a file"
        );
    }
    let help = text(&ggraph(&["-h"]).stdout);
    assert!(
        help.contains("make-model") && !help.contains("a random-weight llama GGUF"),
        "{help}"
    );
}

/// A NaN in a weight makes the logits NaN: the decode fails saying so (no
/// empty output and exit 0), and with -v names the first node that
/// computed one.
#[test]
fn non_finite_logits_are_an_error_naming_the_node() {
    let path =
        std::env::temp_dir().join(format!("ggraph-newcomer-{}-nan.gguf", std::process::id()));
    let p = path.to_str().unwrap();
    let out = ggraph(&["make-model", p, "--shape", "tiny", "--weights", "F32"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let h = ggraph::model::gguf::read_header(&path, None).unwrap();
    let t = h.tensor("output_norm.weight").unwrap();
    let at = h.layout().unwrap().data_offset + t.offset;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at as usize..at as usize + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let args = [p, "--prompt-ids", "1,2,3", "-n", "4", "--cpu-only"];
    let out = llama(&args);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("are not finite (NaN)"), "{stderr}");
    assert!(stderr.contains("-v names the first node"), "{stderr}");
    let out = llama(&[&args[..], &["-v"]].concat());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("the first node that computed one: result_norm"),
        "{stderr}"
    );
    std::fs::remove_file(&path).unwrap();
}

/// What `plan` says of a context the host cannot hold, and of a machine
/// without GPUs; the context a fit chose heads the plan.
#[test]
fn plan_says_what_does_not_fit_and_where_layers_go() {
    let model = small_gguf("plan");
    let plan =
        |args: &[&str]| text(&ggraph(&[&["plan", model.as_str()][..], args].concat()).stdout);
    let out = plan(&["-c", "99999999", "--cpu-only"]);
    assert!(out.contains("layers   none of 9 on GPUs (no GPU)"), "{out}");
    assert!(out.contains("does not fit: CPU is"), "{out}");
    let out = plan(&[
        "--gpu-free",
        "300MiB",
        "-c",
        "8192",
        "--fit",
        "--fit-ctx",
        "512",
    ]);
    let context = out.lines().find(|l| l.starts_with("context ")).unwrap();
    let layers = out.lines().find(|l| l.starts_with("layers ")).unwrap();
    let chosen = layers.rsplit("context ").next().unwrap();
    assert!(
        context.starts_with(&format!("context  {chosen} cells")),
        "{out}"
    );
    // llama refuses the same context before loading, naming the host
    let run = llama(&[
        model.as_str(),
        "-c",
        "99999999",
        "--cpu-only",
        "--prompt-ids",
        "1",
        "-n",
        "1",
    ]);
    let stderr = text(&run.stderr);
    assert!(!run.status.success());
    assert!(stderr.contains("out of memory on CPU (weights"), "{stderr}");
    assert!(!stderr.contains("loaded in"), "it loaded first: {stderr}");
    std::fs::remove_file(&model).unwrap();
}

/// Errors that name the real mistake.
#[test]
fn errors_name_the_real_mistake() {
    let dir = std::env::temp_dir().join(format!("ggraph-newcomer-{}-dir", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let out = llama(&[d, "--prompt-ids", "1", "-n", "1"]);
    assert!(
        text(&out.stderr).contains("is a directory, not a .gguf file"),
        "{}",
        text(&out.stderr)
    );
    let out = ggraph(&["plan", d]);
    assert!(
        text(&out.stderr).contains("is a directory, not a .gguf file"),
        "{}",
        text(&out.stderr)
    );
    // a header JSON: plan takes it, llama says it needs the weights
    let model = small_gguf("header");
    let header = ggraph(&["header", &model]);
    assert!(header.status.success());
    let json = dir.join("header.json");
    std::fs::write(&json, &header.stdout).unwrap();
    let j = json.to_str().unwrap();
    assert!(ggraph(&["plan", j]).status.success());
    let out = llama(&[j, "--prompt-ids", "1", "-n", "1"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("is a header JSON: running a model needs its weights"),
        "{stderr}"
    );
    // no layers: the block count is blamed, not the head count
    let zero = text(&header.stdout).replace("\"llama.block_count\": 8", "\"llama.block_count\": 0");
    assert!(zero.contains("\"llama.block_count\": 0"), "{zero}");
    std::fs::write(&json, zero).unwrap();
    let out = ggraph(&["plan", j]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("block_count is 0: a model needs at least one layer"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&model).unwrap();
}

/// Help fits a terminal (wrapped, at most 100 columns when not one) and
/// lists every option, --completions included.
#[test]
fn help_is_wrapped_and_complete() {
    for (tool, args) in [
        (env!("CARGO_BIN_EXE_llama"), &["-h"][..]),
        (env!("CARGO_BIN_EXE_llama"), &["--help"][..]),
        (env!("CARGO_BIN_EXE_ggraph"), &["plan", "--help"][..]),
        (env!("CARGO_BIN_EXE_split-experiment"), &["--help"][..]),
    ] {
        let out = Command::new(tool).args(args).output().unwrap();
        let help = text(&out.stdout);
        let widest = help.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(
            widest <= 100,
            "{tool} {args:?}: a line of {widest} columns:\n{help}"
        );
        if !tool.ends_with("ggraph") {
            assert!(help.contains("--completions"), "{tool} {args:?}:\n{help}");
        }
    }
}

#[test]
fn estimate_without_a_gpu_says_so() {
    let model = small_gguf("estimate");
    let out = ggraph(&["estimate", &model, "--num-gpu", "5"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("no GPU: every layer on the CPU"),
        "{stdout}"
    );
    assert!(!stdout.contains("layers asked for fit"), "{stdout}");
    std::fs::remove_file(&model).unwrap();
}
