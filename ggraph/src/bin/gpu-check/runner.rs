//! The llama runner with every layer on one GPU: prompt and generation
//! tokens/s of random-weight models, and the memory bandwidth generation
//! uses against the device's copy bandwidth.

use std::sync::Arc;
use std::time::Instant;

use ggraph::backend::Device;
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::{DType, Result, runner};

use crate::bench::figure;

/// What one row of the runner table needs.
pub struct Settings<'a> {
    /// Preset shapes ([`runner::SHAPES`]).
    pub shapes: &'a [String],
    /// Weight types.
    pub types: &'a [DType],
    /// Prompt tokens (llama-bench's `-p`).
    pub prompt: usize,
    /// Generated tokens (llama-bench's `-n`).
    pub generation: usize,
    /// The device's copy bandwidth in GB/s, where it was measured.
    pub bandwidth: Option<f64>,
}

/// Bytes of weights a generated token reads: every matrix once, but of
/// the token embeddings only a row.
fn bytes_per_token(desc: &ModelDesc) -> u64 {
    desc.tensors
        .iter()
        .map(|t| {
            let rows: usize = t.shape.iter().skip(1).product();
            let row_len = t.shape.first().copied().unwrap_or(0);
            let row = t.dtype.row_size(row_len).unwrap_or(0) as u64;
            if t.name == "token_embd.weight" {
                row
            } else {
                row * rows as u64
            }
        })
        .sum()
}

/// The table on `gpu`: one row per shape and weight type. `false` when a
/// row failed (its error is printed in its place).
pub fn table(gpu: &Arc<dyn Device>, s: &Settings) -> bool {
    println!(
        "\nllama runner, every layer on {} (prompt {} / generation {} tokens/s, flash attention; GB/s: weights read per token x tokens/s):",
        gpu.name(),
        s.prompt,
        s.generation
    );
    println!(
        "{:<14} {:>11} {:>7} {:>10} {:>10} {:>8} {:>8}",
        "model", "weights", "load s", "pp t/s", "tg t/s", "GB/s", "of copy"
    );
    let mut ok = true;
    for shape in s.shapes {
        for &w in s.types {
            let label = format!("{shape} {w}");
            match row(gpu, shape, w, s) {
                Ok(line) => println!("{label:<14} {line}"),
                Err(e) => {
                    ok = false;
                    println!("{label:<14} FAILED: {e}");
                }
            }
        }
    }
    ok
}

fn row(gpu: &Arc<dyn Device>, shape: &str, w: DType, s: &Settings) -> Result<String> {
    let start = Instant::now();
    let desc = runner::random_model(shape, w, 1)?;
    let cpu: Arc<dyn Device> = ggraph_cpu::CpuDevice::new();
    let model = Arc::new(Model::load(
        &desc,
        std::slice::from_ref(gpu),
        cpu,
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )?);
    let load = start.elapsed().as_secs_f64();
    let (pp, tg) = runner::measure_speed(&model, s.prompt, s.generation, &mut |_, _| {})?;
    let per_token = bytes_per_token(&desc);
    let used = per_token as f64 * tg / 1e9;
    let share = s
        .bandwidth
        .map_or("-".into(), |b| format!("{}%", figure(100.0 * used / b)));
    Ok(format!(
        "{:>11} {load:>7.1} {:>10} {:>10} {:>8} {share:>8}",
        ggraph::util::format_bytes(per_token),
        figure(pp),
        figure(tg),
        figure(used)
    ))
}
