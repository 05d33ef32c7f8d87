//! ggraph-core: the tensor graph IR, the backend traits, the allocator and
//! the scheduler.
//!
//! A user builds a backend-agnostic [`ir::Graph`] with [`ir::GraphBuilder`],
//! places its memory, and runs it on any [`backend::Device`]; across
//! several devices, [`sched::Scheduler`] decides where every op runs and
//! [`alloc`] plans the memory. Models, GGUF and the KV cache live one crate
//! up, in `ggraph-model`.
//!
//! Layers, bottom up: `error`, `dtype`, `util` → `quant` → `memory`
//! (buffers) → `ir` → `backend` (devices, buffer types, streams) → `alloc`
//! → `sched` → `exec`. A module imports only from its own layer or below.

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
