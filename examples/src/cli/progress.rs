//! Progress on stderr for operations that read large files: silent below a
//! size threshold, a self-updating line on a terminal, a line per 10%
//! otherwise.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use ggraph::util::format_bytes;

/// Files below this many bytes are read without progress.
pub const THRESHOLD_BYTES: u64 = 64 << 20;

pub struct StderrProgress {
    label: String,
    threshold: u64,
    start: Instant,
    shown: bool,
    last_tenth: u64,
    tty: bool,
}

impl StderrProgress {
    pub fn new(label: impl Into<String>) -> StderrProgress {
        StderrProgress::with_threshold(label, THRESHOLD_BYTES)
    }

    pub fn with_threshold(label: impl Into<String>, threshold: u64) -> StderrProgress {
        StderrProgress {
            label: label.into(),
            threshold,
            start: Instant::now(),
            shown: false,
            last_tenth: 0,
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// Reports `done` of `total` bytes.
    pub fn update(&mut self, done: u64, total: u64) {
        if total < self.threshold && done < self.threshold {
            return;
        }
        let pct = done.saturating_mul(100).checked_div(total).unwrap_or(100);
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let rate = format_bytes((done as f64 / secs) as u64);
        let line = format!(
            "{}: {} of {} ({pct}%, {rate}/s)",
            self.label,
            format_bytes(done),
            format_bytes(total)
        );
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r{line}\x1b[K");
            let _ = err.flush();
        } else if pct / 10 > self.last_tenth || !self.shown {
            self.last_tenth = pct / 10;
            let _ = writeln!(err, "{line}");
        }
        self.shown = true;
    }

    /// Ends the line if one was shown.
    pub fn finish(&mut self) {
        if self.shown && self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}
