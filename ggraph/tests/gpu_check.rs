//! gpu-check, the program a GPU machine runs (scripts/gpu-check), on the
//! host emulator of the GPU kernels: its device listing and its mul_mat
//! bench end in its verdict. (The conformance and llama parts it runs on
//! a GPU are ggraph-gpu's tests on the emulator.)

use std::process::Command;

#[test]
fn gpu_check_lists_the_emulator_and_benches_every_weight_type_on_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-check"))
        .args(["--emulator", "--bench-only", "--reps", "1"])
        .output()
        .expect("gpu-check runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("emu:0"),
        "the emulator is listed:\n{stdout}"
    );
    for dtype in ["F32", "F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_XS"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("{dtype} "))),
            "a bench row for {dtype}:\n{stdout}"
        );
    }
    assert!(stdout.contains("GPU CHECK PASSED"), "{stdout}\n{stderr}");
}
