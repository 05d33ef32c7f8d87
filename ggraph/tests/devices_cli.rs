//! The README's main job, `ggraph devices`: every device listed, the
//! sample llama graph run on each and checked against the f64 reference.

use std::process::Command;

fn ggraph(args: &[&str], sim: &str) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ggraph"))
        .args(args)
        .env("GGRAPH_SIM_DEVICES", sim)
        // the wgpu backend's adapter search is covered by its own tests;
        // here an absent Vulkan driver must not matter
        .env("WGPU_BACKEND", "vulkan")
        .output()
        .expect("the ggraph binary starts");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The row of `device` in the devices table, split into its columns.
fn row<'a>(stdout: &'a str, device: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(device))
        .unwrap_or_else(|| panic!("no row for {device} in:\n{stdout}"))
        .split_whitespace()
        .collect()
}

#[test]
fn devices_runs_the_sample_on_the_cpu_and_a_simulated_gpu_within_the_bound() {
    let (ok, stdout, stderr) = ggraph(&["devices"], "64MiB");
    assert!(ok, "ggraph devices failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("backend CPU    2 device(s)"), "{stdout}");
    for device in ["CPU", "sim:0"] {
        let cols = row(&stdout, device);
        // device kind free(2) total(2) nodes ms nmse
        let nodes: usize = cols[6].parse().expect("a node count");
        assert!(nodes > 10, "{device}: {nodes} nodes");
        let nmse: f64 = cols[8].parse().expect("an nmse");
        // Q8_0 weights by default: the CPU quantises activations to 8 bits
        assert!(nmse < 5e-4, "{device}: nmse {nmse}");
    }
    assert_eq!(row(&stdout, "sim:0")[4..6], ["64.00", "MiB"], "{stdout}");
}

#[test]
fn devices_with_other_weights_and_a_bad_option() {
    let (ok, stdout, stderr) = ggraph(&["devices", "--weights", "F32"], "");
    assert!(ok, "{stdout}\n{stderr}");
    let nmse: f64 = row(&stdout, "CPU")[8].parse().unwrap();
    assert!(nmse < 1e-6, "F32 weights: nmse {nmse}");

    let (ok, stdout, stderr) = ggraph(&["devices", "--weights", "Q4_0"], "");
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("Q4_0 weights"), "{stdout}");
    let nmse: f64 = row(&stdout, "CPU")[8].parse().unwrap();
    assert!(nmse < 5e-4, "nmse {nmse}");

    let (ok, _, stderr) = ggraph(&["devices", "--weights", "Q9_9"], "");
    assert!(!ok);
    assert!(stderr.contains("Q9_9"), "{stderr}");
}

/// The device names of the table, in order.
fn device_rows(stdout: &str) -> Vec<Vec<&str>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for l in stdout.lines() {
        if l.starts_with("device ") {
            in_table = true;
        } else if in_table && l.trim().is_empty() {
            break;
        } else if in_table {
            rows.push(l.split_whitespace().collect());
        }
    }
    rows
}

#[test]
fn the_main_job_s_graph_runs_on_every_device_found() {
    // CPU, a simulated GPU, and wgpu (lavapipe) where there is an adapter
    let out = Command::new(env!("CARGO_BIN_EXE_ggraph"))
        .arg("devices")
        .env("GGRAPH_SIM_DEVICES", "64MiB")
        .output()
        .expect("the ggraph binary starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let found: usize = stdout
        .lines()
        .filter(|l| l.starts_with("backend "))
        .map(|l| {
            let n = l.split_whitespace().nth(2).expect("a device count");
            n.parse::<usize>().expect("a device count")
        })
        .sum();
    let rows = device_rows(&stdout);
    assert_eq!(rows.len(), found, "a row per device found:\n{stdout}");
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert!(
        names.contains(&"CPU") && names.contains(&"sim:0"),
        "{stdout}"
    );
    if std::env::var("GGRAPH_REQUIRE_WGPU").as_deref() == Ok("1") {
        assert!(
            names.iter().any(|n| n.starts_with("wgpu:")),
            "GGRAPH_REQUIRE_WGPU=1 but no wgpu device ran the sample:\n{stdout}\n{stderr}"
        );
    }
    for r in &rows {
        // device kind free(2) total(2) nodes ms nmse
        let nodes: usize = r[6].parse().expect("a node count");
        let nmse: f64 = r[8].parse().expect("an nmse");
        assert!(
            nodes > 10 && nmse < 5e-4,
            "{}: {nodes} nodes, nmse {nmse}",
            r[0]
        );
    }
    // nothing on stderr: no logs unless asked, no progress off a terminal
    assert!(stderr.is_empty(), "{stderr}");
}

/// The devices a model takes by default, as llama.cpp picks them: the
/// discrete GPUs; integrated ones only where there is none, and those of
/// one backend only.
#[test]
fn integrated_gpus_are_used_only_without_a_discrete_one() {
    use std::sync::Arc;

    use ggraph::options::default_gpus;
    use ggraph_core::backend::Device;
    use ggraph_gpu::GpuDevice;
    use ggraph_gpu::emulator::EmuRuntime;

    let discrete = |i| GpuDevice::new(EmuRuntime::new(i, 1 << 20, true), "cuda") as Arc<dyn Device>;
    let integrated = |i, backend| {
        GpuDevice::new(EmuRuntime::integrated(i, 1 << 20, true), backend) as Arc<dyn Device>
    };
    let names = |devices: Vec<Arc<dyn Device>>| -> Vec<String> {
        default_gpus(devices)
            .iter()
            .map(|d| d.name().to_string())
            .collect()
    };
    assert_eq!(
        names(vec![integrated(0, "cuda"), discrete(1), discrete(2)]),
        ["cuda:1", "cuda:2"]
    );
    // the same integrated GPU seen by two backends counts once
    assert_eq!(
        names(vec![
            integrated(0, "cuda"),
            integrated(0, "wgpu"),
            integrated(1, "cuda")
        ]),
        ["cuda:0", "cuda:1"]
    );
    assert!(names(Vec::new()).is_empty());
}
