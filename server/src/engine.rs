//! The engine: one thread owns the [`Context`] and runs every request as
//! a slot (one sequence of the context). Each step builds one batch, as
//! llama-server does: the next token of every generating slot, then
//! prompt pieces of the slots still reading theirs, up to the context's
//! `n_batch`; one decode; then each slot with an output samples its own
//! token with its own chain and seed (continuous batching).
//!
//! A slot keeps the cells of its last request when it ends (its prompt
//! cache): a new request goes to the idle slot whose cached tokens share
//! the longest prefix with its prompt, keeps that prefix and reads only
//! the rest. A slot whose client went away is freed at the next step, its
//! cells with it. With one unified cache a slot may fill the whole
//! context; idle slots' caches are then given up, oldest first, when a
//! step needs their cells. A decode that fails (a device lost) fails the
//! requests in its batch; the engine recovers the device before the next
//! step and goes on serving.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ggraph_model::arch::Pooling;
use ggraph_model::batch::Batch;
use ggraph_model::context::Context;
use ggraph_model::embedding::{Normalize, embed, max_batch_tokens};
use ggraph_model::generation::TextStream;
use ggraph_model::sampling::{TokenSampler, raw_probabilities};
use ggraph_model::tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

/// One request's generation, as the HTTP layer hands it over.
pub struct Job {
    /// The prompt's token ids (at least one).
    pub prompt: Vec<i32>,
    /// The request's sampler: its chain, seed and grammar.
    pub sampler: TokenSampler,
    /// Tokens to generate at most (the slot's context ends it earlier).
    pub n_predict: usize,
    /// Strings that end the text.
    pub stop: Vec<String>,
    /// Go on past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Candidates' probabilities to report with each token.
    pub n_probs: usize,
    /// Keep the slot's cells for the next request (llama-server's
    /// `cache_prompt`): its prompt may start with these tokens.
    pub cache_prompt: bool,
    /// The text writes special tokens out (gpt-oss's Harmony markers,
    /// which split its answer into channels); stop strings apply to it.
    pub special_text: bool,
    /// Where the tokens go; dropping the receiver cancels the job.
    pub events: UnboundedSender<Event>,
}

/// Why a generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token.
    Eos,
    /// A stop string: the one met.
    Word(String),
    /// The token budget.
    Limit,
    /// The slot's context, or a full cache.
    Context,
}

impl Finish {
    /// OpenAI's `finish_reason`: `"stop"` or `"length"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Finish::Eos | Finish::Word(_) => "stop",
            Finish::Limit | Finish::Context => "length",
        }
    }

    /// llama-server's `stop_type`: `"eos"`, `"word"` or `"limit"`.
    pub fn stop_type(&self) -> &'static str {
        match self {
            Finish::Eos => "eos",
            Finish::Word(_) => "word",
            Finish::Limit | Finish::Context => "limit",
        }
    }
}

/// A finished job's counts and times (llama-server's `timings`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens in all.
    pub prompt_tokens: usize,
    /// Of them, tokens the slot's cache held already (not decoded again).
    pub cached_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Milliseconds from taking a slot to the first token.
    pub prompt_ms: f64,
    /// Milliseconds from the first token to the end.
    pub gen_ms: f64,
}

/// What the engine says of a job, in order: tokens, then one end.
#[derive(Clone, Debug)]
pub enum Event {
    /// A generated token and the text it lets through.
    Token {
        /// Its id.
        id: i32,
        /// Whole characters, none of a stop string (maybe empty).
        text: String,
        /// Its probability under the raw logits (with `n_probs`).
        p: f32,
        /// The most probable tokens under the raw logits, `(id, p)`.
        probs: Vec<(i32, f32)>,
    },
    /// The end.
    Done {
        /// Why it ended.
        finish: Finish,
        /// The text still held at the end (it follows the last token's).
        tail: String,
        /// Counts and times.
        timings: Timings,
    },
    /// The job failed (a decode error, a device lost); nothing follows.
    Failed(String),
}

/// A slot as `/slots` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotReport {
    /// Whether it runs a request.
    pub processing: bool,
    /// That request's prompt tokens (or the last one's).
    pub prompt_tokens: usize,
    /// Tokens it generated so far.
    pub generated_tokens: usize,
    /// Tokens its sequence holds in the cache.
    pub cached_tokens: usize,
}

/// Counters the engine keeps (for `/metrics` and `/slots`).
#[derive(Debug, Default)]
pub struct Counters {
    /// Prompt tokens decoded, all jobs (cached ones not counted).
    pub prompt_tokens: AtomicU64,
    /// Microseconds spent reading prompts, all jobs.
    pub prompt_us: AtomicU64,
    /// Tokens generated, all jobs.
    pub generated_tokens: AtomicU64,
    /// Microseconds spent generating, all jobs.
    pub gen_us: AtomicU64,
    /// Jobs finished.
    pub jobs_done: AtomicU64,
    /// Jobs failed or cancelled.
    pub jobs_dropped: AtomicU64,
    /// Slots busy now.
    pub busy: AtomicUsize,
    /// Jobs waiting for a slot now.
    pub waiting: AtomicUsize,
    /// Cells of the cache holding a token, after the last step.
    pub cells_used: AtomicUsize,
    /// Each slot, after the last step.
    pub slots: Mutex<Vec<SlotReport>>,
}

/// How the engine runs its slots.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// Jobs that may wait for a slot; more are refused.
    pub queue: usize,
    /// One cache every slot shares (llama.cpp's `--kv-unified`): a slot
    /// may fill the whole context. Off: each slot has its share,
    /// `n_ctx / slots`, as a context per slot.
    pub kv_unified: bool,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions {
            queue: 64,
            kv_unified: false,
        }
    }
}

/// A request's embeddings, as the HTTP layer hands them over: its inputs
/// (token ids each) go through [`embed`] together, as many to a decode as
/// the context takes.
pub struct EmbedJob {
    /// The inputs, each at least one token.
    pub inputs: Vec<Vec<i32>>,
    /// How each vector is scaled.
    pub normalize: Normalize,
    /// Where the vectors (or why there are none) go.
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

/// What the HTTP layer asks the engine thread.
enum Command {
    Run(Box<Job>),
    Embed(EmbedJob),
    /// Empty an idle slot's cache; answers the cells it gave up.
    Erase(usize, oneshot::Sender<Result<usize, String>>),
}

/// The handle the HTTP layer holds.
#[derive(Clone)]
pub struct Engine {
    commands: SyncSender<Command>,
    /// The slots (sequences) it runs at once.
    pub n_slots: usize,
    /// Cells a slot may fill (prompt and generation).
    pub n_ctx_slot: usize,
    /// Cells of the whole context.
    pub n_ctx: usize,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// How the context pools embeddings, when it computes them (the
    /// server then serves embeddings, not generations).
    pub embeddings: Option<Pooling>,
    /// The most tokens one input may have: a decode takes it whole.
    pub n_embd_tokens: usize,
    /// The counters.
    pub counters: Arc<Counters>,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

/// Why a job was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Every slot is busy and the queue is full.
    Busy,
    /// The engine has stopped.
    Stopped,
}

impl Engine {
    /// Starts the engine thread on `ctx`: its `n_seq_max` sequences are
    /// the slots.
    pub fn start(ctx: Context, tokenizer: Arc<Tokenizer>, options: EngineOptions) -> Engine {
        let n_slots = ctx.params.n_seq_max.max(1);
        let n_ctx = ctx.params.n_ctx;
        let embeddings = ctx.params.embeddings.then(|| ctx.pooling());
        let n_embd_tokens = max_batch_tokens(&ctx);
        let n_ctx_slot = if options.kv_unified {
            n_ctx
        } else {
            n_ctx / n_slots
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(options.queue.max(1));
        let counters = Arc::new(Counters::default());
        if let Ok(mut s) = counters.slots.lock() {
            *s = vec![SlotReport::default(); n_slots];
        }
        let run = Runner {
            ctx,
            tokenizer: tokenizer.clone(),
            slots: (0..n_slots).map(|_| SlotState::default()).collect(),
            waiting: VecDeque::new(),
            counters: counters.clone(),
            n_ctx_slot,
            clock: 0,
            lost: None,
        };
        let thread = std::thread::Builder::new()
            .name("ggraph-engine".into())
            .spawn(move || run.run(rx))
            .ok();
        Engine {
            commands: tx,
            n_slots,
            n_ctx_slot,
            n_ctx,
            tokenizer,
            embeddings,
            n_embd_tokens,
            counters,
            thread: Arc::new(Mutex::new(thread)),
        }
    }

    /// The embeddings of a request's inputs, computed on the engine
    /// thread; refused when the queue is full.
    pub async fn embed(
        &self,
        inputs: Vec<Vec<i32>>,
        normalize: Normalize,
    ) -> Result<Result<Vec<Vec<f32>>, String>, Refused> {
        let (tx, rx) = oneshot::channel();
        let job = EmbedJob {
            inputs,
            normalize,
            reply: tx,
        };
        match self.commands.try_send(Command::Embed(job)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(Refused::Busy),
            Err(TrySendError::Disconnected(_)) => return Err(Refused::Stopped),
        }
        rx.await.map_err(|_| Refused::Stopped)
    }

    /// Hands a job over; refused when every slot is busy and the queue
    /// is full.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        match self.commands.try_send(Command::Run(Box::new(job))) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(Refused::Busy),
            Err(TrySendError::Disconnected(_)) => Err(Refused::Stopped),
        }
    }

    /// Empties idle slot `slot`'s cache (llama-server's
    /// `POST /slots/{id}?action=erase`); the cells it gave up.
    pub async fn erase(&self, slot: usize) -> Result<usize, String> {
        let (tx, rx) = oneshot::channel();
        match self.commands.try_send(Command::Erase(slot, tx)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err("the queue is full: try again".into()),
            Err(TrySendError::Disconnected(_)) => return Err("the engine has stopped".into()),
        }
        rx.await
            .unwrap_or_else(|_| Err("the engine has stopped".into()))
    }

    /// Whether the engine thread runs.
    pub fn is_running(&self) -> bool {
        self.thread
            .lock()
            .map(|t| t.as_ref().is_some_and(|h| !h.is_finished()))
            .unwrap_or(false)
    }
}

/// A slot: the tokens its sequence holds, and its request if busy.
#[derive(Default)]
struct SlotState {
    /// Tokens whose cells sequence `slot` holds, from position 0.
    cached: Vec<i32>,
    /// The step it last ran (least recently used goes first).
    last_used: u64,
    /// The last request's prompt length (for `/slots`).
    last_prompt: usize,
    task: Option<Task>,
}

/// A request running in a slot.
struct Task {
    job: Job,
    /// Prompt tokens in the cache (reused or decoded) so far.
    read: usize,
    /// Prompt tokens the slot's cache held already.
    reused: usize,
    /// The token sampled last, to decode next.
    next: Option<i32>,
    generated: usize,
    text: TextStream,
    started: Instant,
    first_token: Option<Instant>,
}

/// The engine thread's state.
struct Runner {
    ctx: Context,
    tokenizer: Arc<Tokenizer>,
    slots: Vec<SlotState>,
    waiting: VecDeque<Job>,
    counters: Arc<Counters>,
    n_ctx_slot: usize,
    /// Steps run.
    clock: u64,
    /// A device lost its memory: when recovery was last tried (none:
    /// not yet), and why.
    lost: Option<(Option<Instant>, String)>,
}

/// How long a lost device waits between recovery attempts.
const RECOVERY_PAUSE: Duration = Duration::from_secs(1);

impl Runner {
    fn run(mut self, rx: Receiver<Command>) {
        loop {
            let idle = self.slots.iter().all(|s| s.task.is_none()) && self.waiting.is_empty();
            if idle {
                match rx.recv() {
                    Ok(c) => self.take(c),
                    Err(_) => return,
                }
            } else if self.lost.is_some() {
                // no hot loop while a device cannot be reached
                match rx.recv_timeout(RECOVERY_PAUSE / 4) {
                    Ok(c) => self.take(c),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            while let Ok(c) = rx.try_recv() {
                self.take(c);
            }
            self.drop_cancelled();
            if self.recovered() {
                self.assign();
                self.counters
                    .waiting
                    .store(self.waiting.len(), Ordering::Relaxed);
                self.step();
            }
            self.report();
        }
    }

    fn take(&mut self, c: Command) {
        match c {
            Command::Run(job) => self.waiting.push_back(*job),
            Command::Embed(job) => {
                // a server of embeddings runs no generations: the cache
                // is all its own
                let r = embed(&mut self.ctx, &job.inputs, job.normalize).map_err(|e| e.to_string());
                if r.is_ok() {
                    let tokens: usize = job.inputs.iter().map(Vec::len).sum();
                    let c = &self.counters;
                    c.prompt_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
                    c.jobs_done.fetch_add(1, Ordering::Relaxed);
                }
                let _ = job.reply.send(r);
            }
            Command::Erase(s, reply) => {
                let r = match self.slots.get(s) {
                    None => Err(format!("there is no slot {s}")),
                    Some(slot) if slot.task.is_some() => {
                        Err(format!("slot {s} is processing a request"))
                    }
                    Some(slot) => Ok(slot.cached.len()),
                };
                if r.is_ok() {
                    self.forget(s);
                    // counted before the client hears it is done
                    self.report();
                }
                let _ = reply.send(r);
            }
        }
    }

    /// Whether the devices hold their memory, recovering them if not (at
    /// most once a [`RECOVERY_PAUSE`]); while they cannot be recovered,
    /// every request fails with the reason.
    fn recovered(&mut self) -> bool {
        if self.lost.is_none() && !self.ctx.memory_lost() {
            return true;
        }
        if let Some((Some(when), why)) = &self.lost
            && when.elapsed() < RECOVERY_PAUSE
        {
            let msg = format!("a device is lost and is being recovered: {why}");
            self.fail_all(&msg);
            return false;
        }
        match self.ctx.recover() {
            Ok(r) => {
                tracing::warn!(
                    "device memory recovered: {} bytes of weights uploaded again{}",
                    r.weight_bytes,
                    if r.cache_cleared {
                        "; the cache was lost and is empty"
                    } else {
                        ""
                    }
                );
                if r.cache_cleared {
                    self.fail_all("a device lost the cache: the request must be sent again");
                    for s in &mut self.slots {
                        s.cached.clear();
                    }
                }
                self.lost = None;
                true
            }
            Err(e) => {
                let why = e.to_string();
                tracing::warn!("a device is lost; recovery failed: {why}");
                self.fail_all(&format!("a device is lost and is being recovered: {why}"));
                self.lost = Some((Some(Instant::now()), why));
                false
            }
        }
    }

    /// Fails every running and waiting job with `msg`.
    fn fail_all(&mut self, msg: &str) {
        for job in self.waiting.drain(..) {
            let _ = job.events.send(Event::Failed(msg.to_string()));
            self.counters.jobs_dropped.fetch_add(1, Ordering::Relaxed);
        }
        for s in 0..self.slots.len() {
            self.fail(s, msg);
        }
    }

    /// The slots' state and the cache's use, for `/slots` and `/metrics`.
    fn report(&self) {
        self.counters
            .cells_used
            .store(self.ctx.cells_used(), Ordering::Relaxed);
        if let Ok(mut out) = self.counters.slots.lock() {
            for (o, s) in out.iter_mut().zip(&self.slots) {
                *o = SlotReport {
                    processing: s.task.is_some(),
                    prompt_tokens: s
                        .task
                        .as_ref()
                        .map_or(s.last_prompt, |t| t.job.prompt.len()),
                    generated_tokens: s.task.as_ref().map_or(0, |t| t.generated),
                    cached_tokens: s.cached.len(),
                };
            }
        }
    }

    /// Ends slot `s`'s request; its cells go too unless `keep`.
    /// The counters are updated before the caller tells the client, so a
    /// client that reads `/metrics` after its answer sees its cells gone.
    fn end(&mut self, s: usize, keep: bool) -> Option<Task> {
        let task = self.slots[s].task.take();
        if task.is_some() {
            self.counters.busy.fetch_sub(1, Ordering::Relaxed);
        }
        if !keep {
            self.forget(s);
        }
        self.report();
        task
    }

    /// Slot `s` gives up its cells.
    fn forget(&mut self, s: usize) {
        let _ = self.ctx.seq_rm(Some(s as u32), None, None);
        self.slots[s].cached.clear();
    }

    /// Fails slot `s`'s request (if any) with `msg`, freeing its cells.
    fn fail(&mut self, s: usize, msg: &str) {
        if let Some(t) = self.end(s, false) {
            tracing::info!("slot {s}: request failed: {msg}");
            self.counters.jobs_dropped.fetch_add(1, Ordering::Relaxed);
            let _ = t.job.events.send(Event::Failed(msg.to_string()));
        }
    }

    fn drop_cancelled(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|j| !j.events.is_closed());
        let gone = before - self.waiting.len();
        self.counters
            .jobs_dropped
            .fetch_add(gone as u64, Ordering::Relaxed);
        for s in 0..self.slots.len() {
            let Some(t) = &self.slots[s].task else {
                continue;
            };
            if t.job.events.is_closed() {
                tracing::info!(
                    "slot {s}: the client went away after {} of {} prompt tokens and {} generated: slot freed",
                    t.read,
                    t.job.prompt.len(),
                    t.generated
                );
                self.counters.jobs_dropped.fetch_add(1, Ordering::Relaxed);
                self.end(s, false);
            }
        }
    }

    /// Gives waiting jobs the idle slots: each the one whose cache shares
    /// the longest prefix with its prompt, else the least recently used.
    fn assign(&mut self) {
        while !self.waiting.is_empty() {
            let Some(job) = self.waiting.front() else {
                return;
            };
            let best = (0..self.slots.len())
                .filter(|&s| self.slots[s].task.is_none())
                .max_by_key(|&s| {
                    let slot = &self.slots[s];
                    let shared = if job.cache_prompt {
                        common_prefix(&slot.cached, &job.prompt)
                    } else {
                        0
                    };
                    (
                        shared,
                        std::cmp::Reverse(slot.last_used),
                        std::cmp::Reverse(s),
                    )
                });
            let Some(s) = best else { return };
            let Some(mut job) = self.waiting.pop_front() else {
                return;
            };
            let reused = self.keep_prefix(s, &job);
            // the prompt reaches the chain's penalties, as llama.cpp's
            // slots feed it (a prompt token never reaches the grammar)
            for &t in &job.prompt {
                let _ = job.sampler.accept(t, false);
            }
            self.counters.busy.fetch_add(1, Ordering::Relaxed);
            let slot = &mut self.slots[s];
            slot.last_prompt = job.prompt.len();
            slot.task = Some(Task {
                job,
                read: reused,
                reused,
                next: None,
                generated: 0,
                text: TextStream::new(),
                started: Instant::now(),
                first_token: None,
            });
        }
    }

    /// Cuts slot `s`'s cache back to the prefix it shares with `job`'s
    /// prompt (at most all but the prompt's last token, whose logits are
    /// needed); the tokens kept.
    fn keep_prefix(&mut self, s: usize, job: &Job) -> usize {
        let slot = &self.slots[s];
        let mut keep = if job.cache_prompt {
            common_prefix(&slot.cached, &job.prompt).min(job.prompt.len() - 1)
        } else {
            0
        };
        // a sliding-window cache forgot the oldest tokens: the kept ones
        // must still hold the window before the next position
        let n_swa = self.ctx.model().config.n_swa as i64;
        if keep > 0 && n_swa > 0 {
            let pos_min = self.ctx.seq_pos_min(s as u32).unwrap_or(0) as i64;
            if pos_min > 0 && pos_min > keep as i64 - n_swa {
                keep = 0;
            }
        }
        if keep < slot.cached.len()
            && self
                .ctx
                .seq_rm(Some(s as u32), Some(keep as i32), None)
                .is_err()
        {
            keep = 0;
        }
        if keep == 0 {
            self.forget(s);
        }
        self.slots[s].cached.truncate(keep);
        keep
    }

    /// Makes `needed` cells free if idle slots' caches can give them,
    /// least recently used first; the cells free then.
    fn make_room(&mut self, needed: usize) -> usize {
        loop {
            let free = self.ctx.cells_total().saturating_sub(self.ctx.cells_used());
            if free >= needed {
                return free;
            }
            let oldest = (0..self.slots.len())
                .filter(|&s| self.slots[s].task.is_none() && !self.slots[s].cached.is_empty())
                .min_by_key(|&s| self.slots[s].last_used);
            match oldest {
                Some(s) => self.forget(s),
                None => return free,
            }
        }
    }

    /// One batch: generating slots' next tokens, then prompt pieces.
    fn step(&mut self) {
        self.clock += 1;
        let budget = self.ctx.params.n_batch.max(1);
        let generating: Vec<usize> = (0..self.slots.len())
            .filter(|&s| {
                self.slots[s]
                    .task
                    .as_ref()
                    .is_some_and(|t| t.next.is_some())
            })
            .collect();
        // a cell for every generating slot's token, or the fullest ends
        let mut free = self.make_room(generating.len());
        let mut generating = generating;
        while free < generating.len() {
            let Some(i) =
                (0..generating.len()).max_by_key(|&i| self.slots[generating[i]].cached.len())
            else {
                break;
            };
            let s = generating.remove(i);
            tracing::info!("slot {s}: the cache is full: the request ends here");
            self.finish(s, Finish::Context);
            free = self.make_room(generating.len());
        }
        let mut batch = Batch::default();
        let mut seq_ids = Vec::new();
        let mut outputs = Vec::new();
        // which slot each output row belongs to, in batch order
        let mut owners = Vec::new();
        for &s in &generating {
            if let Some(t) = self.slots[s].task.as_ref().and_then(|t| t.next) {
                batch.tokens.push(t);
                seq_ids.push(vec![s as u32]);
                outputs.push(true);
                owners.push(s);
            }
        }
        let reading: Vec<usize> = (0..self.slots.len())
            .filter(|&s| {
                self.slots[s]
                    .task
                    .as_ref()
                    .is_some_and(|t| t.next.is_none() && t.read < t.job.prompt.len())
            })
            .collect();
        for &s in &reading {
            let left = budget.saturating_sub(batch.tokens.len());
            if left == 0 {
                break;
            }
            let want = self.slots[s]
                .task
                .as_ref()
                .map_or(0, |t| t.job.prompt.len() - t.read)
                .min(left);
            let room = self
                .make_room(batch.tokens.len() + want)
                .saturating_sub(batch.tokens.len());
            let take = want.min(room);
            if take == 0 {
                continue;
            }
            let Some(t) = self.slots[s].task.as_mut() else {
                continue;
            };
            let end = t.read + take;
            for i in t.read..end {
                batch.tokens.push(t.job.prompt[i]);
                seq_ids.push(vec![s as u32]);
                let last = i + 1 == t.job.prompt.len();
                outputs.push(last);
                if last {
                    owners.push(s);
                }
            }
            t.read = end;
        }
        if batch.tokens.is_empty() {
            // prompts that cannot get a cell: one unified cache filled by
            // prompts half read; the newest gives way
            if let Some(&s) = reading.iter().max_by_key(|&&s| {
                self.slots[s]
                    .task
                    .as_ref()
                    .map(|t| t.started)
                    .unwrap_or_else(Instant::now)
            }) {
                self.fail(s, "the context is full: no cell is free for the prompt");
            }
            return;
        }
        let in_batch: Vec<usize> = {
            let mut v: Vec<usize> = seq_ids.iter().map(|s| s[0] as usize).collect();
            v.dedup();
            v
        };
        let rows: Vec<usize> = outputs
            .iter()
            .enumerate()
            .filter(|(_, o)| **o)
            .map(|(i, _)| i)
            .collect();
        let tokens = batch.tokens.clone();
        batch.seq_ids = Some(seq_ids);
        batch.outputs = Some(outputs);
        if let Err(e) = self.ctx.decode(&batch) {
            let msg = format!("decode failed: {e}");
            tracing::warn!("{msg}");
            for s in in_batch {
                self.fail(s, &msg);
            }
            if self.ctx.memory_lost() {
                self.lost = Some((None, msg));
            }
            return;
        }
        for (t, ids) in tokens.iter().zip(batch.seq_ids.iter().flatten()) {
            let slot = &mut self.slots[ids[0] as usize];
            slot.cached.push(*t);
            slot.last_used = self.clock;
        }
        for (row, s) in rows.into_iter().zip(owners) {
            self.sample(s, row);
        }
    }

    /// Slot `s` samples from batch row `row`'s logits and goes on or ends.
    fn sample(&mut self, s: usize, row: usize) {
        match self.sample_token(s, row) {
            Ok(None) => {}
            Ok(Some(finish)) => self.finish(s, finish),
            Err(msg) => self.fail(s, &msg),
        }
    }

    /// Samples slot `s`'s next token and sends it; how the request ends,
    /// if it does.
    fn sample_token(&mut self, s: usize, row: usize) -> Result<Option<Finish>, String> {
        let Some(logits) = self.ctx.logits_of(row) else {
            return Err(format!("no logits for batch row {row}"));
        };
        let Some(t) = self.slots[s].task.as_mut() else {
            return Ok(None);
        };
        let id = t.job.sampler.sample(logits).map_err(|e| e.to_string())?;
        if t.first_token.is_none() {
            let now = Instant::now();
            t.first_token = Some(now);
            let decoded = t.job.prompt.len() - t.reused;
            self.counters
                .prompt_tokens
                .fetch_add(decoded as u64, Ordering::Relaxed);
            self.counters
                .prompt_us
                .fetch_add((now - t.started).as_micros() as u64, Ordering::Relaxed);
        }
        if !t.job.ignore_eos && self.tokenizer.is_eog(id) {
            return Ok(Some(Finish::Eos));
        }
        t.job.sampler.accept(id, true).map_err(|e| e.to_string())?;
        t.generated += 1;
        self.counters
            .generated_tokens
            .fetch_add(1, Ordering::Relaxed);
        let piece = self.tokenizer.piece(id, t.job.special_text).unwrap_or(&[]);
        let (text, stopped) = t.text.push(piece, &t.job.stop);
        // llama-server's log probabilities: of the raw logits
        let (p, probs) = if t.job.n_probs > 0 {
            raw_probabilities(logits, t.job.n_probs, id)
        } else {
            (0.0, Vec::new())
        };
        let _ = t.job.events.send(Event::Token { id, text, p, probs });
        let held = t.job.prompt.len() + t.generated;
        Ok(if let Some(word) = stopped {
            Some(Finish::Word(word))
        } else if t.generated >= t.job.n_predict {
            Some(Finish::Limit)
        } else if held >= self.n_ctx_slot {
            Some(Finish::Context)
        } else {
            t.next = Some(id);
            None
        })
    }

    /// Slot `s`'s request ends with `finish`: the last text, the counts.
    fn finish(&mut self, s: usize, finish: Finish) {
        let Some(t) = self.slots[s].task.as_mut() else {
            return;
        };
        let tail = t.text.finish();
        let first = t.first_token.unwrap_or_else(Instant::now);
        let timings = Timings {
            prompt_tokens: t.job.prompt.len(),
            cached_tokens: t.reused,
            generated_tokens: t.generated,
            prompt_ms: (first - t.started).as_secs_f64() * 1e3,
            gen_ms: first.elapsed().as_secs_f64() * 1e3,
        };
        let keep = t.job.cache_prompt;
        self.counters
            .gen_us
            .fetch_add((timings.gen_ms * 1e3) as u64, Ordering::Relaxed);
        self.counters.jobs_done.fetch_add(1, Ordering::Relaxed);
        let per_s = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        tracing::info!(
            "slot {s}: prompt {} tokens ({} cached) in {:.1} ms ({:.1} t/s); {} generated in {:.1} ms ({:.1} t/s); {}",
            timings.prompt_tokens,
            timings.cached_tokens,
            timings.prompt_ms,
            per_s(
                timings.prompt_tokens - timings.cached_tokens,
                timings.prompt_ms
            ),
            timings.generated_tokens,
            timings.gen_ms,
            per_s(timings.generated_tokens, timings.gen_ms),
            finish.stop_type()
        );
        if let Some(t) = self.end(s, keep) {
            let _ = t.job.events.send(Event::Done {
                finish,
                tail,
                timings,
            });
        }
    }
}

/// How many tokens `a` and `b` share from their start.
fn common_prefix(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn the_common_prefix_stops_at_the_first_difference() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
    }
}
