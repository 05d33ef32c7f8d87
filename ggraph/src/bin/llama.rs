//! `llama`: a llama runner built on ggraph. Loads a GGUF (or makes a
//! random-weight model), places it across the devices, and generates with
//! llama.cpp's samplers; prints tokens/s, memory per device and the
//! splits.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use clap::builder::PossibleValuesParser;
use clap::error::ErrorKind;
use clap_complete::Shell;
use ggraph::context::{Context, DecodeError};
use ggraph::logs::Verbosity;
use ggraph::model::chat_template::ChatMessage;
use ggraph::model::generation::{self, Hooks, Request, Retry, StopReason};
use ggraph::model::harmony::{Channel, Segment};
use ggraph::model::loaded::Model as LoadedModel;
use ggraph::model::reasoning::{ReasoningFormat, ReasoningSplitter};
use ggraph::model::sampling::{GrammarVocab, ModelSampling, TokenSampler};
use ggraph::model::tokenizer::Tokenizer;
use ggraph::options::{ContextArgs, DeviceArgs, FitArgs, LLAMA_CPP_SPELLINGS, PlacementArgs};
use ggraph::progress::Progress;
use ggraph::sampling_args::SamplingArgs;
use ggraph::util::format_bytes;
use ggraph::{DType, logs, runner, tool, values};

/// Prompt token ids, as `--prompt-ids` gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TokenIds(Vec<i32>);

fn token_ids(s: &str) -> Result<TokenIds, String> {
    values::token_ids(s).map(TokenIds)
}

/// llama: a llama runner on ggraph
///
/// Loads a GGUF (or makes a random-weight model), places it across the
/// devices, decodes the prompt and generates with llama.cpp's samplers
/// and their defaults (--temp 0 is greedy); prints tokens/s, memory per
/// device and the splits.
#[derive(Parser, Debug)]
#[command(name = "llama", version, after_help = LLAMA_CPP_SPELLINGS)]
struct Cli {
    /// The model, a .gguf (or give --random)
    #[arg(value_name = "MODEL.gguf")]
    model: Option<String>,
    /// The model, as llama.cpp names it
    #[arg(
        short = 'm',
        long = "model",
        value_name = "MODEL.gguf",
        conflicts_with = "model"
    )]
    model_flag: Option<String>,
    /// A random-weight model: tiny, small (n_embd 512, 8 layers, vocab
    /// 32000), 8b-4l (llama-3-8B layers, 4 of them)
    #[arg(long, value_name = "SHAPE", conflicts_with_all = ["model", "model_flag"],
          value_parser = PossibleValuesParser::new(runner::SHAPES))]
    random: Option<String>,
    /// Weights of the random model: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K
    #[arg(long, value_name = "TYPE", default_value = "Q4_0", value_parser = values::weight_dtype)]
    weights: DType,
    /// Seed of the random model's weights
    #[arg(long = "weights-seed", value_name = "N", default_value_t = 1,
          value_parser = values::u64_number)]
    weights_seed: u64,
    /// The prompt, tokenised with the model's own tokenizer (BOS as the
    /// vocabulary asks, control tokens such as <|im_start|> recognised)
    #[arg(short = 'p', long, value_name = "TEXT", allow_hyphen_values = true,
          conflicts_with_all = ["prompt_ids", "chat"])]
    prompt: Option<String>,
    /// The prompt as token ids, e.g. 1,300,301
    #[arg(long = "prompt-ids", value_name = "IDS", value_parser = token_ids,
          conflicts_with = "chat")]
    prompt_ids: Option<TokenIds>,
    /// A user message, rendered with the model's chat template
    /// (tokenizer.chat_template) and answered until an end-of-turn token
    #[arg(long, value_name = "MSG", allow_hyphen_values = true)]
    chat: Option<String>,
    /// With --chat on a model whose template carries reasoning (gpt-oss's
    /// Harmony channels, Gemma 4's thought channel, thinking tags): print
    /// the reasoning before the answer; without it only the answer is
    /// printed
    #[arg(long, requires = "chat")]
    reasoning: bool,
    /// A system message before the --chat message
    #[arg(
        long,
        value_name = "MSG",
        allow_hyphen_values = true,
        requires = "chat"
    )]
    system: Option<String>,
    /// Print the prompt's token ids ([1, 2, 3]) before the text
    #[arg(long = "print-prompt-ids")]
    print_prompt_ids: bool,
    /// N pseudo-random prompt tokens (for timing), without --prompt or
    /// --prompt-ids
    #[arg(long = "random-prompt", value_name = "N", default_value_t = 8,
          value_parser = values::count)]
    random_prompt: usize,
    /// Tokens to generate at most (generation also stops at an
    /// end-of-generation token); 0 only processes the prompt
    #[arg(short = 'n', long = "n-predict", value_name = "N", default_value_t = 32,
          value_parser = values::count)]
    n_predict: usize,
    /// Print the generated token ids
    #[arg(long = "print-ids")]
    print_ids: bool,
    /// When a device loses its memory mid-run (a --rpc server that
    /// restarted), wait up to SECONDS for it, upload what it lost and go
    /// on, decoding again the tokens a lost KV cache held; 0 ends the run
    /// with the error
    #[arg(long = "rpc-retry", value_name = "SECONDS", default_value_t = 0,
          value_parser = values::count)]
    rpc_retry: usize,
    #[command(flatten)]
    fit: FitArgs,
    /// Print the scheduler's explanation of every node (logs: -v)
    #[arg(long)]
    verbose: bool,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[arg(long, value_name = "SHELL")]
    completions: Option<Shell>,
    #[command(flatten)]
    log: Verbosity,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    placement: PlacementArgs,
    #[command(flatten)]
    context: ContextArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
}

fn main() -> ExitCode {
    let (cli, matches) = tool::parse_with_matches::<Cli>();
    if let Some(shell) = cli.completions {
        print!("{}", tool::completions::<Cli>(shell));
        return ExitCode::SUCCESS;
    }
    logs::init(cli.log.log_level);
    let user_set = SamplingArgs::user_set(&matches);
    match run(&cli, &user_set) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llama: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Text on stdout now, not at the next newline.
fn emit(text: &str) {
    use std::io::Write;
    if text.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}

/// An answer's channels as they stream to `out`: the answer, and the
/// others (the reasoning) too with `--reasoning`, each under its name.
struct Channels<W: std::io::Write> {
    splitter: ReasoningSplitter,
    reasoning: bool,
    /// The channel printed last, under its name (with `--reasoning`).
    current: Option<Channel>,
    out: W,
}

impl<W: std::io::Write> Channels<W> {
    fn new(splitter: ReasoningSplitter, reasoning: bool, out: W) -> Channels<W> {
        Channels {
            splitter,
            reasoning,
            current: None,
            out,
        }
    }

    /// Text on `out` now, not at the next newline (a closed stdout is
    /// not an error of the run).
    fn emit(&mut self, text: &str) {
        let _ = self
            .out
            .write_all(text.as_bytes())
            .and_then(|_| self.out.flush());
    }

    /// Prints what a token's piece (special tokens written out) completes.
    fn push(&mut self, piece: &[u8]) {
        let segments = self.splitter.push(piece);
        self.show(segments);
    }

    fn finish(&mut self) {
        let segments = self.splitter.finish();
        self.show(segments);
    }

    fn show(&mut self, segments: Vec<Segment>) {
        for seg in segments {
            if !self.reasoning {
                if seg.channel == Channel::Final {
                    self.emit(&seg.text);
                }
                continue;
            }
            if self.current.as_ref() != Some(&seg.channel) {
                let name = match &seg.channel {
                    Channel::Analysis => "analysis",
                    Channel::Final => "final",
                    Channel::Commentary => "commentary",
                    Channel::Other(n) => n,
                };
                let gap = if self.current.is_some() { "\n\n" } else { "" };
                self.emit(&format!("{gap}[{name}]\n"));
                self.current = Some(seg.channel.clone());
            }
            self.emit(&seg.text);
        }
    }
}

/// The --chat prompt: the model's chat template around the messages,
/// with the assistant's turn opened, and the format of the reasoning its
/// answers carry, if any.
fn chat_prompt(
    model: &LoadedModel,
    tokenizer: Option<&Tokenizer>,
    system: Option<&str>,
    user: &str,
) -> Result<(String, Option<ReasoningFormat>), String> {
    let tokenizer = tokenizer.ok_or("--chat needs the model's vocabulary")?;
    let template = model
        .chat_template(tokenizer)
        .map_err(|e| format!("{e}: use --prompt"))?;
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(ChatMessage::new("system", s));
    }
    messages.push(ChatMessage::new("user", user));
    let text = template
        .render(&messages, true)
        .map_err(|e| format!("the chat template: {e}"))?;
    Ok((text, ReasoningFormat::of_template(&template)))
}

fn run(a: &Cli, user_set: &[ModelSampling]) -> Result<(), String> {
    let path = a.model.as_ref().or(a.model_flag.as_ref());
    let desc = match (path, &a.random) {
        (Some(path), None) => runner::open_model(path).map_err(|e| e.to_string())?,
        (None, Some(shape)) => {
            runner::random_model(shape, a.weights, a.weights_seed).map_err(|e| e.to_string())?
        }
        _ => tool::usage_error::<Cli>(
            ErrorKind::MissingRequiredArgument,
            "give one MODEL.gguf or --random SHAPE",
        )
        .exit(),
    };
    let params = a
        .context
        .params()
        .unwrap_or_else(|e| tool::usage_error::<Cli>(ErrorKind::ArgumentConflict, e).exit());
    let (devices, cpu) = a.devices.devices()?;
    a.placement
        .check(devices.len())
        .unwrap_or_else(|e| tool::usage_error::<Cli>(ErrorKind::ValueValidation, e).exit());
    let fit = a.fit.fit.then(|| a.fit.request(&a.placement, &params));
    let (model, params) =
        runner::load_for_run(&desc, &devices, cpu, a.placement.options(), params, fit)?;
    // the tokenizer is needed for --prompt and --chat, and to print text;
    // a vocabulary it cannot read only matters for those
    let wants_text = a.prompt.is_some() || a.chat.is_some();
    let tokenizer = match model.tokenizer() {
        Ok(t) => Some(t),
        Err(e) if wants_text => return Err(format!("{e} (--prompt-ids takes token ids)")),
        Err(_) => None,
    };
    let (chat_prompt, format) = match &a.chat {
        Some(msg) => {
            let (text, format) = chat_prompt(&model, tokenizer.as_ref(), a.system.as_deref(), msg)?;
            (Some(text), format)
        }
        None => (None, None),
    };
    if a.reasoning && format.is_none() {
        eprintln!("llama: --reasoning: the model's chat template writes no reasoning");
    }
    let mut channels = match (format, &chat_prompt) {
        (Some(format), Some(text)) => Some(Channels::new(
            ReasoningSplitter::new(format, text),
            a.reasoning,
            std::io::stdout(),
        )),
        _ => None,
    };
    let n_vocab = model.config.n_vocab;
    let mut ctx = Context::new(Arc::new(model), params).map_err(|e| e.to_string())?;
    let text_prompt = a.prompt.as_deref().or(chat_prompt.as_deref());
    let prompt: Vec<i32> = if let Some(ids) = &a.prompt_ids {
        ids.0.clone()
    } else if let (Some(text), Some(t)) = (text_prompt, &tokenizer) {
        t.encode(text, true, true).map_err(|e| e.to_string())?
    } else {
        runner::random_prompt(a.random_prompt, n_vocab, 42)
    };
    if a.print_prompt_ids {
        let ids: Vec<String> = prompt.iter().map(i32::to_string).collect();
        println!("[{}]", ids.join(", "));
    }
    // the model's own sampling (general.sampling.*) where the command
    // line left llama.cpp's defaults, as llama.cpp takes it
    let mut params = a.sampling.params();
    if let Some(h) = ctx.model().metadata.as_deref() {
        params = params.with_model_defaults(h, user_set);
    }
    let chain = params
        .chain(n_vocab, tokenizer.as_ref())
        .map_err(|e| e.to_string())?;
    // as llama.cpp prints them, so two runs' logs compare
    eprintln!(
        "sampler seed: {}\nsampler params:\n\t{}\nsampler chain: logits -> {}",
        chain.seed().unwrap_or(params.seed),
        params.summary().replace('\n', "\n\t"),
        chain.names().join(" -> ")
    );
    let mut sampler = match a.sampling.grammar_source()? {
        None => TokenSampler::new(chain),
        Some(source) => {
            let t = tokenizer
                .as_ref()
                .ok_or("a grammar needs the model's vocabulary, which could not be read")?;
            let grammar = GrammarVocab::new(t)
                .and_then(|v| v.compile(&source))
                .map_err(|e| e.to_string())?;
            TokenSampler::constrained(chain, Box::new(grammar))
        }
    };
    // the text streams to stdout as it is made: the prompt's (not for
    // --chat, whose prompt is the template's), then each token's, a
    // character once its last byte is there
    if let (Some(t), None) = (&tokenizer, &a.chat) {
        let text = t.decode(&prompt, false, false).map_err(|e| e.to_string())?;
        emit(&text);
    }
    // a bar for prompts that take more than one graph
    let mut progress = Progress::tokens("prompt", ctx.params.n_ubatch as u64);
    let mut probs = Vec::new();
    let req = Request {
        n_predict: a.n_predict,
        ignore_eos: a.sampling.ignore_eos,
        n_probs: a.sampling.n_probs,
        retry: Retry {
            within: Duration::from_secs(a.rpc_retry as u64),
        },
        ..Request::default()
    };
    let hooks = Hooks {
        on_prompt: Box::new(|done, total| progress.update(done, total)),
        on_token: Box::new(|t| {
            match (&mut channels, &tokenizer) {
                // the channels are read from the tokens with their
                // special ones written out; held text comes at the end
                (Some(ch), Some(tk)) if t.id >= 0 => ch.push(tk.piece(t.id, true).unwrap_or(&[])),
                (Some(_), _) => {}
                (None, _) => emit(t.text),
            }
            if !t.probs.is_empty() {
                probs.push((t.id, t.probs.to_vec()));
            }
            true
        }),
        on_recover: Box::new(|r| {
            eprintln!(
                "\n{}\nrecovered after {:.1} s: {} of weights uploaded again, \
                 {} compute buffer(s) restored{}",
                r.error,
                r.waited.as_secs_f64(),
                format_bytes(r.recovery.weight_bytes),
                r.recovery.compute_buffers,
                if r.recovery.cache_cleared {
                    format!("; the KV cache was lost: {} tokens decoded again", r.replay)
                } else {
                    String::new()
                }
            )
        }),
    };
    let generation = generation::generate(
        &mut ctx,
        &prompt,
        &mut sampler,
        tokenizer.as_ref(),
        &req,
        hooks,
    );
    let g = match generation {
        Ok(g) => g,
        Err(e @ DecodeError::NotFinite { .. }) => {
            progress.finish();
            // with -v, decode the prompt again watching every node
            let at = if a.log.log_level > 0 {
                match runner::first_non_finite(&mut ctx, &prompt) {
                    Some(node) => format!("; the first node that computed one: {node}"),
                    None => String::new(),
                }
            } else {
                " (-v names the first node that computed one)".to_string()
            };
            return Err(format!("{e}{at}"));
        }
        Err(e) => return Err(e.to_string()),
    };
    progress.finish();
    if let Some(ch) = &mut channels {
        ch.finish();
    }
    if tokenizer.is_some() {
        println!();
    }
    for (id, top) in &probs {
        let list: Vec<String> = top
            .iter()
            .map(|(t, p)| {
                let piece = tokenizer
                    .as_ref()
                    .and_then(|tk| tk.piece(*t, true).ok())
                    .map(|b| format!("{:?}", String::from_utf8_lossy(b)))
                    .unwrap_or_default();
                format!("{t}{piece} {p:.6}")
            })
            .collect();
        eprintln!("token {id}: {}", list.join(", "));
    }
    if g.stop == StopReason::ContextFull {
        eprintln!(
            "the context of {} cells is full: generation stopped at {} of {} tokens (a larger -c makes room)",
            ctx.params.n_ctx,
            g.generated.len(),
            a.n_predict
        );
    }
    if a.print_ids {
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
    if a.verbose {
        eprint!("{}", ctx.scheduler().explain());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use ggraph::model::placement::GpuLayers;

    fn parse(a: &[&str]) -> Result<Cli, clap::Error> {
        tool::try_parse_from(std::iter::once("llama").chain(a.iter().copied()))
    }

    /// gpt-oss's answer, token by token, with its special tokens.
    const HARMONY: [&str; 12] = [
        "<|channel|>",
        "analysis",
        "<|message|>",
        "Capital of France.",
        "<|end|>",
        "<|start|>",
        "assistant",
        "<|channel|>",
        "final",
        "<|message|>",
        "Paris.",
        "<|return|>",
    ];

    fn printed(reasoning: bool) -> String {
        printed_as(ReasoningFormat::Harmony, &HARMONY, reasoning)
    }

    fn printed_as(format: ReasoningFormat, pieces: &[&str], reasoning: bool) -> String {
        let splitter = ReasoningSplitter::new(format, "");
        let mut ch = Channels::new(splitter, reasoning, Vec::new());
        for piece in pieces {
            ch.push(piece.as_bytes());
        }
        ch.finish();
        String::from_utf8(ch.out).unwrap()
    }

    #[test]
    fn a_harmony_answer_prints_its_final_channel_and_with_reasoning_its_analysis() {
        assert_eq!(printed(false), "Paris.");
        assert_eq!(
            printed(true),
            "[analysis]\nCapital of France.\n\n[final]\nParis."
        );
        assert!(
            parse(&["m.gguf", "--reasoning"]).is_err(),
            "--reasoning needs --chat"
        );
        assert!(
            parse(&["m.gguf", "--chat", "hi", "--reasoning"])
                .unwrap()
                .reasoning
        );
    }
    #[test]
    fn a_gemma4_answer_prints_its_answer_and_with_reasoning_its_thought() {
        let pieces = [
            "<|channel>",
            "thought",
            "\n",
            "Capital",
            ".",
            "<channel|>",
            "Paris.",
        ];
        let format = ggraph::model::reasoning::GEMMA4_THOUGHT;
        assert_eq!(printed_as(format, &pieces, false), "Paris.");
        assert_eq!(
            printed_as(format, &pieces, true),
            "[analysis]\nCapital.\n\n[final]\nParis."
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn llama_cpp_s_spellings_parse() {
        let c = parse(&[
            "-m",
            "m.gguf",
            "-p",
            "hello",
            "-n",
            "16",
            "-ngl",
            "99",
            "-c",
            "512",
            "-fa",
            "off",
            "-v",
            "--verbose",
        ])
        .unwrap();
        assert_eq!(c.model_flag.as_deref(), Some("m.gguf"));
        assert_eq!(c.prompt.as_deref(), Some("hello"));
        assert_eq!(c.n_predict, 16);
        assert_eq!(c.placement.n_gpu_layers, Some(GpuLayers::Count(99)));
        assert_eq!(c.context.ctx, 512);
        assert_eq!(c.log.log_level, 1);
        assert!(c.verbose);
        let c = parse(&["--random", "tiny", "-p", "-ngl is a prompt", "--fit"]).unwrap();
        assert_eq!(c.prompt.as_deref(), Some("-ngl is a prompt"));
        assert!(c.fit.fit && c.placement.n_gpu_layers.is_none());
        let c = parse(&["--random", "tiny", "--prompt-ids", "1,2,3", "--print-ids"]).unwrap();
        assert_eq!(c.prompt_ids, Some(TokenIds(vec![1, 2, 3])));
        assert_eq!(
            (c.n_predict, c.weights, c.weights_seed),
            (32, DType::Q4_0, 1)
        );
        let p = c.sampling.params();
        assert_eq!(p, ggraph::model::sampling::SamplingParams::default());
        let c = parse(&[
            "m.gguf",
            "-s",
            "7",
            "--temp",
            "0",
            "--top-k",
            "5",
            "-l",
            "3-inf",
            "--samplers",
            "top_k;temp",
            "--mirostat",
            "2",
            "--dry-sequence-breaker",
            "none",
        ])
        .unwrap();
        let p = c.sampling.params();
        assert_eq!((p.seed, p.temp, p.top_k, p.mirostat), (7, 0.0, 5, 2));
        assert_eq!(p.logit_bias, [(3, f32::NEG_INFINITY)]);
        assert!(p.dry_sequence_breakers.is_empty() && p.samplers.len() == 2);
    }

    #[test]
    fn mistakes_name_the_flag_and_help_shows_the_defaults() {
        for (a, flag) in [
            (&["--random", "huge"][..], "--random"),
            (&["m.gguf", "--prompt-ids", "1,x"], "--prompt-ids"),
            (&["m.gguf", "-n", "many"], "-n"),
            (&["m.gguf", "--random", "tiny"], "--random"),
            (
                &["m.gguf", "--tensor-split", "12GiB,lots"],
                "--tensor-split",
            ),
            (&["m.gguf", "--bogus"], "--bogus"),
        ] {
            let e = parse(a).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{a:?}");
            assert!(e.to_string().contains(flag), "{a:?}: {e}");
        }
        let e = parse(&["--help"]).unwrap_err();
        assert_eq!((e.kind(), e.exit_code()), (ErrorKind::DisplayHelp, 0));
        let h = e.to_string();
        for s in [
            "[default: 32]",
            "[default: Q4_0]",
            "--n-gpu-layers",
            "-ngl",
            "[default: 4096]",
        ] {
            assert!(h.contains(s), "{s} not in:\n{h}");
        }
        let c = parse(&["--completions", "bash"]).unwrap();
        assert!(tool::completions::<Cli>(c.completions.unwrap()).contains("--n-gpu-layers"));
    }
}
