//! The llama runner's pieces: model presets, greedy generation with
//! timings (over the library's generation loop,
//! [`ggraph_model::generation`]), and the memory table. The `llama` binary
//! is a thin shell around these; tests and benches call them directly.

use std::fmt::Write;
use std::sync::Arc;

use ggraph_core::backend::{Device, weight_buffer_type_names};
use ggraph_core::util::format_bytes;
use ggraph_core::{DType, Error, Result};
use ggraph_model::arch::{Attention, ModelConfig};
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams, DecodeError};
use ggraph_model::desc::ModelDesc;
use ggraph_model::estimate::{self, exact::FitRequest};
use ggraph_model::generation::{self, Generation, Hooks, Request};
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::make::{make_vocab, vocab_header};
use ggraph_model::placement::PlacementOptions;
use ggraph_model::sampling::{Greedy, SamplerChain, TokenSampler};

/// The shapes [`preset`] knows.
pub const SHAPES: [&str; 3] = ["tiny", "small", "8b-4l"];

/// A random-weight model shape by name: `tiny` (tests), `small` (n_embd
/// 512, 8 layers, 8 heads, n_ff 1408, vocab 32000: the CPU issue's bench
/// model), `8b-4l` (llama-3-8B layer shapes, 4 layers).
pub fn preset(name: &str) -> Result<ModelConfig> {
    Ok(match name {
        "tiny" => ModelConfig::dense(512, 64, 2, 4, 2, 128),
        "small" => ModelConfig::dense(32000, 512, 8, 8, 8, 1408),
        "8b-4l" => ModelConfig::llama3_8b(4),
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown model shape '{other}' (tiny, small, 8b-4l)"
            )));
        }
    })
}

/// A random-weight model of a preset shape.
/// Its vocabulary is [`make_vocab`]'s.
pub fn random_model(shape: &str, weights: DType, seed: u64) -> Result<ModelDesc> {
    let mut desc = ModelDesc::random(preset(shape)?, weights, seed)?;
    desc.metadata = Some(Arc::new(vocab_header(make_vocab(desc.config.n_vocab))?));
    Ok(desc)
}

/// The index of the largest logit (the first of equals; NaNs are never
/// chosen, 0 when there is no number).
///
/// Two passes written for the compiler to vectorise (a scalar scan of
/// 32000 logits took 13 us a token, 0.6% of a small model's): the
/// largest value, 16 lanes at a time, then the first 16-wide chunk that
/// holds it.
pub fn argmax(logits: &[f32]) -> i32 {
    const LANES: usize = 16;
    let bigger = |m: f32, v: f32| if v > m { v } else { m };
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = bigger(*l, v);
        }
    }
    let max = lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| bigger(m, v));
    let chunk = logits
        .chunks(LANES)
        .position(|c| c.iter().fold(false, |hit, &v| hit | (v == max)))
        .unwrap_or(0);
    let at = logits[chunk * LANES..]
        .iter()
        .position(|&v| v == max)
        .map_or(0, |i| chunk * LANES + i);
    at as i32
}

/// A sampler that takes the most likely token (the first of equals), as
/// [`argmax`] does, without the default chain's cuts: for benches and
/// checks that compare greedy tokens.
pub fn greedy_sampler() -> TokenSampler {
    let mut chain = SamplerChain::new();
    chain.push(Box::new(Greedy));
    TokenSampler::new(chain)
}

/// Decodes `prompt` into sequence 0 (in batches of the context's n_batch)
/// and then generates `n_predict` tokens greedily, timing both phases.
pub fn generate(
    ctx: &mut Context,
    prompt: &[i32],
    n_predict: usize,
) -> std::result::Result<Generation, DecodeError> {
    let req = Request {
        n_predict,
        piece: ctx.params.n_batch,
        ..Request::default()
    };
    generation::generate(
        ctx,
        prompt,
        &mut greedy_sampler(),
        None,
        &req,
        Hooks::default(),
    )
}

/// [`generate`], decoding the prompt one ubatch (one graph) at a time and
/// calling `on_prompt(done, total)` with the prompt tokens decoded after
/// each: progress for long prompts. The context cuts a batch into the same
/// ubatches, so the cache and the last logits are the same; each piece
/// but the last computes one token's logits more.
pub fn generate_with(
    ctx: &mut Context,
    prompt: &[i32],
    n_predict: usize,
    on_prompt: &mut dyn FnMut(u64, u64),
) -> std::result::Result<Generation, DecodeError> {
    let req = Request {
        n_predict,
        ..Request::default()
    };
    let hooks = Hooks {
        on_prompt: Box::new(on_prompt),
        ..Hooks::default()
    };
    generation::generate(ctx, prompt, &mut greedy_sampler(), None, &req, hooks)
}

/// Loads `desc` for a run: with `fit`, on the layers, op offload and
/// context the fit chooses (its reason on stderr); checked to fit every
/// device's memory before any weight is read; the weights' progress on
/// stderr. Returns the model and the context parameters to use.
pub fn load_for_run(
    desc: &ModelDesc,
    devices: &[Arc<dyn Device>],
    cpu: Arc<dyn Device>,
    opts: PlacementOptions,
    params: ContextParams,
    fit: Option<FitRequest>,
) -> std::result::Result<(Model, ContextParams), String> {
    let (opts, params) = match fit {
        Some(req) => {
            let f = estimate::exact::fit(desc, devices, cpu.clone(), &opts, &params, req)
                .map_err(|e| e.to_string())?;
            eprintln!("fit: {}", f.reason);
            (f.options, f.params)
        }
        None => (opts, params),
    };
    // weights, KV cache and compute memory must fit before any is loaded
    estimate::exact::check_fits(desc, devices, cpu.clone(), &opts, &params)
        .map_err(|e| e.to_string())?;
    let t = std::time::Instant::now();
    let mut progress = crate::progress::Progress::bytes("loading weights");
    let mut report = |done: u64, total: u64| progress.update(done, total);
    let model = Model::load(desc, devices, cpu, &opts, LoadMode::Real, Some(&mut report))
        .map_err(|e| e.to_string())?;
    progress.finish();
    eprintln!("loaded in {:.2} s", t.elapsed().as_secs_f64());
    Ok((model, params))
}

/// Memory per device of a context: weights, KV cache, compute.
pub fn memory_table(ctx: &Context) -> String {
    let devices = device_memory(ctx);
    // as wide as the longest name (rpc:HOST:PORT:N is long)
    let w = devices
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let mut s = format!(
        "{:<w$} {:>11} {:>11} {:>11} {:>11}\n",
        "device", "weights", "kv", "compute", "total"
    );
    for d in devices {
        let _ = writeln!(
            s,
            "{:<w$} {:>11} {:>11} {:>11} {:>11}",
            d.name,
            format_bytes(d.weights),
            format_bytes(d.kv),
            format_bytes(d.compute),
            format_bytes(d.total())
        );
    }
    s
}

/// What one device of a context holds, and the memory it has.
pub struct DeviceMemory {
    /// The device's name (`CPU` for the host).
    pub name: String,
    /// Bytes of weights it holds.
    pub weights: u64,
    /// Bytes of KV cache it holds, every cache together.
    pub kv: u64,
    /// Bytes of compute buffers the scheduler reserved on it.
    pub compute: u64,
    /// The device's total memory (declared, for simulated devices).
    pub capacity: u64,
    /// Whether this is the host.
    pub host: bool,
}

impl DeviceMemory {
    /// Weights, KV cache and compute memory together, in bytes.
    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.compute
    }
}

/// Per device of `ctx` (the host last): weights, KV cache and compute
/// memory, as allocated (or, in a dry run, as a real run would allocate).
pub fn device_memory(ctx: &Context) -> Vec<DeviceMemory> {
    let model = ctx.model();
    let weights = model.weight_bytes();
    let kv = ctx.kv_bytes_per_buffer_type();
    let compute = ctx.compute_bytes();
    ctx.devices()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let own = [d.buffer_type().name().to_string()];
            let of = |list: &[(String, u64)], names: &[String]| {
                list.iter()
                    .filter(|(n, _)| names.contains(n))
                    .map(|(_, b)| b)
                    .sum::<u64>()
            };
            DeviceMemory {
                name: d.name().to_string(),
                weights: of(&weights, &weight_buffer_type_names(d.as_ref())),
                kv: of(&kv, &own),
                compute: compute.get(i).copied().unwrap_or(0),
                capacity: d.memory().total_bytes,
                host: !d.kind().is_gpu_class(),
            }
        })
        .collect()
}

/// One line per device (not the host) whose weights, KV cache and compute
/// memory exceed its memory: what a dry run cannot allocate, so cannot
/// refuse, but a real run would.
pub fn over_memory(ctx: &Context) -> Vec<String> {
    device_memory(ctx)
        .into_iter()
        .filter(|d| !d.host && d.total() > d.capacity)
        .map(|d| {
            format!(
                "does not fit: {} needs {} of its {} ({} short)",
                d.name,
                format_bytes(d.total()),
                format_bytes(d.capacity),
                format_bytes(d.total() - d.capacity)
            )
        })
        .collect()
}

/// A one-line summary of the scheduler's splits and the decode loop's
/// graph reuse.
pub fn schedule_summary(ctx: &Context) -> String {
    let sched = ctx.scheduler();
    let splits: Vec<String> = sched
        .splits()
        .iter()
        .map(|s| format!("{}[{}]", sched.device(s.backend).name(), s.nodes.len()))
        .collect();
    let st = ctx.stats();
    format!(
        "{} split(s): {}; {} copies per run; graphs built {}, reused {}",
        splits.len(),
        splits.join(" "),
        sched.stats().copies,
        st.graphs_built,
        st.graphs_reused
    )
}

/// Deterministic pseudo-random prompt tokens (for benches).
pub fn random_prompt(n: usize, n_vocab: usize, seed: u64) -> Vec<i32> {
    let mut rng = ggraph_core::util::Rng::new(seed);
    (0..n).map(|_| rng.below(n_vocab) as i32).collect()
}

/// Opens a GGUF (mapped; the weights are read when the model is loaded).
pub fn open_model(path: &str) -> Result<ModelDesc> {
    // a header (JSON or a prefix) describes a model but holds no weights
    let starts_json = std::fs::File::open(path).ok().and_then(|mut f| {
        use std::io::Read;
        let mut first = [0u8; 64];
        let n = f.read(&mut first).ok()?;
        first[..n]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .map(|&b| b == b'{')
    });
    if starts_json == Some(true) {
        return Err(Error::InvalidArgument(format!(
            "{path} is a header JSON: running a model needs its weights (a .gguf); \
             ggraph plan and ggraph estimate take headers"
        )));
    }
    let file = ggraph_model::gguf::ModelFile::open(path)?;
    ModelDesc::from_file(file)
}

/// Opens the GGUF at `path` and loads it whole on the host CPU (no GPU,
/// the default placement): the model of tests, benches and examples.
pub fn load_on_host(path: &str) -> Result<Arc<Model>> {
    let desc = open_model(path)?;
    let cpu = ggraph_cpu::CpuDevice::new();
    let model = Model::load(
        &desc,
        &[],
        cpu,
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )?;
    Ok(Arc::new(model))
}

/// A phase of [`measure_speed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The timed prompt decode.
    Prompt,
    /// The timed generation.
    Generation,
}

/// Prompt and generation tokens/s of `model` as llama-bench measures them
/// (`-p n_prompt -n n_gen -fa 1`): `n_prompt` tokens decoded as one batch
/// into an empty cache, after one untimed decode of the same batch (the
/// compute memory is touched and the graph built before the clock
/// starts); then, in another empty context, one token and `n_gen` more
/// decoded one at a time, the first untimed. `around(phase, true)` is
/// called just before each timed phase and `around(phase, false)` just
/// after it (a profiler's start and report).
pub fn measure_speed(
    model: &Arc<Model>,
    n_prompt: usize,
    n_gen: usize,
    around: &mut dyn FnMut(Phase, bool),
) -> Result<(f64, f64)> {
    let n_vocab = model.config.n_vocab;
    let context = |n_ctx: usize| {
        Context::new(
            model.clone(),
            ContextParams {
                n_ctx,
                n_batch: n_prompt.max(1),
                n_ubatch: n_prompt.max(1),
                attention: Attention::Flash,
                ..ContextParams::default()
            },
        )
    };
    let failed = |e: DecodeError| Error::InvalidArgument(e.to_string());
    let prompt = random_prompt(n_prompt, n_vocab, 7);
    let mut pp_ctx = context(n_prompt + 1)?;
    generate(&mut pp_ctx, &prompt, 1).map_err(failed)?;
    pp_ctx.clear_cache();
    around(Phase::Prompt, true);
    let pp = generate(&mut pp_ctx, &prompt, 1).map_err(failed)?;
    around(Phase::Prompt, false);
    drop(pp_ctx);
    let first = random_prompt(1, n_vocab, 9);
    let mut tg_ctx = context(n_gen + 2)?;
    around(Phase::Generation, true);
    let tg = generate(&mut tg_ctx, &first, n_gen + 1).map_err(failed)?;
    around(Phase::Generation, false);
    Ok((pp.prompt_tokens_per_s(), tg.gen_tokens_per_s()))
}

/// Decodes `tokens` (as the next batch of sequence 0) watching every F32
/// node, and names the first whose output holds a NaN or an infinity, with
/// its op: where a decode that failed with [`DecodeError::NotFinite`] went
/// wrong. The decode stops there and is rolled back.
pub fn first_non_finite(ctx: &mut Context, tokens: &[i32]) -> Option<String> {
    use std::sync::Mutex;

    use ggraph_core::ir::{Graph, TensorId};
    use ggraph_core::sched::EvalCallback;

    struct Watch(Arc<Mutex<Option<String>>>);
    impl EvalCallback for Watch {
        fn wants(&mut self, graph: &Graph, node: TensorId) -> bool {
            graph.tensor(node).dtype == DType::F32
        }
        fn observe(&mut self, graph: &Graph, node: TensorId) -> bool {
            let Ok(values) = graph.read_f32(node) else {
                return true;
            };
            match values.iter().find(|x| !x.is_finite()) {
                Some(x) => {
                    let t = graph.tensor(node);
                    let name = if t.name.is_empty() {
                        "(unnamed)"
                    } else {
                        &t.name
                    };
                    *self.0.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("{name} ({:?}) holds {x}", t.op));
                    false
                }
                None => true,
            }
        }
    }
    let found = Arc::new(Mutex::new(None));
    ctx.scheduler_mut()
        .set_eval_callback(Some(Box::new(Watch(found.clone()))));
    let _ = ctx.decode(&Batch::tokens(tokens));
    ctx.scheduler_mut().set_eval_callback(None);
    found.lock().unwrap_or_else(|e| e.into_inner()).take()
}
