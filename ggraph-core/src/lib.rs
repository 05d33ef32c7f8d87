//! ggraph-core: the tensor graph IR, the backend traits, the allocator and
//! the scheduler for running models across CPUs and GPUs with ggml's op
//! semantics.
//!
//! A user builds a backend-agnostic [`ir::Graph`] with [`ir::GraphBuilder`],
//! places its memory, and runs it on any [`backend::Device`]; across
//! several devices, [`sched::Scheduler`] decides where every op runs and
//! [`alloc`] plans the memory. Models, GGUF and the KV cache live one crate
//! up, in `ggraph-model`.
//!
//! # Example
//!
//! This crate has no kernels: running a graph takes a device from a backend
//! crate (`ggraph-cpu`, `ggraph-cuda`, ...), given to [`exec::compute_on`]
//! or to a [`sched::Scheduler`]. Everything before that works here alone:
//! build a graph with ggml's ops and shapes, inspect it, plan its memory
//! without allocating any, and draw it.
//!
//! ```
//! use ggraph_core::alloc::{GraphAllocator, VirtualBufferType};
//! use ggraph_core::ir::GraphBuilder;
//! use ggraph_core::DType;
//!
//! // y = silu(w · x): ggml's mul_mat takes w [k, m] and x [k, n] to [m, n].
//! let mut b = GraphBuilder::new();
//! let w = b.weight("w", DType::Q8_0, &[64, 32])?; // 32 rows of 64 values
//! let x = b.input("x", DType::F32, &[64, 8])?; // 8 tokens
//! let h = b.mul_mat(w, x)?;
//! let y = b.silu(h)?;
//! b.set_output(y)?;
//! let graph = b.build();
//!
//! let out = graph.tensor(y);
//! assert_eq!((out.dtype, out.ne), (DType::F32, [32, 8, 1, 1]));
//! assert_eq!(out.nbytes(), 32 * 8 * 4);
//! assert_eq!(graph.nodes(), [h, y]); // execution order
//! assert_eq!(graph.leafs(), [w, x]);
//!
//! // Compute memory, planned in a stand-in for host memory that holds no
//! // bytes (buffer type 0 for every tensor). The weight is placed by its
//! // loader, not here; x (2048 bytes) and h (1024) are live at once, and
//! // silu runs in place on h.
//! let host = VirtualBufferType::new("host", 64, u64::MAX, true);
//! let allocator = GraphAllocator::single(host);
//! let plan = allocator.plan(&graph, &|_| 0)?;
//! assert_eq!(plan.bytes_per_buffer_type(), [3072]);
//! assert_eq!(plan.slot(y), plan.slot(h));
//! assert_eq!(plan.slot(w), None);
//!
//! // Graphviz DOT, one record per tensor.
//! assert!(graph.to_dot().contains("MUL_MAT"));
//! # Ok::<(), ggraph_core::Error>(())
//! ```
//!
//! # Layers
//!
//! Bottom up: `error`, `dtype`, `util` → `quant` → `memory`
//! (buffers) → `ir` → `backend` (devices, buffer types, streams) → `alloc`
//! → `sched` → `exec`. A module imports only from its own layer or below.

#![warn(missing_docs)]

pub mod alloc;
pub mod backend;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod ir;
pub mod memory;
pub mod quant;
pub mod sched;
pub mod util;

pub use backend::{Buffer, BufferType, BufferUsage, Device, DeviceKind, Stream};
pub use dtype::DType;
pub use error::{Error, Result};
pub use ir::{Graph, GraphBuilder, TensorId};
