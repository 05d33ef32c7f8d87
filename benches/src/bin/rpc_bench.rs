//! The llama runner over stock `ggml-rpc-server`s on loopback, beside
//! the CPU alone: prompt and generation tokens/s and the bytes that
//! cross the wire per generated token, for the CPU alone, CPU + 1
//! server (every layer on it), CPU + 2 servers by layers and by rows;
//! then a model's upload time to a server without and with its cache
//! (`-c`: weights over 10 MiB are sent by hash when the server has them).
//!
//! Run: cargo run --release -p ggraph-benches --bin rpc_bench
//! [-- --shape small --weights Q4_0 --prompt 512 --gen 128 --rounds 3
//!  --upload-shape 8b-4l --threads N --llama-bench PATH --upload-only
//!  --only PLACEMENT]
//! `--only` keeps the placements whose name contains it ("1 server"),
//! and skips the upload.
//! The servers are llama.cpp's own (scripts/rpc-server builds one;
//! GGRAPH_RPC_SERVER names another), each with --threads threads (all
//! cores by default), as is the CPU alone.
//!
//! With `--llama-bench PATH` (llama.cpp's `llama-bench` from the same
//! sdist), llama.cpp runs the same model in the same rounds: on its CPU
//! with `--repack 0` (the kernels a server runs: a server has no
//! repacked buffer type) and through its own RPC client to a stock
//! server (`-ngl 99 --rpc`).

use std::sync::Arc;
use std::time::Instant;

use ggraph::backend::Device;
use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::Attention;
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::make::{make_vocab, model_gguf};
use ggraph::model::placement::{PlacementOptions, SplitMode};
use ggraph::{DType, runner};
use ggraph_benches::llama_bench::llama_bench;
use ggraph_cpu::CpuDevice;
use ggraph_rpc::local_server::LocalServer;
use ggraph_rpc::{RpcDevice, RpcOptions};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn count(name: &str, default: usize) -> ggraph::Result<usize> {
    arg(name).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| ggraph::Error::InvalidArgument(format!("{name} {v}: not a count")))
    })
}

fn io(e: std::io::Error) -> ggraph::Error {
    ggraph::Error::InvalidArgument(e.to_string())
}

/// One placement's figures.
struct Figures {
    prompt: f64,
    generation: f64,
    /// Bytes sent and received per generated token, all servers, and of
    /// them the graphs' descriptions.
    bytes_per_token: f64,
    graph_bytes_per_token: f64,
    /// Graphs per generated token, and how many of them were reused.
    graphs_per_token: f64,
    reused: f64,
    /// Per generated token: time in exchanges with the servers.
    wire_ms: f64,
    /// Per generated token: requests that waited for a reply.
    round_trips: f64,
}

/// All servers' traffic so far, summed.
#[derive(Clone, Copy, Default)]
struct Totals {
    bytes: u64,
    graphs: u64,
    reused: u64,
    wire_s: f64,
    graph_bytes: u64,
    round_trips: u64,
}

fn traffic(rpc: &[Arc<RpcDevice>]) -> Totals {
    rpc.iter().fold(Totals::default(), |a, d| {
        let t = d.traffic();
        Totals {
            bytes: a.bytes + t.bytes_sent + t.bytes_received,
            graphs: a.graphs + t.graphs_sent + t.graphs_reused,
            reused: a.reused + t.graphs_reused,
            wire_s: a.wire_s + t.wire_time.as_secs_f64(),
            graph_bytes: a.graph_bytes + t.graph_bytes,
            round_trips: a.round_trips + t.round_trips,
        }
    })
}

fn measure(
    desc: &ModelDesc,
    rpc: &[Arc<RpcDevice>],
    mode: SplitMode,
    threads: usize,
    n_prompt: usize,
    n_gen: usize,
) -> ggraph::Result<Figures> {
    let devices: Vec<Arc<dyn Device>> = rpc.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    let opts = PlacementOptions {
        split_mode: mode,
        ..PlacementOptions::default()
    };
    let cpu: Arc<dyn Device> = CpuDevice::with_threads(threads)?;
    let model = Arc::new(Model::load(
        desc,
        &devices,
        cpu,
        &opts,
        LoadMode::Real,
        None,
    )?);
    let context = |n_ctx: usize, n_batch: usize| {
        Context::new(
            model.clone(),
            ContextParams {
                n_ctx,
                n_batch,
                n_ubatch: n_batch,
                attention: Attention::Flash,
                ..ContextParams::default()
            },
        )
    };
    let failed = |e: ggraph::context::DecodeError| ggraph::Error::InvalidArgument(e.to_string());
    let prompt = runner::random_prompt(n_prompt, desc.config.n_vocab, 7);
    let mut pp_ctx = context(n_prompt + 1, n_prompt.max(1))?;
    runner::generate(&mut pp_ctx, &prompt, 1).map_err(failed)?;
    pp_ctx.clear_cache();
    let pp = runner::generate(&mut pp_ctx, &prompt, 1).map_err(failed)?;
    drop(pp_ctx);
    let first = runner::random_prompt(1, desc.config.n_vocab, 9);
    let mut tg_ctx = context(n_gen + 2, 1)?;
    let before = traffic(rpc);
    let tg = runner::generate(&mut tg_ctx, &first, n_gen + 1).map_err(failed)?;
    let after = traffic(rpc);
    let per = |a: u64, b: u64| (a - b) as f64 / (n_gen + 1) as f64;
    Ok(Figures {
        prompt: pp.prompt_tokens_per_s(),
        generation: tg.gen_tokens_per_s(),
        bytes_per_token: per(after.bytes, before.bytes),
        graph_bytes_per_token: per(after.graph_bytes, before.graph_bytes),
        graphs_per_token: per(after.graphs, before.graphs),
        reused: per(after.reused, before.reused),
        wire_ms: 1e3 * (after.wire_s - before.wire_s) / (n_gen + 1) as f64,
        round_trips: per(after.round_trips, before.round_trips),
    })
}

/// llama.cpp on the same model: its CPU without repacked weights (the
/// kernels of a server) and its RPC client to a server of its own.
fn llama_cpp_rows(
    bin: &str,
    desc: &ModelDesc,
    threads: usize,
    n_prompt: usize,
    n_gen: usize,
    rounds: usize,
) -> ggraph::Result<Vec<(&'static str, f64, f64)>> {
    let file = std::env::temp_dir().join(format!("ggraph-rpc-bench-{}.gguf", std::process::id()));
    std::fs::write(
        &file,
        model_gguf(desc, make_vocab(desc.config.n_vocab))?.to_bytes()?,
    )
    .map_err(io)?;
    let path = file.to_string_lossy().to_string();
    // a server of its own: a server serves one client at a time
    let server = LocalServer::start(threads, None).map_err(io)?;
    let endpoint = server.endpoint().to_string();
    let runs: [(&'static str, Vec<&str>); 2] = [
        ("llama.cpp CPU -repack", vec!["--repack", "0"]),
        ("llama.cpp --rpc", vec!["-ngl", "99", "--rpc", &endpoint]),
    ];
    let mut rows = Vec::new();
    for (name, extra) in runs {
        let (mut pp, mut tg) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            if let (Some(p), Some(t)) = llama_bench(bin, &path, threads, n_prompt, n_gen, &extra) {
                pp.push(p);
                tg.push(t);
            }
        }
        if !pp.is_empty() {
            rows.push((name, median(pp), median(tg)));
        }
    }
    let _ = std::fs::remove_file(&file);
    Ok(rows)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ggraph::Result<()> {
    let shape = arg("--shape").unwrap_or("small".into());
    let weights = arg("--weights")
        .map(|t| {
            DType::from_name(&t).ok_or_else(|| {
                ggraph::Error::InvalidArgument(format!("--weights: unknown type {t}"))
            })
        })
        .transpose()?
        .unwrap_or(DType::Q4_0);
    let (n_prompt, n_gen) = (count("--prompt", 512)?, count("--gen", 128)?);
    let rounds = count("--rounds", 3)?.max(1);
    let threads = count(
        "--threads",
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    )?;
    let upload_shape = arg("--upload-shape").unwrap_or("8b-4l".into());

    if !std::env::args().any(|a| a == "--upload-only") {
        runs(&shape, weights, threads, n_prompt, n_gen, rounds)?;
    }
    if arg("--only").is_some() {
        return Ok(());
    }
    upload(&upload_shape, weights, threads)
}

/// The placements' table.
fn runs(
    shape: &str,
    weights: DType,
    threads: usize,
    n_prompt: usize,
    n_gen: usize,
    rounds: usize,
) -> ggraph::Result<()> {
    let servers = [
        LocalServer::start(threads, None).map_err(io)?,
        LocalServer::start(threads, None).map_err(io)?,
    ];
    let rpc: Vec<Arc<RpcDevice>> = servers
        .iter()
        .map(|s| RpcDevice::connect(s.endpoint(), RpcOptions::default()))
        .collect::<ggraph::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let desc = runner::random_model(shape, weights, 1)?;
    println!(
        "llama {shape} {weights} over stock ggml-rpc-server (protocol {}) on loopback, {threads} threads each; \
         prompt {n_prompt} / generation {n_gen} tokens/s, medians of {rounds} rounds",
        rpc[0].protocol_version()
    );
    let setups: [(&str, &[Arc<RpcDevice>], SplitMode); 4] = [
        ("CPU alone", &[], SplitMode::Layer),
        ("CPU + 1 server", &rpc[..1], SplitMode::Layer),
        ("CPU + 2, layers", &rpc[..], SplitMode::Layer),
        ("CPU + 2, rows", &rpc[..], SplitMode::Row),
    ];
    println!(
        "{:<22} {:>10} {:>10} {:>8} {:>12} {:>12} {:>22} {:>12} {:>16}",
        "placement",
        "prompt",
        "generation",
        "vs CPU",
        "bytes/token",
        "of graphs",
        "graphs/token",
        "round trips",
        "ms/token on wire"
    );
    let mut cpu_tg = None;
    let peers = match arg("--llama-bench") {
        Some(bin) => llama_cpp_rows(&bin, &desc, threads, n_prompt, n_gen, rounds)?,
        None => Vec::new(),
    };
    let only = arg("--only");
    for (name, devices, mode) in setups {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let mut figures = Vec::new();
        for _ in 0..rounds {
            figures.push(measure(&desc, devices, mode, threads, n_prompt, n_gen)?);
        }
        let pp = median(figures.iter().map(|f| f.prompt).collect());
        let tg = median(figures.iter().map(|f| f.generation).collect());
        let base = *cpu_tg.get_or_insert(tg);
        let f = &figures[0];
        println!(
            "{:<22} {:>10.1} {:>10.1} {:>7.0}% {:>12.0} {:>12.0} {:>8.1} ({:>5.1} reused) {:>12.1} {:>16.2}",
            name,
            pp,
            tg,
            100.0 * tg / base,
            f.bytes_per_token,
            f.graph_bytes_per_token,
            f.graphs_per_token,
            f.reused,
            f.round_trips,
            f.wire_ms
        );
    }
    for (name, pp, tg) in peers {
        let base = cpu_tg.unwrap_or(tg);
        println!(
            "{name:<22} {pp:>10.1} {tg:>10.1} {:>7.0}%",
            100.0 * tg / base
        );
    }
    Ok(())
}

/// The same model uploaded twice to a server with its cache.
fn upload(upload_shape: &str, weights: DType, threads: usize) -> ggraph::Result<()> {
    let cache = std::env::temp_dir().join(format!("ggraph-rpc-bench-cache-{}", std::process::id()));
    std::fs::create_dir_all(&cache).map_err(io)?;
    let server = LocalServer::start(threads, Some(&cache)).map_err(io)?;
    let remote: Vec<Arc<dyn Device>> =
        RpcDevice::connect(server.endpoint(), RpcOptions::default())?
            .into_iter()
            .map(|d| d as Arc<dyn Device>)
            .collect();
    // from a file, as a user loads: the time is reading and sending, not
    // making random weights
    let file = std::env::temp_dir().join(format!("ggraph-rpc-upload-{}.gguf", std::process::id()));
    let random = runner::random_model(upload_shape, weights, 1)?;
    std::fs::write(
        &file,
        model_gguf(&random, make_vocab(random.config.n_vocab))?.to_bytes()?,
    )
    .map_err(io)?;
    drop(random);
    let big = runner::open_model(&file.to_string_lossy())?;
    println!(
        "\nupload of llama {upload_shape} {weights} ({:.0} MiB of weights, from a GGUF file) to a server with its cache (-c):",
        big.total_bytes() as f64 / (1 << 20) as f64
    );
    let load = |devices: &[Arc<dyn Device>]| -> ggraph::Result<f64> {
        let start = Instant::now();
        let m = Model::load(
            &big,
            devices,
            CpuDevice::with_threads(threads)?,
            &PlacementOptions::default(),
            LoadMode::Real,
            None,
        )?;
        let s = start.elapsed().as_secs_f64();
        drop(m);
        Ok(s)
    };
    println!("  {:<24} {:>7.2} s", "CPU alone (no upload)", load(&[])?);
    for round in ["first (cache empty)", "again (from the cache)"] {
        println!("  {round:<24} {:>7.2} s", load(&remote)?);
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}
