//! Random graphs for property tests: DAGs over a shape family `[w, n]`
//! with views, in-place capable ops, matrix products against weights,
//! inputs and outputs. The same recipe built with a smaller `n` gives a
//! graph of the same structure with smaller tensors.

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::{Graph, GraphBuilder, TensorId};
use ggraph_core::util::Rng;

/// A recipe: the random choices, independent of the size.
#[derive(Clone, Debug)]
pub struct RandomGraphRecipe {
    /// Seed of every choice: the same recipe gives the same structure at
    /// any size.
    pub seed: u64,
    /// Ops to add after the leafs, each picked from unary, binary, norm,
    /// softmax, matrix product, view, transpose, reshape and concat.
    pub n_ops: usize,
    /// F32 inputs of shape `[w, n]`; at least one is made.
    pub n_inputs: usize,
    /// F32 weights of shape `[w, w]` for the matrix products; at least one
    /// is made.
    pub n_weights: usize,
}

/// A built random graph with its leafs by role.
pub struct RandomGraph {
    /// The graph, with its outputs marked and no memory bound.
    pub graph: Graph,
    /// The input leafs, in creation order.
    pub inputs: Vec<TensorId>,
    /// The weight leafs, in creation order.
    pub weights: Vec<TensorId>,
    /// The nodes marked as outputs: about one op in ten, and always the
    /// last one.
    pub outputs: Vec<TensorId>,
}

impl RandomGraphRecipe {
    /// Builds the graph with values of shape [w, n] (w a multiple of 4).
    pub fn build(&self, w: usize, n: usize) -> Result<RandomGraph> {
        let mut rng = Rng::new(self.seed);
        let mut b = GraphBuilder::new();
        let mut values: Vec<TensorId> = Vec::new();
        let mut inputs = Vec::new();
        for i in 0..self.n_inputs.max(1) {
            let x = b.input(&format!("x{i}"), DType::F32, &[w, n])?;
            inputs.push(x);
            values.push(x);
        }
        let mut weights = Vec::new();
        for i in 0..self.n_weights.max(1) {
            weights.push(b.weight(&format!("w{i}"), DType::F32, &[w, w])?);
        }
        let mut outputs = Vec::new();
        for _ in 0..self.n_ops {
            let pick = |rng: &mut Rng, values: &[TensorId]| {
                // favour recent values so that chains form
                let k = values.len();
                let back = rng.below(k.min(6));
                values[k - 1 - back]
            };
            let x = pick(&mut rng, &values);
            let y = pick(&mut rng, &values);
            let v = match rng.below(11) {
                0 => b.silu(x)?,
                1 => b.scale(x, 0.5)?,
                2 => b.add(x, y)?,
                3 => b.mul(x, y)?,
                4 => b.rms_norm(x, 1e-5)?,
                5 => b.soft_max(x)?,
                6 => {
                    let wt = weights[rng.below(weights.len())];
                    b.mul_mat(wt, x)?
                }
                7 => {
                    // a view then an in-place op through it
                    let v = b.view_2d(x, w, n, w * 4, 0)?;
                    b.silu(v)?
                }
                8 => {
                    // transpose, copy, transpose back: a non-contiguous view
                    let t = b.transpose(x)?;
                    let c = b.cont(t)?;
                    let t2 = b.transpose(c)?;
                    b.cont(t2)?
                }
                9 => {
                    let r = b.reshape(x, &[w * n])?;
                    let r = b.scale(r, 2.0)?;
                    b.reshape(r, &[w, n])?
                }
                _ => {
                    // the second half of the rows, copied next to the first
                    let top = b.view_2d(x, w / 2, n, w * 4, 0)?;
                    let bottom = b.view_2d(x, w / 2, n, w * 4, w / 2 * 4)?;
                    b.concat(bottom, top, 0)?
                }
            };
            if rng.below(10) == 0 {
                b.set_output(v)?;
                outputs.push(v);
            }
            values.push(v);
        }
        let last = *values.last().expect("inputs exist");
        if !outputs.contains(&last) {
            b.set_output(last)?;
            outputs.push(last);
        }
        Ok(RandomGraph {
            graph: b.build(),
            inputs,
            weights,
            outputs,
        })
    }
}
