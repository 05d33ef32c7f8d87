//! The tools as a newcomer meets them: defaults, one fit for every tool,
//! and bad values refused with the flag named.

use std::process::{Command, Output};

fn llama(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llama"))
        .args(args)
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
