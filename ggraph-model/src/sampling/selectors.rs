//! The samplers that choose the token at the end of a chain: the seeded
//! draw (`dist`), greedy, and Mirostat 1 and 2, with llama.cpp 0.3.36's
//! arithmetic and random numbers.

use super::candidates::{Candidates, cpp_int, cpp_max};
use super::rng::Mt19937;
use super::sampler::Sampler;

/// Draws a token from the softmax of the logits with a seeded
/// `std::mt19937` (`llama_sampler_init_dist`): one canonical double a
/// draw, scaled to the sum of the unnormalised probabilities and met by
/// their running sum in list order.
#[derive(Clone, Debug)]
pub struct Dist {
    seed: u32,
    rng: Mt19937,
}

impl Dist {
    /// A draw seeded with `seed` (already resolved: never the "random"
    /// seed).
    pub fn new(seed: u32) -> Dist {
        Dist {
            seed,
            rng: Mt19937::new(seed),
        }
    }

    /// The seed it draws with.
    pub fn seed(&self) -> u32 {
        self.seed
    }
}

impl Sampler for Dist {
    fn name(&self) -> &'static str {
        "dist"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if c.is_empty() {
            c.selected = None;
            return;
        }
        c.selected = Some(0);
        if c.len() == 1 {
            // one draw an output, as llama.cpp keeps its generator aligned
            self.rng.next_f64();
            c.data[0].p = 1.0;
            return;
        }
        let mut max = c.data[0].logit;
        if !c.sorted {
            for t in &c.data[1..] {
                max = cpp_max(max, t.logit);
            }
        }
        let mut sum = 0.0f64;
        for t in &mut c.data {
            t.p = (t.logit - max).exp();
            sum += t.p as f64;
        }
        let target = sum * self.rng.next_f64();
        let mut run = 0.0f64;
        let mut found = None;
        for (i, t) in c.data.iter_mut().enumerate() {
            if found.is_none() {
                run += t.p as f64;
                if run >= target {
                    found = Some(i);
                }
            }
            t.p = (t.p as f64 / sum) as f32;
        }
        // no number to meet (NaN logits): the last, as llama.cpp falls back
        c.selected = Some(found.unwrap_or(c.len() - 1));
    }
    fn reset(&mut self) {
        self.rng = Mt19937::new(self.seed);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// The largest logit, the first of equals (`llama_sampler_init_greedy`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Greedy;

impl Sampler for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if c.is_empty() {
            c.selected = None;
            return;
        }
        let mut best = 0;
        for i in 1..c.len() {
            if c.data[i].logit > c.data[best].logit {
                best = i;
            }
        }
        c.selected = Some(best);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(*self)
    }
}

/// Mirostat's last step, both versions: a draw over the probabilities,
/// then `mu` moved toward the target surprise `tau` at rate `eta`.
fn draw_and_learn(c: &mut Candidates, rng: &mut Mt19937, mu: &mut f32, tau: f32, eta: f32) {
    let at = rng.discrete(c.data.iter().map(|t| t.p));
    c.selected = Some(at);
    let surprise = -c.data[at].p.log2();
    *mu -= eta * (surprise - tau);
}

/// Mirostat 1.0 (`llama_sampler_init_mirostat`): a top-k whose k follows
/// the target surprise `tau`, learning at rate `eta`, from the `m` most
/// likely tokens' Zipf exponent.
#[derive(Clone, Debug)]
pub struct Mirostat {
    n_vocab: usize,
    seed: u32,
    tau: f32,
    eta: f32,
    m: usize,
    mu: f32,
    rng: Mt19937,
}

impl Mirostat {
    /// Mirostat over a vocabulary of `n_vocab` tokens (llama.cpp's tools
    /// use `m` = 100).
    pub fn new(n_vocab: usize, seed: u32, tau: f32, eta: f32, m: usize) -> Mirostat {
        Mirostat {
            n_vocab,
            seed,
            tau,
            eta,
            m,
            mu: 2.0 * tau,
            rng: Mt19937::new(seed),
        }
    }
}

impl Sampler for Mirostat {
    fn name(&self) -> &'static str {
        "mirostat"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if c.is_empty() {
            c.selected = None;
            return;
        }
        c.softmax(true);
        let mut sum_ti_bi = 0.0f32;
        let mut sum_ti_sq = 0.0f32;
        for i in 0..self.m.saturating_sub(1).min(c.len() - 1) {
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (c.data[i].p / c.data[i + 1].p).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let epsilon_hat = s_hat - 1.0;
        let k = ((epsilon_hat * 2.0f32.powf(self.mu))
            / (1.0 - (self.n_vocab as f32).powf(-epsilon_hat)))
        .powf(1.0 / s_hat);
        c.top_k(cpp_int(k).max(1));
        c.softmax(true);
        draw_and_learn(c, &mut self.rng, &mut self.mu, self.tau, self.eta);
    }
    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.rng = Mt19937::new(self.seed);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Mirostat 2.0 (`llama_sampler_init_mirostat_v2`): drops the tokens
/// whose surprise exceeds `mu`, which follows the target `tau` at rate
/// `eta`.
#[derive(Clone, Debug)]
pub struct MirostatV2 {
    seed: u32,
    tau: f32,
    eta: f32,
    mu: f32,
    rng: Mt19937,
}

impl MirostatV2 {
    /// Mirostat 2.0 seeded with `seed`.
    pub fn new(seed: u32, tau: f32, eta: f32) -> MirostatV2 {
        MirostatV2 {
            seed,
            tau,
            eta,
            mu: 2.0 * tau,
            rng: Mt19937::new(seed),
        }
    }
}

impl Sampler for MirostatV2 {
    fn name(&self) -> &'static str {
        "mirostat-v2"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if c.is_empty() {
            c.selected = None;
            return;
        }
        c.softmax(true);
        let keep = c
            .data
            .iter()
            .position(|t| -t.p.log2() > self.mu)
            .unwrap_or(c.len())
            .max(1);
        c.data.truncate(keep);
        c.softmax(true);
        draw_and_learn(c, &mut self.rng, &mut self.mu, self.tau, self.eta);
    }
    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.rng = Mt19937::new(self.seed);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Adaptive-p (`llama_sampler_init_adaptive_p`): draws near a target
/// probability, adapted from the moving average of the probabilities of
/// the tokens chosen so far. A negative target draws from the
/// probabilities as they are.
#[derive(Clone, Debug)]
pub struct AdaptiveP {
    target: f32,
    decay: f32,
    seed: u32,
    rng: Mt19937,
    weighted_sum: f32,
    total_weight: f32,
    original: Vec<f32>,
    pending: Option<(i32, usize)>,
}

impl AdaptiveP {
    /// Target probability `target` (negative: off), moving average decay
    /// `decay` (clamped to 0..0.99).
    pub fn new(target: f32, decay: f32, seed: u32) -> AdaptiveP {
        let decay = decay.clamp(0.0, 0.99);
        AdaptiveP {
            target,
            decay,
            seed,
            rng: Mt19937::new(seed),
            weighted_sum: target / (1.0 - decay),
            total_weight: 1.0 / (1.0 - decay),
            original: Vec::new(),
            pending: None,
        }
    }
}

impl Sampler for AdaptiveP {
    fn name(&self) -> &'static str {
        "adaptive-p"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if c.is_empty() {
            c.selected = None;
            return;
        }
        c.softmax(false);
        if self.target < 0.0 {
            c.selected = Some(self.rng.discrete(c.data.iter().map(|t| t.p)));
            return;
        }
        self.original.clear();
        self.original.extend(c.data.iter().map(|t| t.p));
        let target = self.target.clamp(0.0, 1.0);
        let adapted = if self.total_weight == 0.0 {
            target
        } else {
            2.0 * target - self.weighted_sum / self.total_weight
        }
        .clamp(0.0, 1.0);
        const WIDTH: f32 = 0.3;
        const PEAK: f32 = 5.0;
        const SHARPNESS: f32 = 10.0;
        let inv_width = 1.0 / WIDTH;
        for t in &mut c.data {
            if t.logit == f32::NEG_INFINITY {
                continue;
            }
            let dist = ((t.p - adapted) * inv_width).abs();
            t.logit = PEAK - SHARPNESS * dist * dist / (1.0 + dist);
        }
        c.softmax(false);
        let at = self.rng.discrete(c.data.iter().map(|t| t.p));
        c.selected = Some(at);
        self.pending = Some((c.data[at].id, at));
    }
    fn accept(&mut self, token: i32) {
        if let Some((id, at)) = self.pending.take()
            && id == token
        {
            self.weighted_sum = self.original[at] + self.decay * self.weighted_sum;
            self.total_weight = 1.0 + self.decay * self.total_weight;
        }
    }
    fn reset(&mut self) {
        self.weighted_sum = self.target / (1.0 - self.decay);
        self.total_weight = 1.0 / (1.0 - self.decay);
        self.pending = None;
        self.rng = Mt19937::new(self.seed);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
