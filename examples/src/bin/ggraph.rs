//! `ggraph`: lists the devices of every compiled-in backend and runs a
//! sample graph on each.
//!
//! Usage:
//!   ggraph [devices] [--weights F32|F16|Q8_0|Q4_0|...]
//!   ggraph estimate|header|check MODEL ...   (see cli/)

use std::process::ExitCode;
use std::sync::Arc;

use ggraph::DType;
use ggraph::backend::Device;
use ggraph::util::format_bytes;

#[path = "../cli/mod.rs"]
mod cli;

fn usage() -> String {
    format!(
        "usage: ggraph [devices] [--weights TYPE]\n       ggraph COMMAND ...\n\n\
         devices          list every device found and run a sample llama graph on each\n\
         {}\n\n\
         Simulated devices: GGRAPH_SIM_DEVICES=2GiB,4GiB ggraph devices",
        cli::SUMMARY
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = args.first().and_then(|cmd| cli::run(cmd, &args[1..])) {
        return code;
    }
    let mut weights = DType::Q8_0;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "devices" => {}
            "--weights" => {
                i += 1;
                match args.get(i).and_then(|s| DType::from_name(s)) {
                    Some(t) => weights = t,
                    None => {
                        eprintln!(
                            "--weights needs a type name (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K), not {}",
                            args.get(i).map_or("nothing", |s| s.as_str())
                        );
                        return ExitCode::from(2);
                    }
                }
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument '{other}'\n{}", usage());
                return ExitCode::from(2);
            }
        }
        i += 1;
    }
    devices(weights)
}

fn devices(weights: DType) -> ExitCode {
    let registry = ggraph::registry();
    for b in registry.backends() {
        println!("backend {:<6} {} device(s)", b.name(), b.devices().len());
    }
    let devices: Vec<Arc<dyn Device>> = registry.devices();
    let (config, shape) = cli::devices_sample::sample_config();
    println!(
        "\nsample graph: llama, {} layers, n_embd {}, {} tokens, {} weights\n",
        config.n_layer, config.n_embd, shape.n_tokens, weights
    );
    println!(
        "{:<8} {:<5} {:>11} {:>11} {:>6} {:>9} {:>10}  description",
        "device", "kind", "free", "total", "nodes", "ms", "nmse"
    );
    let mut failed = false;
    for d in &devices {
        let m = d.memory();
        let run = cli::devices_sample::run_sample(d, weights);
        let (nodes, ms, err) = match &run {
            Ok(r) => (
                r.nodes.to_string(),
                format!("{:.2}", r.millis),
                format!("{:.1e}", r.nmse),
            ),
            Err(e) => {
                failed = true;
                eprintln!("{}: {e}", d.name());
                ("-".into(), "failed".into(), "-".into())
            }
        };
        if let Ok(r) = &run
            && !r.passed()
        {
            failed = true;
        }
        println!(
            "{:<8} {:<5} {:>11} {:>11} {:>6} {:>9} {:>10}  {}",
            d.name(),
            format!("{:?}", d.kind()).to_lowercase(),
            format_bytes(m.free_bytes),
            format_bytes(m.total_bytes),
            nodes,
            ms,
            err,
            d.description()
        );
    }
    println!(
        "\nnmse: the logits against the f64 reference; a device passes under {:.0e} with {weights} weights",
        cli::devices_sample::sample_bound(weights)
    );
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
