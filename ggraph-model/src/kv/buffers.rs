//! The device buffers a cache or a recurrent state owns: zeroed when
//! made, lost when a device restarts (a remote server's memory), and
//! allocated and zeroed again by a restore. Also the sum of bytes per
//! buffer type that every memory report uses.

use std::sync::Arc;

use ggraph_core::backend::Buffer;
use ggraph_core::error::Result;

/// Buffers a memory owns, and the buffer type whose memory was lost
/// while a restore has not finished.
#[derive(Default)]
pub struct OwnedBuffers {
    buffers: Vec<Arc<dyn Buffer>>,
    stale: Option<String>,
}

impl OwnedBuffers {
    /// Takes `buffers`, zeroing them.
    pub fn push_zeroed(&mut self, buffers: Vec<Arc<dyn Buffer>>) -> Result<()> {
        for b in &buffers {
            b.fill(0, b.size(), 0)?;
        }
        self.buffers.extend(buffers);
        Ok(())
    }

    /// The buffer type of memory a device lost ([`Buffer::lost`]), or
    /// whose restore has not finished, if any.
    pub fn lost(&self) -> Option<&str> {
        self.stale.as_deref().or_else(|| {
            (self.buffers.iter())
                .find(|b| b.lost())
                .map(|b| b.buffer_type_name())
        })
    }

    /// Allocates lost memory again and zeroes every buffer; `forget` runs
    /// first, for the owner to drop what the memory held. Whether anything
    /// was lost. Errors while a device cannot be reached, leaving the
    /// memory marked for the next call.
    pub fn restore(&mut self, forget: impl FnOnce()) -> Result<bool> {
        let Some(lost) = self.lost() else {
            return Ok(false);
        };
        self.stale = Some(lost.to_string());
        forget();
        for b in &self.buffers {
            b.restore()?;
        }
        for b in &self.buffers {
            b.fill(0, b.size(), 0)?;
        }
        self.stale = None;
        Ok(true)
    }

    /// Bytes per buffer type.
    pub fn bytes_per_buffer_type(&self) -> Vec<(String, u64)> {
        bytes_per_buffer_type(&self.buffers)
    }
}

/// Bytes of `buffers` per buffer type, in order of first appearance.
pub fn bytes_per_buffer_type(buffers: &[Arc<dyn Buffer>]) -> Vec<(String, u64)> {
    sum_by_name(
        buffers
            .iter()
            .map(|b| (b.buffer_type_name().to_string(), b.size())),
    )
}

/// `(name, bytes)` pairs summed per name, in order of first appearance.
pub fn sum_by_name(pairs: impl IntoIterator<Item = (String, u64)>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for (name, bytes) in pairs {
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, b)) => *b += bytes,
            None => out.push((name, bytes)),
        }
    }
    out
}
