//! gpu-check, the program a GPU machine runs (scripts/gpu-check), on the
//! host emulator of the GPU kernels: its device listing, the copy
//! bandwidth, the mul_mat bench with the BLAS rows, and the runner with
//! every layer on the device, ending in its verdict. (The conformance and
//! llama checks it runs on a GPU are ggraph-gpu's tests on the emulator.)

use std::process::Command;

#[test]
fn gpu_check_benches_and_runs_the_runner_on_the_emulator() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-check"))
        .args([
            "--emulator",
            "--backends",
            "cuda",
            "--parts",
            "bandwidth,bench,runner",
            "--reps",
            "1",
        ])
        .output()
        .expect("gpu-check runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let row = |start: &str| lines.iter().find(|l| l.starts_with(start)).copied();
    assert!(
        stdout.contains("emu:0"),
        "the emulator is listed:\n{stdout}"
    );
    let copy = row("copy bandwidth on emu:0").expect("a bandwidth line");
    assert!(
        copy.contains("copy kernel") && copy.contains("GB/s") && !copy.contains("FAILED"),
        "{copy}"
    );
    for dtype in [
        "F32",
        "F16",
        "cuBLAS F32",
        "cuBLAS F16",
        "Q4_0",
        "Q8_0",
        "Q4_K",
        "Q6_K",
        "IQ4_XS",
    ] {
        let r = row(&format!("{dtype} ")).unwrap_or_else(|| panic!("a row for {dtype}:\n{stdout}"));
        // a positive figure for n = 1, 8 and 32 (and the weight rows' GB/s)
        let figures: Vec<f64> = r[dtype.len()..]
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect();
        let cells = if dtype.starts_with("cuBLAS") { 3 } else { 4 };
        assert!(
            figures.len() == cells && figures.iter().all(|&f| f > 0.0),
            "{r}"
        );
    }
    for weights in ["tiny F16", "tiny Q4_0"] {
        let r = row(weights).unwrap_or_else(|| panic!("a runner row for {weights}:\n{stdout}"));
        assert!(!r.contains("FAILED"), "{r}");
        assert!(
            r.ends_with('%'),
            "generation's share of the copy bandwidth: {r}"
        );
    }
    assert!(stdout.contains("GPU CHECK PASSED"), "{stdout}\n{stderr}");
}

/// The host's cost of generation (`--parts host`): the decode loop on a
/// device whose kernels compute nothing, with the runtime calls a token
/// makes; it needs no GPU.
#[test]
fn gpu_check_times_the_hosts_side_of_generation_without_a_gpu() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-check"))
        .args(["--parts", "host", "--shapes", "tiny", "--gen", "4"])
        .output()
        .expect("gpu-check runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for weights in ["tiny F16", "tiny Q4_0"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(weights))
            .unwrap_or_else(|| panic!("a row for {weights}:\n{stdout}"));
        let figures: Vec<f64> = row[weights.len()..]
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect();
        // microseconds a token and a launch, launches, copies (the inputs
        // and the logits), one wait for the logits, events
        assert_eq!(figures.len(), 6, "{row}");
        assert!(figures[..4].iter().all(|&f| f > 0.0), "{row}");
        assert!(figures[2] > 10.0 && figures[4] >= 1.0, "{row}");
    }
    assert!(stdout.contains("GPU CHECK PASSED"), "{stdout}");
}
