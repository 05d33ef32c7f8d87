//! ggraph-conformance: checks that a backend computes what ggml's op
//! semantics say.
//!
//! [`run`] runs every op × dtype × a spread of shapes on a device and
//! compares each result with [`reference::evaluate`], an f64 evaluator of
//! any graph, by normalised mean squared error against a bound per case.
//! [`testing`] builds the graphs and data the backends' own tests share
//! (llama blocks, a mixed CPU+GPU llama, random graphs). Product code does
//! not depend on this crate; backends take it as a dev-dependency.

mod case;
mod cases;
pub mod reference;
mod suite;
pub mod testing;

pub use case::{Case, CaseBuilder, CaseResult, Outcome};
pub use cases::cases;
pub use suite::{Report, nmse, run, run_filtered};
