//! ggraph-conformance: checks that a backend computes what ggml's op
//! semantics say.
//!
//! [`run`] runs every op × dtype × a spread of shapes on a device and
//! compares each result with [`reference::evaluate`], an f64 evaluator of
//! any graph, by normalised mean squared error against a bound per case.
//! [`testing`] builds the graphs and data the backends' own tests share
//! (llama blocks, a mixed CPU+GPU llama, random graphs). Product code does
//! not depend on this crate; backends take it as a dev-dependency.
//!
//! # Example
//!
//! The reference evaluates any graph from its leafs' bytes, without a
//! backend; a backend's result is then judged by [`nmse`] against it:
//!
//! ```
//! use ggraph_conformance::{cases, nmse, reference};
//! use ggraph_core::DType;
//! use ggraph_core::ir::GraphBuilder;
//!
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", DType::F32, &[4])?;
//! let y = b.scale(x, 2.0)?;
//! b.set_output(y)?;
//! let graph = b.build();
//!
//! let x_bytes: Vec<u8> = [1.0f32, -2.0, 0.5, 0.0]
//!     .iter()
//!     .flat_map(|v| v.to_le_bytes())
//!     .collect();
//! let ev = reference::evaluate(&graph, |_leaf| Ok(x_bytes.clone()))?;
//! assert_eq!(ev.values(y), [2.0, -4.0, 1.0, 0.0]);
//! assert_eq!(nmse(&[2.0, -4.0, 1.0, 0.0], &ev.values(y)), 0.0);
//! assert!(nmse(&[2.0, -4.0, 1.0, 1.0], &ev.values(y)) > 1e-3);
//!
//! // The suite's cases, each with the op it tests and its error bound.
//! let suite = cases();
//! let q4 = suite.iter().filter(|c| c.name.starts_with("mul_mat[Q4_0,")).count();
//! assert!(q4 > 0);
//! # Ok::<(), ggraph_core::Error>(())
//! ```
//!
//! A backend's test runs the suite, or part of it, on its device:
//!
//! ```
//! use std::sync::Arc;
//! use ggraph_core::backend::Device;
//!
//! /// In the backend's own tests, with its device.
//! fn check_rope(device: &Arc<dyn Device>) -> Result<(), String> {
//!     let report = ggraph_conformance::run_filtered(device, |name| name.starts_with("rope["));
//!     println!("{}", report.summary());
//!     report.check()
//! }
//! # let _ = check_rope;
//! ```

#![warn(missing_docs)]

mod case;
mod cases;
pub mod reference;
mod suite;
pub mod testing;

pub use case::{Case, CaseBuilder, CaseResult, Outcome};
pub use cases::cases;
pub use suite::{Report, nmse, run, run_filtered, run_layouts};
