//! `ggraph`: lists the devices of every compiled-in backend and runs a
//! sample graph on each (the default command), and the subcommands on
//! model files (see cli/).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use clap_complete::Shell;
use ggraph::DType;
use ggraph::backend::Device;
use ggraph::logs::Verbosity;
use ggraph::util::format_bytes;
use ggraph::{logs, tool, values};

#[path = "../cli/mod.rs"]
mod cli;

const AFTER_HELP: &str = "\
Simulated devices: GGRAPH_SIM_DEVICES=2GiB,4GiB ggraph devices
Logs: -v, -vv or RUST_LOG=ggraph=debug (every scheduler pass, split and allocation)";

/// ggraph: tensor graphs across CPUs and GPUs
///
/// Without a command, lists every device found and runs a sample llama
/// graph on each (`ggraph devices`).
#[derive(Parser, Debug)]
#[command(name = "ggraph", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(flatten)]
    log: Verbosity,
    /// Weights of the sample graph (without a command) [default: Q8_0]
    #[arg(long, value_name = "TYPE", value_parser = values::weight_dtype)]
    weights: Option<DType>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Args, Clone, Debug)]
struct DevicesArgs {
    /// Weights of the sample graph: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K
    #[arg(long, value_name = "TYPE", default_value = "Q8_0", value_parser = values::weight_dtype)]
    weights: DType,
    /// Also the devices of llama.cpp `ggml-rpc-server`s
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    rpc: Option<String>,
}

// parsed once per run: the size of a variant does not matter
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// List every device found and run a sample llama graph on each (the
    /// default)
    ///
    /// Every device of every compiled-in backend, with a small llama graph
    /// run on each and its logits checked against the f64 reference.
    /// GGRAPH_SIM_DEVICES=2GiB,4GiB adds simulated GPUs.
    Devices(DevicesArgs),
    #[command(flatten)]
    Model(cli::ModelCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    ///
    /// For bash: `ggraph completions bash > ~/.local/share/bash-completion/completions/ggraph`.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
}

fn main() -> ExitCode {
    let (cli, matches) = tool::parse_with_matches::<Cli>();
    if cli.weights.is_some() && cli.command.is_some() {
        tool::usage_error::<Cli>(
            clap::error::ErrorKind::ArgumentConflict,
            "--weights before a command: write `ggraph devices --weights TYPE`",
        )
        .exit();
    }
    // a server logs each request, as llama-server does
    let serving = matches!(
        cli.command,
        Some(Command::Model(cli::ModelCommand::Serve(_)))
    );
    let default = serving.then(|| "ggraph_server=info".parse().ok()).flatten();
    logs::init_with(cli.log.log_level, default);
    match cli.command {
        None => devices(cli.weights.unwrap_or(DType::Q8_0), None),
        Some(Command::Devices(d)) => devices(d.weights, d.rpc.as_deref()),
        Some(Command::Model(m)) => m.run_with(matches.subcommand().map(|(_, sub)| sub)),
        Some(Command::Completions { shell }) => {
            cli::out(&tool::completions::<Cli>(shell));
            ExitCode::SUCCESS
        }
    }
}

fn devices(weights: DType, rpc: Option<&str>) -> ExitCode {
    let start = Instant::now();
    let registry = ggraph::registry();
    for b in registry.backends() {
        println!("backend {:<6} {} device(s)", b.name(), b.devices().len());
    }
    let mut devices: Vec<Arc<dyn Device>> = registry.devices();
    if let Some(list) = rpc {
        match ggraph::options::rpc_devices(list) {
            Ok(remote) => {
                println!("backend {:<6} {} device(s)", "RPC", remote.len());
                devices.extend(remote);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    tracing::info!(
        "{} device(s) found in {:.2?}",
        devices.len(),
        start.elapsed()
    );
    let (config, shape) = cli::devices_sample::sample_config();
    println!(
        "\nsample graph: llama, {} layers, n_embd {}, {} tokens, {} weights\n",
        config.n_layer, config.n_embd, shape.n_tokens, weights
    );
    let t = Instant::now();
    let sample = cli::devices_sample::Sample::new(weights);
    tracing::info!(
        "sample graph and its f64 reference made in {:.2?}",
        t.elapsed()
    );
    let w = devices
        .iter()
        .map(|d| d.name().len())
        .max()
        .unwrap_or(0)
        .max(8);
    println!(
        "{:<w$} {:<5} {:>11} {:>11} {:>6} {:>9} {:>10}  description",
        "device", "kind", "free", "total", "nodes", "ms", "nmse"
    );
    let mut failed = false;
    for d in &devices {
        let m = d.memory();
        let t = Instant::now();
        let run = sample
            .as_ref()
            .map_err(|e| e.to_string())
            .and_then(|s| s.run(d).map_err(|e| e.to_string()));
        tracing::info!(
            "{}: sample run (with its set-up and warm-up) in {:.2?}",
            d.name(),
            t.elapsed()
        );
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
            "{:<w$} {:<5} {:>11} {:>11} {:>6} {:>9} {:>10}  {}",
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
    let software: Vec<&str> = devices
        .iter()
        .filter(|d| d.is_software())
        .map(|d| d.name())
        .collect();
    if !software.is_empty() {
        println!(
            "software drivers on the CPU, left out of default placement: {} (use one with \
             --device NAME, or all with GGRAPH_SOFTWARE_GPUS=1)",
            software.join(", ")
        );
    }
    tracing::info!("ggraph devices took {:.2?}", start.elapsed());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    use super::*;

    fn parse(a: &[&str]) -> Result<Cli, clap::Error> {
        tool::try_parse_from(std::iter::once("ggraph").chain(a.iter().copied()))
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn devices_is_the_default_and_takes_its_weights_either_way() {
        let c = parse(&[]).unwrap();
        assert!(c.command.is_none() && c.weights.is_none());
        assert_eq!(
            parse(&["--weights", "f32"]).unwrap().weights,
            Some(DType::F32)
        );
        let Some(Command::Devices(d)) = parse(&["devices", "--weights", "Q4_0"]).unwrap().command
        else {
            panic!("not devices")
        };
        assert_eq!(d.weights, DType::Q4_0);
        let e = parse(&["devices", "--weights", "Q9_9"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains("--weights") && e.to_string().contains("Q9_9"),
            "{e}"
        );
        assert_eq!(parse(&["-vv", "plan", "m.gguf"]).unwrap().log.log_level, 2);
        assert_eq!(parse(&["-v", "devices"]).unwrap().log.log_level, 1);
        assert_eq!(parse(&["plan", "m.gguf", "-v"]).unwrap().log.log_level, 1);
    }

    #[test]
    fn help_exits_0_and_shows_the_defaults() {
        let e = parse(&["--help"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        assert_eq!(e.exit_code(), 0);
        let h = e.to_string();
        for s in [
            "devices",
            "plan",
            "estimate",
            "make-model",
            "completions",
            "--weights <TYPE>",
        ] {
            assert!(h.contains(s), "{s} not in:\n{h}");
        }
        let h = parse(&["plan", "--help"]).unwrap_err().to_string();
        for s in [
            "--n-gpu-layers <N>",
            "--ngl",
            "[default: layer]",
            "[default: 4096]",
            "[default: 2048]",
            "[default: f16]",
            "[default: auto]",
            "--gpu-free <BYTES>",
        ] {
            assert!(h.contains(s), "{s} not in:\n{h}");
        }
    }

    #[test]
    fn unknown_flags_are_named_and_completions_are_printed() {
        let e = parse(&["plan", "m.gguf", "--gpu-fre", "1GiB"]).unwrap_err();
        assert_eq!((e.kind(), e.exit_code()), (ErrorKind::UnknownArgument, 2));
        assert!(e.to_string().contains("--gpu-fre"), "{e}");
        let Some(Command::Completions { shell }) = parse(&["completions", "bash"]).unwrap().command
        else {
            panic!("not completions")
        };
        let s = tool::completions::<Cli>(shell);
        assert!(s.contains("_ggraph") && s.contains("make-model") && s.contains("--gpu-free"));
        assert!(parse(&["completions", "tcsh"]).is_err());
    }
}
