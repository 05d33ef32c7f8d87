//! ggraph-core: the tensor graph IR, the backend traits, and everything
//! built on them that is not a backend: allocation, scheduling, models.
//!
//! A user builds a backend-agnostic [`ir::Graph`] with [`ir::GraphBuilder`],
//! places its memory, and runs it on any [`backend::Device`].

pub mod alloc;
pub mod backend;
pub mod batch;
pub mod conformance;
pub mod context;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod ir;
pub mod kv;
pub mod model;
pub mod quant;
pub mod reference;
pub mod sched;
pub mod testing;
pub mod util;

pub use backend::{Backend, Buffer, BufferType, BufferUsage, Device, DeviceKind};
pub use dtype::DType;
pub use error::{Error, Result};
pub use ir::{Graph, GraphBuilder, TensorId};
