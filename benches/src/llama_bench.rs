//! Running llama.cpp's `llama-bench` beside a bench program.

/// llama-bench's prompt and generation tokens/s on `file` (its JSON
/// output's `avg_ts`), or `None` where it failed (said on stderr).
pub fn llama_bench(
    bin: &str,
    file: &str,
    threads: usize,
    n_prompt: usize,
    n_gen: usize,
    extra: &[&str],
) -> (Option<f64>, Option<f64>) {
    let out = std::process::Command::new(bin)
        .args([
            "-m",
            file,
            "-t",
            &threads.to_string(),
            "-fa",
            "1",
            "-o",
            "json",
        ])
        .args(["-p", &n_prompt.to_string(), "-n", &n_gen.to_string()])
        .args(extra)
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => {
            eprintln!(
                "llama-bench on {file}: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("failed")
            );
            return (None, None);
        }
        Err(e) => {
            eprintln!("llama-bench ({bin}): {e}");
            return (None, None);
        }
    };
    let rows: Vec<ggraph::model::serde_json::Value> =
        ggraph::model::serde_json::from_slice(&out).unwrap_or_default();
    let speed = |prompt: bool| {
        rows.iter()
            .find(|r| (r["n_prompt"].as_u64().unwrap_or(0) > 0) == prompt)
            .and_then(|r| r["avg_ts"].as_f64())
    };
    (speed(true), speed(false))
}
