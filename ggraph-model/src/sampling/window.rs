//! The last tokens a sampler remembers (llama.cpp's `ring_buffer` with a
//! count per token).

use std::collections::{HashMap, VecDeque};

/// The last `capacity` tokens accepted, with how often each appears.
#[derive(Clone, Debug, Default)]
pub struct TokenWindow {
    capacity: usize,
    tokens: VecDeque<i32>,
    counts: HashMap<i32, usize>,
}

impl TokenWindow {
    /// A window of `capacity` tokens (0 remembers nothing).
    pub fn new(capacity: usize) -> TokenWindow {
        TokenWindow {
            capacity,
            tokens: VecDeque::with_capacity(capacity.min(1 << 16)),
            counts: HashMap::new(),
        }
    }

    /// How many tokens it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many it holds.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Adds a token, forgetting the oldest when full.
    pub fn push(&mut self, token: i32) {
        if self.capacity == 0 {
            return;
        }
        if self.tokens.len() >= self.capacity
            && let Some(old) = self.tokens.pop_front()
            && let Some(n) = self.counts.get_mut(&old)
        {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&old);
            }
        }
        self.tokens.push_back(token);
        *self.counts.entry(token).or_insert(0) += 1;
    }

    /// How often `token` appears.
    pub fn count(&self, token: i32) -> usize {
        self.counts.get(&token).copied().unwrap_or(0)
    }

    /// The token `i` places from the end (0: the last).
    pub fn back(&self, i: usize) -> i32 {
        self.tokens[self.tokens.len() - 1 - i]
    }

    /// Forgets every token.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.counts.clear();
    }
}
