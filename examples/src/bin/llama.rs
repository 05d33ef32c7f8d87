//! `llama`: a llama runner built on ggraph. Loads a GGUF (or makes a
//! random-weight model), places it across the devices, and generates
//! greedily; prints tokens/s, memory per device and the splits.

use std::process::ExitCode;
use std::sync::Arc;

use ggraph::args::{Args, Spec};
use ggraph::context::Context;
use ggraph::model::estimate::exact::{FitRequest, check_fits, fit};
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::GpuLayers;
use ggraph::model::tokenizer::Tokenizer;
use ggraph::{DType, options, runner};

const USAGE: &str = "usage: llama (MODEL.gguf | --random SHAPE) [options]

  --random SHAPE      a random-weight model: tiny, small (n_embd 512, 8
                      layers, vocab 32000), 8b-4l (llama-3-8B layers, 4 of them)
  --weights TYPE      weights of the random model (F32, F16, Q8_0, Q4_0, Q4_K, Q6_K)
  --seed N            seed of the random model (default 1)
  --prompt TEXT       the prompt, tokenised with the model's vocabulary
  --prompt-ids IDS    the prompt as token ids, e.g. 1,300,301
  --random-prompt N   N pseudo-random prompt tokens (for timing)
  -n N                tokens to generate (default 32)
  --print-ids         print the generated token ids
  --fit               offload as many layers as fit the devices
  --verbose           print the scheduler's explanation of every node";

const SPEC: Spec = Spec {
    values: &[
        "--random",
        "--weights",
        "--seed",
        "--prompt",
        "--prompt-ids",
        "--random-prompt",
        "-n",
    ],
    repeated: &[],
    flags: &["--print-ids", "--fit", "--verbose"],
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!(
            "{USAGE}\n\n{}\n\n{}\n\n{}",
            options::DEVICE_HELP,
            options::PLACEMENT_HELP,
            options::CONTEXT_HELP
        );
        return ExitCode::SUCCESS;
    }
    // `-n 16` is spelled like a long option for the parser
    let args: Vec<String> = args
        .into_iter()
        .map(|a| if a == "-n" { "-n".into() } else { a })
        .collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llama: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let specs = [
        &SPEC,
        &options::DEVICE_SPEC,
        &options::PLACEMENT_SPEC,
        &options::CONTEXT_SPEC,
    ];
    let args: Vec<String> = args
        .iter()
        .map(|a| if a == "-n" { "--n".into() } else { a.clone() })
        .collect();
    let spec_n = Spec {
        values: &["--n"],
        repeated: &[],
        flags: &[],
    };
    let mut all = specs.to_vec();
    all.push(&spec_n);
    let a = Args::parse_all(&all, &args)?;
    let (devices, cpu) = options::devices(&a)?;
    let mut opts = options::placement(&a)?;
    let params = options::context(&a)?;
    let desc = match (a.positional.as_slice(), a.value("--random")) {
        ([path], None) => runner::open_model(path).map_err(|e| e.to_string())?,
        ([], Some(shape)) => {
            let weights = a.parsed("--weights", DType::Q4_0, DType::from_name, "a type name")?;
            let seed = a.parsed("--seed", 1u64, |s| s.parse().ok(), "a number")?;
            runner::random_model(shape, weights, seed).map_err(|e| e.to_string())?
        }
        _ => return Err(format!("give one MODEL.gguf or --random SHAPE\n{USAGE}")),
    };
    if a.flag("--fit") {
        let req = FitRequest {
            margin: 256 << 20,
            layers_fixed: a.value("--n-gpu-layers").is_some(),
            fit_ctx: false,
            min_ctx: params.n_ctx,
        };
        let f =
            fit(&desc, &devices, cpu.clone(), &opts, &params, req).map_err(|e| e.to_string())?;
        eprintln!("fit: {}", f.reason);
        opts.n_gpu_layers = GpuLayers::Count(f.estimate.n_gpu_layers);
    }
    // weights, KV cache and compute memory must fit before any is loaded
    check_fits(&desc, &devices, cpu.clone(), &opts, &params).map_err(|e| e.to_string())?;
    let t = std::time::Instant::now();
    let model = Model::load(&desc, &devices, cpu, &opts, LoadMode::Real, None)
        .map_err(|e| e.to_string())?;
    eprintln!("loaded in {:.2} s", t.elapsed().as_secs_f64());
    // the tokenizer is needed for --prompt and to print text; a vocabulary
    // it cannot read only matters for --prompt
    let tokenizer = match &model.tokens {
        Some(t) => match Tokenizer::for_vocab(t.clone(), &model.vocab) {
            Ok(t) => Some(t),
            Err(e) if a.value("--prompt").is_some() => {
                return Err(format!("{e} (--prompt-ids)"));
            }
            Err(_) => None,
        },
        None => None,
    };
    let n_vocab = model.config.n_vocab;
    let mut ctx = Context::new(Arc::new(model), params).map_err(|e| e.to_string())?;
    let prompt: Vec<i32> = if let Some(ids) = a.value("--prompt-ids") {
        ids.split(',')
            .map(|s| {
                s.trim()
                    .parse::<i32>()
                    .map_err(|_| format!("--prompt-ids: '{s}' is not a token id"))
            })
            .collect::<Result<_, _>>()?
    } else if let Some(text) = a.value("--prompt") {
        let t = tokenizer
            .as_ref()
            .ok_or("this model has no vocabulary: use --prompt-ids")?;
        t.encode(text)
    } else {
        let n = a.parsed("--random-prompt", 8usize, |s| s.parse().ok(), "a number")?;
        runner::random_prompt(n, n_vocab, 42)
    };
    let n_predict = a.parsed("--n", 32usize, |s| s.parse().ok(), "a number")?;
    let g = runner::generate(&mut ctx, &prompt, n_predict).map_err(|e| e.to_string())?;
    if let Some(t) = &tokenizer {
        println!("{}{}", t.decode(&prompt), t.decode(&g.generated));
    }
    if a.flag("--print-ids") {
        let ids: Vec<String> = g.generated.iter().map(|i| i.to_string()).collect();
        println!("{}", ids.join(","));
    }
    eprintln!(
        "prompt {} tokens in {:.3} s: {:.1} tokens/s; generation {} tokens in {:.3} s: {:.1} tokens/s",
        g.prompt.len(),
        g.prompt_seconds,
        g.prompt_tokens_per_s(),
        g.generated.len(),
        g.gen_seconds,
        g.gen_tokens_per_s()
    );
    eprint!("{}", runner::memory_table(&ctx));
    eprintln!("{}", runner::schedule_summary(&ctx));
    if a.flag("--verbose") {
        eprint!("{}", ctx.scheduler().explain());
    }
    Ok(())
}
