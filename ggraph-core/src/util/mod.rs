//! Small helpers below everything else: byte sizes as people write them,
//! and a deterministic random number generator.

mod bytes;
mod rng;

pub use bytes::{format_bytes, parse_bytes};
pub use rng::Rng;
