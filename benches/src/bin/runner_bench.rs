//! The llama runner on the CPU: prompt (512 tokens) and generation (128
//! tokens) tokens/s for random-weight llama models, next to llama.cpp on
//! the same shapes on this machine (2 threads).
//!
//! Run: cargo run --release -p ggraph-benches --bin runner_bench [-- --big]
//! (`--big` adds the 4-layer llama-3-8B-shaped model: ~4 GB of weights).
//! `--types Q4_0,F16` keeps some weight types; `--prompt N --gen N` change
//! the token counts (for profiling; the peers' figures are for 512/128);
//! `--profile` prints the CPU kernels' time per op after each phase.
//!
//! `--archs` instead runs every architecture ggraph builds on the small
//! shape (Q4_0 unless `--types` says otherwise): each model is written to
//! a GGUF, which ggraph loads and, with `--llama-bench PATH` (llama.cpp's
//! `llama-bench`, built from the llama-cpp-python sdist), llama.cpp
//! measures in the same run (`-t THREADS -p 512 -n 128 -fa 1`), the two
//! in turn `--rounds N` times (3), medians printed. With `--layouts`
//! ggraph runs each model twice a round, its weights in the CPU's own
//! layout where it has one (`CPU_REPACK`) and in GGUF's, as two rows;
//! `--arch NAME` keeps one architecture.

use std::sync::Arc;

use ggraph::backend::Device;
use ggraph::model::arch::{ARCHITECTURES, ModelConfig};
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::make::{make_vocab, model_gguf};
use ggraph::model::placement::PlacementOptions;
use ggraph::runner::Phase;
use ggraph::{DType, runner};
use ggraph_benches::cpu_timing::print_memory_bandwidth;
use ggraph_benches::llama_bench::llama_bench as run_llama_bench;
use ggraph_benches::peers;
use ggraph_cpu::CpuDevice;

/// Prompt and generation speed as llama-bench measures them: `n_prompt`
/// tokens decoded as one batch into an empty cache, after one untimed
/// decode of the same batch (llama-bench's warm-up: the compute memory is
/// touched and the graph built before the clock starts), then, in another
/// empty context, `n_gen` tokens decoded one at a time.
fn run(shape: &str, weights: DType, n_prompt: usize, n_gen: usize) -> ggraph::Result<(f64, f64)> {
    let desc = runner::random_model(shape, weights, 1)?;
    run_desc(&desc, shape, n_prompt, n_gen, true)
}

/// As [`run`], for a model description; `repack` lets the CPU keep its
/// weights in its own layout where it offers one (`CPU_REPACK`).
fn run_desc(
    desc: &ModelDesc,
    shape: &str,
    n_prompt: usize,
    n_gen: usize,
    repack: bool,
) -> ggraph::Result<(f64, f64)> {
    let weights = desc.config.arch.name;
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let model = Arc::new(Model::load(
        desc,
        &[],
        cpu,
        &PlacementOptions {
            repack,
            ..PlacementOptions::default()
        },
        LoadMode::Real,
        None,
    )?);
    let profile = std::env::args().any(|a| a == "--profile");
    runner::measure_speed(&model, n_prompt, n_gen, &mut |phase, starts| {
        if !profile {
            return;
        }
        if starts {
            ggraph_cpu::profile::start();
            return;
        }
        let name = match phase {
            Phase::Prompt => "prompt",
            Phase::Generation => {
                ggraph_cpu::profile::stop();
                "generation"
            }
        };
        println!(
            "{name}, {shape} {weights}:\n{}",
            ggraph_cpu::profile::report(12)
        );
    })
}

/// The value after `--name`, if given.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> ggraph::Result<()> {
    let big = std::env::args().any(|a| a == "--big");
    let types: Option<Vec<DType>> = arg("--types")
        .map(|list| {
            list.split(',')
                .map(|t| {
                    DType::from_name(t.trim()).ok_or_else(|| {
                        ggraph::Error::InvalidArgument(format!("--types: unknown type {t}"))
                    })
                })
                .collect()
        })
        .transpose()?;
    let count = |name: &str, default: usize| -> ggraph::Result<usize> {
        arg(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| ggraph::Error::InvalidArgument(format!("{name} {v}: not a count")))
        })
    };
    let (n_prompt, n_gen) = (count("--prompt", 512)?, count("--gen", 128)?);
    if std::env::args().any(|a| a == "--archs") {
        let types = types.unwrap_or(vec![DType::Q4_0]);
        let rounds = count("--rounds", 3)?.max(1);
        let layouts = std::env::args().any(|a| a == "--layouts");
        let only = arg("--arch");
        return arch_table(
            &types,
            n_prompt,
            n_gen,
            rounds,
            arg("--llama-bench"),
            layouts,
            only,
        );
    }
    println!(
        "llama runner on the CPU ({} threads), prompt {n_prompt} / generation {n_gen} tokens/s",
        rayon_threads()
    );
    let here = peers::measured_here();
    print_memory_bandwidth("before");
    println!(
        "llama.cpp: the issue's figures / measured on this kind of machine ({})",
        here.label
    );
    println!(
        "{:<14} {:>10} {:>17} {:>10} {:>17}",
        "model", "ggraph pp", "llama.cpp pp", "ggraph tg", "llama.cpp tg"
    );
    let rows = peers::issue().runner.iter().filter(|p| {
        (big || p.shape == "small") && types.as_ref().is_none_or(|ts| ts.contains(&p.weights))
    });
    for peer in rows {
        let (pp, tg) = run(&peer.shape, peer.weights, n_prompt, n_gen)?;
        let today = here.runner(&peer.shape, peer.weights);
        let pair = |issue: f64, today: Option<f64>| {
            format!(
                "{issue:.1}/{}",
                today.map_or("-".into(), |t| format!("{t:.1}"))
            )
        };
        println!(
            "{:<14} {:>10.1} {:>17} {:>10.1} {:>17}",
            format!("{} {}", peer.shape, peer.weights),
            pp,
            pair(peer.prompt, today.map(|t| t.prompt)),
            tg,
            pair(peer.generation, today.map(|t| t.generation))
        );
    }
    print_memory_bandwidth("after");
    Ok(())
}

/// Every architecture on the small shape, ggraph next to llama-bench on
/// the same GGUF.
fn arch_table(
    types: &[DType],
    n_prompt: usize,
    n_gen: usize,
    rounds: usize,
    llama_bench: Option<String>,
    layouts: bool,
    only: Option<String>,
) -> ggraph::Result<()> {
    let variants: &[bool] = if layouts { &[true, false] } else { &[true] };
    let threads = rayon_threads();
    println!(
        "architectures on the small shape, CPU ({threads} threads), prompt {n_prompt} / generation {n_gen} tokens/s, medians of {rounds} rounds{}",
        if llama_bench.is_some() {
            ", llama-bench on the same files"
        } else {
            " (no --llama-bench: ggraph only)"
        }
    );
    println!(
        "{:<24} {:>10} {:>13} {:>10} {:>13}",
        "model", "ggraph pp", "llama.cpp pp", "ggraph tg", "llama.cpp tg"
    );
    let dir = std::env::temp_dir().join(format!("ggraph-arch-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ggraph::Error::InvalidArgument(e.to_string()))?;
    for &weights in types {
        // models with logits: prompts and generation (embedding models
        // generate nothing)
        for arch in ARCHITECTURES
            .iter()
            .filter(|a| !a.embeddings_only && only.as_ref().is_none_or(|o| o == a.name))
        {
            let p = runner::preset("small")?;
            let c = ModelConfig::new(
                arch,
                p.n_vocab,
                p.n_embd,
                p.n_layer,
                p.n_head,
                p.n_head_kv,
                p.n_ff,
            );
            let random = ModelDesc::random(c, weights, 1)?;
            let path = dir.join(format!("{}-{weights}.gguf", arch.name));
            let bytes = model_gguf(&random, make_vocab(random.config.n_vocab))?.to_bytes()?;
            std::fs::write(&path, bytes)
                .map_err(|e| ggraph::Error::InvalidArgument(format!("{}: {e}", path.display())))?;
            let file = path.to_string_lossy().to_string();
            let desc = runner::open_model(&file)?;
            // the two in turn, `rounds` times; the medians
            let mut figures: Vec<[Vec<f64>; 4]> = vec![Default::default(); variants.len()];
            for _ in 0..rounds {
                for (f, &repack) in figures.iter_mut().zip(variants) {
                    let (pp, tg) = run_desc(&desc, "small", n_prompt, n_gen, repack)?;
                    f[0].push(pp);
                    f[2].push(tg);
                }
                if let Some(bin) = &llama_bench
                    && let (Some(lpp), Some(ltg)) =
                        run_llama_bench(bin, &file, threads, n_prompt, n_gen, &[])
                {
                    for f in figures.iter_mut() {
                        f[1].push(lpp);
                        f[3].push(ltg);
                    }
                }
            }
            let cell = |x: &mut Vec<f64>| match median(x) {
                Some(v) => format!("{v:.1}"),
                None => "-".into(),
            };
            for (f, &repack) in figures.iter_mut().zip(variants) {
                let [pp, lpp, tg, ltg] = f;
                let label = match (layouts, repack) {
                    (false, _) => format!("{} {weights}", arch.name),
                    (true, true) => format!("{} {weights} repack", arch.name),
                    (true, false) => format!("{} {weights} gguf", arch.name),
                };
                println!(
                    "{:<24} {:>10} {:>13} {:>10} {:>13}",
                    label,
                    cell(pp),
                    cell(lpp),
                    cell(tg),
                    cell(ltg)
                );
            }
            std::fs::remove_file(&path).ok();
        }
    }
    std::fs::remove_dir(&dir).ok();
    Ok(())
}

fn median(x: &mut [f64]) -> Option<f64> {
    x.sort_by(f64::total_cmp);
    x.get(x.len() / 2).copied()
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
