//! The engine: one thread owns the [`Context`] and runs every request as
//! a slot (one sequence of the context). Each step builds one batch, as
//! llama-server does: the next token of every generating slot, then
//! prompt pieces of the slots still reading theirs, up to the context's
//! `n_batch`; one decode; then each slot with an output samples its own
//! token with its own chain and seed (continuous batching). A slot whose
//! client went away is freed at the next step, its cells with it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ggraph_model::batch::Batch;
use ggraph_model::context::Context;
use ggraph_model::generation::TextStream;
use ggraph_model::sampling::{TokenSampler, raw_probabilities};
use ggraph_model::tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

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
    /// Where the tokens go; dropping the receiver cancels the job.
    pub events: UnboundedSender<Event>,
}

/// Why a generation ended, in OpenAI's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// The token budget or the slot's context.
    Length,
}

impl Finish {
    /// `"stop"` or `"length"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
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
    /// The end, with the counts a response's `usage` needs.
    Done {
        /// Why it ended.
        finish: Finish,
        /// Prompt tokens decoded.
        prompt_tokens: usize,
        /// Tokens generated.
        generated_tokens: usize,
        /// The text still held at the end (it follows the last token's).
        tail: String,
        /// Milliseconds reading the prompt and generating.
        prompt_ms: f64,
        /// Milliseconds generating.
        gen_ms: f64,
    },
    /// The job failed (a decode error); nothing more follows.
    Failed(String),
}

/// Counters the engine keeps (for `/metrics` and logs).
#[derive(Debug, Default)]
pub struct Counters {
    /// Prompt tokens decoded, all jobs.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated, all jobs.
    pub generated_tokens: AtomicU64,
    /// Jobs finished.
    pub jobs_done: AtomicU64,
    /// Slots busy now.
    pub busy: AtomicUsize,
    /// Jobs waiting for a slot now.
    pub waiting: AtomicUsize,
    /// Cells of the cache holding a token, after the last step.
    pub cells_used: AtomicUsize,
    /// Per slot: its job's prompt tokens and tokens generated, or `None`
    /// when idle.
    pub slots: Mutex<Vec<Option<(usize, usize)>>>,
}

/// The handle the HTTP layer holds.
#[derive(Clone)]
pub struct Engine {
    jobs: SyncSender<Job>,
    /// The slots (sequences) it runs at once.
    pub n_slots: usize,
    /// Cells a slot may fill (prompt and generation).
    pub n_ctx_slot: usize,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The counters.
    pub counters: Arc<Counters>,
    /// Cells of the whole context.
    pub n_ctx: usize,
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
    /// Starts the engine thread on `ctx` (its `n_seq_max` sequences are
    /// the slots); up to `queue` jobs wait for a slot.
    pub fn start(ctx: Context, tokenizer: Arc<Tokenizer>, queue: usize) -> Engine {
        let n_slots = ctx.params.n_seq_max.max(1);
        let n_ctx_slot = ctx.params.n_ctx / n_slots;
        let (tx, rx) = std::sync::mpsc::sync_channel(queue.max(1));
        let counters = Arc::new(Counters::default());
        let n_ctx = ctx.params.n_ctx;
        if let Ok(mut s) = counters.slots.lock() {
            *s = vec![None; n_slots];
        }
        let run = Runner {
            ctx,
            tokenizer: tokenizer.clone(),
            slots: (0..n_slots).map(|_| None).collect(),
            waiting: VecDeque::new(),
            counters: counters.clone(),
            n_ctx_slot,
        };
        let thread = std::thread::Builder::new()
            .name("ggraph-engine".into())
            .spawn(move || run.run(rx))
            .ok();
        Engine {
            jobs: tx,
            n_slots,
            n_ctx_slot,
            tokenizer,
            counters,
            n_ctx,
            thread: Arc::new(Mutex::new(thread)),
        }
    }

    /// Hands a job over; refused when every slot is busy and the queue
    /// is full.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(Refused::Busy),
            Err(TrySendError::Disconnected(_)) => Err(Refused::Stopped),
        }
    }

    /// Whether the engine thread runs.
    pub fn is_running(&self) -> bool {
        self.thread
            .lock()
            .map(|t| t.as_ref().is_some_and(|h| !h.is_finished()))
            .unwrap_or(false)
    }
}

/// A busy slot.
struct Slot {
    job: Job,
    /// Prompt tokens decoded so far.
    read: usize,
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
    slots: Vec<Option<Slot>>,
    waiting: VecDeque<Job>,
    counters: Arc<Counters>,
    n_ctx_slot: usize,
}

impl Runner {
    fn run(mut self, rx: Receiver<Job>) {
        loop {
            let idle = self.slots.iter().all(Option::is_none) && self.waiting.is_empty();
            if idle {
                match rx.recv() {
                    Ok(job) => self.waiting.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = rx.try_recv() {
                self.waiting.push_back(job);
            }
            self.drop_cancelled();
            self.assign();
            self.counters
                .waiting
                .store(self.waiting.len(), Ordering::Relaxed);
            self.step();
            self.report();
        }
    }

    /// The slots' state and the cache's use, for `/slots` and `/metrics`.
    fn report(&self) {
        self.counters
            .cells_used
            .store(self.ctx.cells_used(), Ordering::Relaxed);
        if let Ok(mut s) = self.counters.slots.lock() {
            for (out, slot) in s.iter_mut().zip(&self.slots) {
                *out = slot.as_ref().map(|sl| (sl.job.prompt.len(), sl.generated));
            }
        }
    }

    fn free(&mut self, s: usize) {
        if self.slots[s].take().is_some() {
            let _ = self.ctx.seq_rm(Some(s as u32), None, None);
            self.counters.busy.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn drop_cancelled(&mut self) {
        self.waiting.retain(|j| !j.events.is_closed());
        for s in 0..self.slots.len() {
            if self.slots[s]
                .as_ref()
                .is_some_and(|sl| sl.job.events.is_closed())
            {
                self.free(s);
            }
        }
    }

    fn assign(&mut self) {
        for s in 0..self.slots.len() {
            if self.slots[s].is_some() {
                continue;
            }
            let Some(mut job) = self.waiting.pop_front() else {
                return;
            };
            let _ = self.ctx.seq_rm(Some(s as u32), None, None);
            // the prompt reaches the chain's penalties, as llama.cpp's
            // slots feed it (a prompt token never reaches the grammar)
            for i in 0..job.prompt.len() {
                let _ = job.sampler.accept(job.prompt[i], false);
            }
            self.counters.busy.fetch_add(1, Ordering::Relaxed);
            self.slots[s] = Some(Slot {
                job,
                read: 0,
                next: None,
                generated: 0,
                text: TextStream::new(),
                started: Instant::now(),
                first_token: None,
            });
        }
    }

    /// One batch: generating slots' next tokens, then prompt pieces.
    fn step(&mut self) {
        let budget = self.ctx.params.n_batch.max(1);
        let mut batch = Batch::default();
        let mut seq_ids = Vec::new();
        let mut outputs = Vec::new();
        // which slot each output row belongs to, in batch order
        let mut owners = Vec::new();
        for (s, slot) in self.slots.iter().enumerate() {
            if let Some(t) = slot.as_ref().and_then(|sl| sl.next) {
                batch.tokens.push(t);
                seq_ids.push(vec![s as u32]);
                outputs.push(true);
                owners.push(s);
            }
        }
        for (s, slot) in self.slots.iter_mut().enumerate() {
            let Some(sl) = slot else { continue };
            let left = budget.saturating_sub(batch.tokens.len());
            if sl.next.is_some() || sl.read >= sl.job.prompt.len() || left == 0 {
                continue;
            }
            let take = left.min(sl.job.prompt.len() - sl.read);
            let end = sl.read + take;
            for i in sl.read..end {
                batch.tokens.push(sl.job.prompt[i]);
                seq_ids.push(vec![s as u32]);
                let last = i + 1 == sl.job.prompt.len();
                outputs.push(last);
                if last {
                    owners.push(s);
                }
            }
            sl.read = end;
        }
        if batch.tokens.is_empty() {
            return;
        }
        let rows: Vec<usize> = outputs
            .iter()
            .enumerate()
            .filter(|(_, o)| **o)
            .map(|(i, _)| i)
            .collect();
        let in_batch: Vec<usize> = {
            let mut v: Vec<usize> = seq_ids.iter().map(|s| s[0] as usize).collect();
            v.dedup();
            v
        };
        batch.seq_ids = Some(seq_ids);
        batch.outputs = Some(outputs);
        if let Err(e) = self.ctx.decode(&batch) {
            let msg = format!("decode failed: {e}");
            tracing::warn!("{msg}");
            for s in in_batch {
                if let Some(sl) = &self.slots[s] {
                    let _ = sl.job.events.send(Event::Failed(msg.clone()));
                }
                self.free(s);
            }
            return;
        }
        for (row, s) in rows.into_iter().zip(owners) {
            self.sample(s, row);
        }
    }

    /// Slot `s` samples from batch row `row`'s logits and goes on or ends.
    fn sample(&mut self, s: usize, row: usize) {
        let Some(logits) = self.ctx.logits_of(row) else {
            return;
        };
        let Some(sl) = self.slots[s].as_mut() else {
            return;
        };
        if sl.next.is_none() {
            self.counters
                .prompt_tokens
                .fetch_add(sl.job.prompt.len() as u64, Ordering::Relaxed);
        }
        let id = match sl.job.sampler.sample(logits) {
            Ok(id) => id,
            Err(e) => {
                let _ = sl.job.events.send(Event::Failed(e.to_string()));
                self.free(s);
                return;
            }
        };
        sl.first_token.get_or_insert_with(Instant::now);
        let eog = !sl.job.ignore_eos && self.tokenizer.is_eog(id);
        let mut finish = None;
        if eog {
            finish = Some(Finish::Stop);
        } else {
            if let Err(e) = sl.job.sampler.accept(id, true) {
                let _ = sl.job.events.send(Event::Failed(e.to_string()));
                self.free(s);
                return;
            }
            sl.generated += 1;
            self.counters
                .generated_tokens
                .fetch_add(1, Ordering::Relaxed);
            let piece = self.tokenizer.piece(id, false).unwrap_or(&[]);
            let (text, stopped) = sl.text.push(piece, &sl.job.stop);
            // llama-server's log probabilities: of the raw logits
            let (p, probs) = if sl.job.n_probs > 0 {
                raw_probabilities(logits, sl.job.n_probs, id)
            } else {
                (0.0, Vec::new())
            };
            let _ = sl.job.events.send(Event::Token { id, text, p, probs });
            let held = sl.job.prompt.len() + sl.generated;
            if stopped.is_some() {
                finish = Some(Finish::Stop);
            } else if sl.generated >= sl.job.n_predict || held >= self.n_ctx_slot {
                finish = Some(Finish::Length);
            } else {
                sl.next = Some(id);
            }
        }
        if let Some(finish) = finish {
            let tail = sl.text.finish();
            let first = sl.first_token.unwrap_or(sl.started);
            let _ = sl.job.events.send(Event::Done {
                finish,
                prompt_tokens: sl.job.prompt.len(),
                generated_tokens: sl.generated,
                tail,
                prompt_ms: (first - sl.started).as_secs_f64() * 1e3,
                gen_ms: first.elapsed().as_secs_f64() * 1e3,
            });
            self.counters.jobs_done.fetch_add(1, Ordering::Relaxed);
            self.free(s);
        }
    }
}
