//! The backend boundary: devices, buffer types, streams, events, and the
//! registry of compiled-in backends.
//!
//! The buffer type is the unit of placement: a device says which buffer
//! types it computes on, and tensors live in buffers of some type. Required
//! methods are few; optional capabilities have working defaults and are
//! described as data ([`DeviceCaps`]). Buffers themselves live one layer
//! down, in [`crate::memory`]; they are re-exported here because every
//! backend implements both.

mod buffer_type;
mod device;
mod registry;
mod stream;
mod weight_support;

pub use buffer_type::BufferType;
pub use device::{
    DEFAULT_OFFLOAD_MIN_BATCH, Device, DeviceCaps, DeviceKind, DevicePerf, MemoryInfo,
    MemorySource, batch_offload_rule, weight_buffer_type_names,
};
pub use registry::{BackendRegistration, Registry};
pub use stream::{CompletedEvent, Event, Stream};
pub use weight_support::{WeightOps, weight_ops};

pub use crate::memory::{Buffer, BufferUsage, HostMemInfo, HostMemory, check_range, copy_between};
