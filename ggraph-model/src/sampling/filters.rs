//! The samplers that reshape or cut the candidate list without choosing
//! one, each as llama.cpp 0.3.36's `llama-sampler.cpp` computes it (same
//! float arithmetic, same order): logit bias, penalties, top-n-sigma,
//! top-k, typical, top-p, min-p, XTC, temperature (plain and dynamic).

use super::candidates::{Candidates, TokenData, bucket_sort_top, cpp_max};
use super::cpp_sort;
use super::rng::Mt19937;
use super::sampler::Sampler;
use super::window::TokenWindow;

/// Adds a bias to chosen tokens' logits (`llama_sampler_init_logit_bias`);
/// minus infinity bans a token.
#[derive(Clone, Debug)]
pub struct LogitBias {
    biases: Vec<(i32, f32)>,
}

impl LogitBias {
    /// Biases as `(token, bias)`, applied in this order.
    pub fn new(biases: Vec<(i32, f32)>) -> LogitBias {
        LogitBias { biases }
    }
}

impl Sampler for LogitBias {
    fn name(&self) -> &'static str {
        "logit-bias"
    }
    fn apply(&mut self, c: &mut Candidates) {
        let mut search = Vec::new();
        for &(token, bias) in &self.biases {
            match usize::try_from(token).ok().and_then(|i| c.data.get_mut(i)) {
                Some(t) if t.id == token => t.logit += bias,
                _ => search.push((token, bias)),
            }
        }
        if search.is_empty() {
            return;
        }
        for t in &mut c.data {
            if let Some(&(_, bias)) = search.iter().find(|(id, _)| *id == t.id) {
                t.logit += bias;
            }
        }
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Repetition, frequency and presence penalties over the last `last_n`
/// tokens accepted (`llama_sampler_init_penalties`).
#[derive(Clone, Debug)]
pub struct Penalties {
    repeat: f32,
    frequency: f32,
    presence: f32,
    window: TokenWindow,
}

impl Penalties {
    /// Penalties over the last `last_n` tokens (0: none).
    pub fn new(last_n: usize, repeat: f32, frequency: f32, presence: f32) -> Penalties {
        Penalties {
            repeat,
            frequency,
            presence,
            window: TokenWindow::new(last_n),
        }
    }

    /// Whether the parameters change nothing (llama.cpp then adds an
    /// empty sampler).
    pub fn is_disabled(last_n: usize, repeat: f32, frequency: f32, presence: f32) -> bool {
        last_n == 0 || (repeat == 1.0 && frequency == 0.0 && presence == 0.0)
    }
}

impl Sampler for Penalties {
    fn name(&self) -> &'static str {
        "penalties"
    }
    fn accept(&mut self, token: i32) {
        self.window.push(token);
    }
    fn apply(&mut self, c: &mut Candidates) {
        if self.window.capacity() == 0 {
            return;
        }
        for t in &mut c.data {
            let count = self.window.count(t.id);
            if count == 0 {
                continue;
            }
            if t.logit <= 0.0 {
                t.logit *= self.repeat;
            } else {
                t.logit /= self.repeat;
            }
            t.logit -= count as f32 * self.frequency + self.presence;
        }
        c.sorted = false;
    }
    fn reset(&mut self) {
        self.window.clear();
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Keeps the logits within `n` standard deviations of the largest
/// (`llama_sampler_init_top_n_sigma`); the others go to minus infinity.
#[derive(Clone, Debug)]
pub struct TopNSigma {
    n: f32,
}

impl TopNSigma {
    /// Within `n` standard deviations (0 or below: off).
    pub fn new(n: f32) -> TopNSigma {
        TopNSigma { n }
    }
}

impl Sampler for TopNSigma {
    fn name(&self) -> &'static str {
        "top-n-sigma"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if self.n <= 0.0 || c.len() <= 1 {
            return;
        }
        let mut max = c.data[0].logit;
        let mut sum = 0.0f32;
        let mut valid = 0usize;
        for t in &c.data {
            if t.logit != f32::NEG_INFINITY {
                max = cpp_max(max, t.logit);
                sum += t.logit;
                valid += 1;
            }
        }
        let mean = if valid > 0 { sum / valid as f32 } else { 0.0 };
        let mut acc = 0.0f32;
        for t in &c.data {
            if t.logit != f32::NEG_INFINITY {
                let d = (t.logit - mean) as f64;
                acc = (acc as f64 + d * d) as f32;
            }
        }
        let std = if valid > 0 {
            (acc / valid as f32).sqrt()
        } else {
            0.0
        };
        let floor = max - self.n * std;
        for t in &mut c.data {
            if t.logit < floor {
                t.logit = f32::NEG_INFINITY;
            }
        }
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Keeps the `k` most likely (`llama_sampler_init_top_k`; 0 or below:
/// everything).
#[derive(Clone, Debug)]
pub struct TopK {
    k: i32,
}

impl TopK {
    /// The `k` largest logits.
    pub fn new(k: i32) -> TopK {
        TopK { k }
    }
}

impl Sampler for TopK {
    fn name(&self) -> &'static str {
        "top-k"
    }
    fn apply(&mut self, c: &mut Candidates) {
        c.top_k(self.k);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Locally typical sampling (`llama_sampler_init_typical`).
#[derive(Clone, Debug)]
pub struct Typical {
    p: f32,
    min_keep: usize,
}

impl Typical {
    /// Typical mass `p` (1 or more: off), keeping at least `min_keep`.
    pub fn new(p: f32, min_keep: usize) -> Typical {
        Typical { p, min_keep }
    }
}

impl Sampler for Typical {
    fn name(&self) -> &'static str {
        "typical"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if self.p >= 1.0 || c.is_empty() {
            return;
        }
        c.softmax(true);
        let mut entropy = 0.0f32;
        for t in &c.data {
            entropy += -t.p * t.p.ln();
        }
        let shifted: Vec<f32> = c.data.iter().map(|t| (-t.p.ln() - entropy).abs()).collect();
        let mut order: Vec<usize> = (0..c.len()).collect();
        cpp_sort::sort(&mut order, &|&a: &usize, &b: &usize| {
            shifted[a] < shifted[b]
        });
        let mut sum = 0.0f32;
        let mut last = order.len();
        for (i, &at) in order.iter().enumerate() {
            sum += c.data[at].p;
            if sum > self.p && (self.min_keep == 0 || i + 1 >= self.min_keep) {
                last = i + 1;
                break;
            }
        }
        let kept: Vec<TokenData> = order[..last].iter().map(|&i| c.data[i]).collect();
        c.data.clear();
        c.data.extend_from_slice(&kept);
        c.sorted = false;
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Nucleus sampling (`llama_sampler_init_top_p`): the most likely tokens
/// whose probabilities reach `p`.
#[derive(Clone, Debug)]
pub struct TopP {
    p: f32,
    min_keep: usize,
}

impl TopP {
    /// Mass `p` (1 or more: off), keeping at least `min_keep`.
    pub fn new(p: f32, min_keep: usize) -> TopP {
        TopP { p, min_keep }
    }
}

impl Sampler for TopP {
    fn name(&self) -> &'static str {
        "top-p"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if self.p >= 1.0 || c.is_empty() {
            return;
        }
        // probabilities summed in the list's order; then, as llama.cpp,
        // a bucket sort of the top 256 for a long unsorted list (all of it
        // when 256 do not reach p), else the whole list sorted in place
        c.softmax(false);
        let mut top: Option<Vec<TokenData>> = None;
        let mut k = c.len();
        if !c.sorted && c.len() > 1024 {
            k = 256;
            top = Some(bucket_sort_top(&c.data, k));
        } else if !c.sorted {
            c.sort_top(c.len());
        }
        let mut sum = 0.0f32;
        let mut last = c.len();
        for i in 0..c.len() {
            sum += top.as_ref().map_or(c.data[i].p, |t| t[i].p);
            if sum >= self.p && i + 1 >= self.min_keep {
                last = i + 1;
                break;
            }
            if top.is_some() && i + 1 == k {
                k = c.len();
                top = Some(bucket_sort_top(&c.data, k));
            }
        }
        match top {
            Some(t) => {
                c.data.clear();
                c.data.extend_from_slice(&t[..last]);
                c.sorted = true;
            }
            None => c.data.truncate(last),
        }
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Keeps the tokens at least `p` times as likely as the most likely
/// (`llama_sampler_init_min_p`).
#[derive(Clone, Debug)]
pub struct MinP {
    p: f32,
    min_keep: usize,
}

impl MinP {
    /// Ratio `p` (0 or below: off), keeping at least `min_keep`.
    pub fn new(p: f32, min_keep: usize) -> MinP {
        MinP { p, min_keep }
    }
}

impl Sampler for MinP {
    fn name(&self) -> &'static str {
        "min-p"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if self.p <= 0.0 || c.is_empty() {
            return;
        }
        if !c.sorted {
            let max = c.data.iter().fold(f32::MIN, |m, t| cpp_max(m, t.logit));
            let floor = max + self.p.ln();
            let kept = c.data.iter().filter(|t| t.logit >= floor).count();
            if kept > 0 && kept >= self.min_keep {
                c.data.retain(|t| t.logit >= floor);
                return;
            }
            c.sort();
        }
        let floor = c.data[0].logit + self.p.ln();
        let mut i = 1;
        while i < c.len() {
            if c.data[i].logit < floor && i >= self.min_keep {
                break;
            }
            i += 1;
        }
        c.data.truncate(i);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Exclude Top Choices (`llama_sampler_init_xtc`): with probability
/// `probability`, drops every token above `threshold` but the least
/// likely of them.
#[derive(Clone, Debug)]
pub struct Xtc {
    probability: f32,
    threshold: f32,
    min_keep: usize,
    seed: u32,
    rng: Mt19937,
}

impl Xtc {
    /// XTC with its own generator, seeded with `seed` (already resolved:
    /// never the "random" seed).
    pub fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Xtc {
        Xtc {
            probability,
            threshold,
            min_keep,
            seed,
            rng: Mt19937::new(seed),
        }
    }

    /// Whether the parameters change nothing.
    pub fn is_disabled(probability: f32, threshold: f32) -> bool {
        probability <= 0.0 || threshold > 0.5
    }
}

impl Sampler for Xtc {
    fn name(&self) -> &'static str {
        "xtc"
    }
    fn apply(&mut self, c: &mut Candidates) {
        if Xtc::is_disabled(self.probability, self.threshold) || c.len() < 2 {
            return;
        }
        if self.rng.next_f32() > self.probability {
            return;
        }
        c.softmax(true);
        let mut last = 0;
        for (i, t) in c.data.iter().enumerate() {
            if t.p >= self.threshold {
                last = i;
            } else {
                break;
            }
        }
        if c.len() - last >= self.min_keep && last > 0 {
            c.data.drain(..last);
        }
    }
    fn reset(&mut self) {
        self.rng = Mt19937::new(self.seed);
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

/// Temperature (`llama_sampler_init_temp`; 0 or below keeps only the
/// most likely token), or `llama_sampler_init_temp_ext`: dynamic
/// temperature from the entropy when `delta` is above 0.
#[derive(Clone, Debug)]
pub struct Temperature {
    temp: f32,
    delta: f32,
    exponent: f32,
    /// Made as `temp_ext` (its name in a chain).
    ext: bool,
}

impl Temperature {
    /// A plain temperature.
    pub fn new(temp: f32) -> Temperature {
        Temperature {
            ext: false,
            ..Temperature::dynamic(temp, 0.0, 1.0)
        }
    }

    /// A temperature between `temp - delta` and `temp + delta`, the
    /// normalised entropy raised to `exponent` choosing where.
    pub fn dynamic(temp: f32, delta: f32, exponent: f32) -> Temperature {
        Temperature {
            temp,
            delta,
            exponent,
            ext: true,
        }
    }
}

impl Sampler for Temperature {
    fn name(&self) -> &'static str {
        if self.ext { "temp-ext" } else { "temp" }
    }
    fn apply(&mut self, c: &mut Candidates) {
        if self.delta <= 0.0 {
            c.temperature(self.temp);
            return;
        }
        if c.len() <= 1 {
            return;
        }
        let min_temp = (self.temp - self.delta).max(0.0);
        let max_temp = self.temp + self.delta;
        let max_entropy = -(1.0f32 / c.len() as f32).ln();
        c.softmax(true);
        let mut entropy = 0.0f32;
        for t in &c.data {
            if t.p > 0.0 {
                entropy -= t.p * t.p.ln();
            }
        }
        let normalized = entropy / max_entropy;
        let temp = min_temp + (max_temp - min_temp) * normalized.powf(self.exponent);
        c.temperature(temp);
        let max = c.data[0].logit as f64;
        let mut sum = 0.0f64;
        for t in &mut c.data {
            let p = (t.logit as f64 - max).exp();
            t.p = p as f32;
            sum += p;
        }
        for t in &mut c.data {
            t.p = (t.p as f64 / sum) as f32;
        }
    }
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
