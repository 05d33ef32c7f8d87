//! The seam of a sampler chain: one step, as llama.cpp's
//! `llama_sampler_i` is one.

use super::candidates::Candidates;

/// One step of a sampler chain (llama.cpp's `llama_sampler_i`).
pub trait Sampler: Send {
    /// Its name, as llama.cpp names it.
    fn name(&self) -> &'static str;
    /// Reshapes, cuts or chooses among the candidates.
    fn apply(&mut self, candidates: &mut Candidates);
    /// Learns the token chosen (or a prompt token) for later draws.
    fn accept(&mut self, _token: i32) {}
    /// Forgets what it learnt and restarts its random numbers.
    fn reset(&mut self) {}
    /// A copy with the same state.
    fn clone_box(&self) -> Box<dyn Sampler>;
}

impl Clone for Box<dyn Sampler> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}
