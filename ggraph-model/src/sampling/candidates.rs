//! The candidate list a chain of samplers works on (llama.cpp's
//! `llama_token_data_array`), and the steps its samplers share: sorting,
//! softmax, temperature, top-k.

use super::cpp_sort;

/// One candidate token: its id, its logit, and its probability once a
/// sampler has computed one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenData {
    /// The token id.
    pub id: i32,
    /// Its logit, as the samplers so far left it.
    pub logit: f32,
    /// Its probability, where a sampler computed one (0 before).
    pub p: f32,
}

/// The candidates of one draw, in the order the samplers left them.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    /// The candidates still in the running.
    pub data: Vec<TokenData>,
    /// Whether `data` is sorted by logit, largest first.
    pub sorted: bool,
    /// The index in `data` of the token chosen, once a sampler chose.
    pub selected: Option<usize>,
}

impl Candidates {
    /// Every token of a vocabulary with its logit, in id order.
    pub fn from_logits(logits: &[f32]) -> Candidates {
        let mut c = Candidates::default();
        c.fill(logits);
        c
    }

    /// Refills with every token of `logits`, reusing the allocation.
    pub fn fill(&mut self, logits: &[f32]) {
        self.data.clear();
        self.data
            .extend(logits.iter().enumerate().map(|(i, &logit)| TokenData {
                id: i as i32,
                logit,
                p: 0.0,
            }));
        self.sorted = false;
        self.selected = None;
    }

    /// How many candidates remain.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether none remains.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The chosen token's id, once a sampler chose.
    pub fn selected_id(&self) -> Option<i32> {
        self.selected.and_then(|i| self.data.get(i)).map(|t| t.id)
    }

    /// Keeps the `n` largest logits, sorted largest first, exactly as
    /// llama.cpp's `partial_sort_inplace` leaves them (ties included): a
    /// libstdc++ `partial_sort` for up to 128, its bucket sort above.
    pub fn sort_top(&mut self, n: usize) {
        let n = n.min(self.data.len());
        if n <= 128 {
            cpp_sort::partial_sort(&mut self.data, n, &larger_logit);
            self.data.truncate(n);
        } else {
            let top = bucket_sort_top(&self.data, n);
            self.data.clear();
            self.data.extend_from_slice(&top[..n]);
        }
        self.sorted = true;
    }

    /// Sorts every candidate by logit, largest first.
    pub fn sort(&mut self) {
        self.sort_top(self.data.len());
    }

    /// Probabilities from the logits (llama.cpp's `softmax_impl`): sorted
    /// first when `sort` asks, then `expf(logit - max)` summed in float
    /// in list order, and each divided by the sum.
    pub fn softmax(&mut self, sort: bool) {
        if self.data.is_empty() {
            return;
        }
        if sort && !self.sorted {
            self.sort();
        }
        let mut max = self.data[0].logit;
        if !self.sorted {
            for t in &self.data[1..] {
                max = cpp_max(max, t.logit);
            }
        }
        let mut sum = 0.0f32;
        for t in &mut self.data {
            t.p = (t.logit - max).exp();
            sum += t.p;
        }
        for t in &mut self.data {
            t.p /= sum;
        }
    }

    /// Divides every logit by `temp`; a temperature of 0 or below keeps
    /// only the largest logit (the first of equals) and sets the others to
    /// minus infinity (llama.cpp's `temp_impl`).
    pub fn temperature(&mut self, temp: f32) {
        if self.data.is_empty() {
            return;
        }
        if temp <= 0.0 {
            let mut best = 0;
            for i in 1..self.data.len() {
                if self.data[i].logit > self.data[best].logit {
                    self.data[best].logit = f32::NEG_INFINITY;
                    best = i;
                } else {
                    self.data[i].logit = f32::NEG_INFINITY;
                }
            }
            return;
        }
        for t in &mut self.data {
            t.logit /= temp;
        }
    }

    /// Keeps the `k` largest logits, sorted (llama.cpp's `top_k_impl`: a k
    /// of 0 or below keeps everything as it is).
    pub fn top_k(&mut self, k: i32) {
        if k <= 0 {
            return;
        }
        let k = (k as usize).min(self.data.len());
        if !self.sorted {
            self.sort_top(k);
        }
        self.data.truncate(k);
    }

    /// The `n` most probable candidates, as `(id, p)`, most probable first
    /// (ties by position): the log-probabilities a runner reports.
    pub fn top_probs(&self, n: usize) -> Vec<(i32, f32)> {
        let n = n.min(self.data.len());
        if n == 0 {
            return Vec::new();
        }
        // the n most probable first, then only those sorted (a generation
        // asks for a few of 49152 every token)
        let more_probable =
            |a: &usize, b: &usize| self.data[*b].p.total_cmp(&self.data[*a].p).then(a.cmp(b));
        let mut order: Vec<usize> = (0..self.data.len()).collect();
        if n < order.len() {
            order.select_nth_unstable_by(n - 1, more_probable);
            order.truncate(n);
        }
        order.sort_by(more_probable);
        order
            .iter()
            .map(|&i| (self.data[i].id, self.data[i].p))
            .collect()
    }
}

/// llama.cpp's order of candidates: `a.logit > b.logit`.
pub(crate) fn larger_logit(a: &TokenData, b: &TokenData) -> bool {
    a.logit > b.logit
}

/// llama.cpp's `llama_token_data_array_partial_sort`: the candidates
/// spread over 128 buckets of logit (-10 to 10) in list order, the
/// buckets from the top sorted until they hold `n`, the last of them
/// partially. The first `n` of the result are the `n` largest, sorted.
pub(crate) fn bucket_sort_top(data: &[TokenData], n: usize) -> Vec<TokenData> {
    const BUCKETS: usize = 128;
    const LOW: f32 = -10.0;
    const HIGH: f32 = 10.0;
    const SCALE: f32 = BUCKETS as f32 / (HIGH - LOW);
    const INTER: f32 = -LOW * SCALE;
    let mut histogram = [0usize; BUCKETS];
    let index: Vec<usize> = data
        .iter()
        .map(|t| {
            let b = cpp_int(SCALE * t.logit + INTER).clamp(0, BUCKETS as i32 - 1) as usize;
            histogram[b] += 1;
            b
        })
        .collect();
    let mut have = 0;
    let mut last = BUCKETS - 1;
    loop {
        have += histogram[last];
        if have >= n || last == 0 {
            break;
        }
        last -= 1;
    }
    // bucket j (from the top) starts at start[BUCKETS - 1 - j]
    let mut start = vec![0usize; BUCKETS - last];
    let mut at = 0;
    for (k, j) in (last..BUCKETS).rev().enumerate() {
        start[k] = at;
        at += histogram[j];
    }
    let mut out = vec![
        TokenData {
            id: 0,
            logit: 0.0,
            p: 0.0
        };
        have
    ];
    for (t, &b) in data.iter().zip(&index) {
        if b >= last {
            let slot = &mut start[BUCKETS - 1 - b];
            out[*slot] = *t;
            *slot += 1;
        }
    }
    let mut from = 0;
    for j in (last + 1..BUCKETS).rev() {
        cpp_sort::sort(&mut out[from..from + histogram[j]], &larger_logit);
        from += histogram[j];
    }
    let rest = n.saturating_sub(from);
    cpp_sort::partial_sort(
        &mut out[from..from + histogram[last]],
        rest.min(histogram[last]),
        &larger_logit,
    );
    out
}

/// `int(x)` as x86 computes it: truncation, and the "integer indefinite"
/// value (`INT_MIN`) for a NaN or a value out of range.
pub(crate) fn cpp_int(x: f32) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// `std::max(a, b)`: `a` unless `a < b` (a NaN first stays).
pub(crate) fn cpp_max(a: f32, b: f32) -> f32 {
    if a < b { b } else { a }
}

/// The probabilities of the raw logits (a softmax over the whole
/// vocabulary, before any sampler, as llama-server reports log
/// probabilities unless asked for the samplers' own): `id`'s, and the `n`
/// most probable `(id, p)`, most probable first.
pub fn raw_probabilities(logits: &[f32], n: usize, id: i32) -> (f32, Vec<(i32, f32)>) {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| cpp_max(m, x));
    let sum: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let p = |x: f32| (((x - max) as f64).exp() / sum) as f32;
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    let n = n.min(order.len());
    let larger = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    if n > 0 && n < order.len() {
        order.select_nth_unstable_by(n - 1, larger);
    }
    order.truncate(n);
    order.sort_by(larger);
    let chosen = usize::try_from(id)
        .ok()
        .and_then(|i| logits.get(i))
        .map_or(0.0, |&x| p(x));
    (
        chosen,
        order
            .iter()
            .map(|&i| (i as i32, p(logits[i as usize])))
            .collect(),
    )
}
