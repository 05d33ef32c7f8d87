//! Greedy decoding for the tests that compare placements: a prompt's
//! last logits and the tokens picked after it, the same on every device
//! when the placement is right.

use std::sync::Arc;

use ggraph_core::error::{Error, Result};
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams};
use ggraph_model::loaded::Model;

/// The prompt's last logits and the `n` tokens chosen greedily after it
/// (each decoded in turn; the first of equal logits wins).
pub fn greedy(
    model: Model,
    params: ContextParams,
    prompt: &[i32],
    n: usize,
) -> Result<(Vec<f32>, Vec<i32>)> {
    let failed = |e: ggraph_model::context::DecodeError| Error::InvalidArgument(e.to_string());
    let mut ctx = Context::new(Arc::new(model), params)?;
    ctx.decode(&Batch::tokens(prompt)).map_err(failed)?;
    let first = ctx.logits().to_vec();
    let mut tokens = Vec::with_capacity(n);
    for _ in 0..n {
        let l = ctx.logits();
        let next = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as i32;
        tokens.push(next);
        ctx.decode(&Batch::tokens(&[next])).map_err(failed)?;
    }
    Ok((first, tokens))
}
