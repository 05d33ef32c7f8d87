//! Progress bars on stderr (indicatif): bytes of weights loaded or
//! written, tokens of a long prompt. Only on a terminal: when stderr is a
//! pipe or a file (tests, logs, `2>err.txt`) nothing is drawn. Log lines
//! ([`crate::logs`]) are printed above a bar, not through it.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Byte counts below this are done without a bar.
pub const THRESHOLD_BYTES: u64 = 64 << 20;

/// Whether bars are drawn: stderr is a terminal.
pub fn enabled() -> bool {
    std::io::stderr().is_terminal()
}

/// Every bar of the process, so that log lines can be printed above them.
fn bars() -> &'static MultiProgress {
    static BARS: OnceLock<MultiProgress> = OnceLock::new();
    BARS.get_or_init(|| {
        MultiProgress::with_draw_target(if enabled() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        })
    })
}

/// What a bar counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Shown as sizes (KiB, MiB, ...), with a rate per second.
    Bytes,
    /// Shown as counts of tokens.
    Tokens,
}

/// A bar that appears on the first update whose total reaches its
/// threshold, and goes when finished or dropped.
pub struct Progress {
    label: String,
    unit: Unit,
    threshold: u64,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over bytes, shown for [`THRESHOLD_BYTES`] or more.
    pub fn bytes(label: impl Into<String>) -> Progress {
        Progress {
            label: label.into(),
            unit: Unit::Bytes,
            threshold: THRESHOLD_BYTES,
            bar: None,
        }
    }

    /// A bar over tokens, shown for more than `above` tokens.
    pub fn tokens(label: impl Into<String>, above: u64) -> Progress {
        Progress {
            label: label.into(),
            unit: Unit::Tokens,
            threshold: above.saturating_add(1),
            bar: None,
        }
    }

    /// Shown from `threshold` units on.
    pub fn with_threshold(mut self, threshold: u64) -> Progress {
        self.threshold = threshold;
        self
    }

    /// Reports `done` of `total`.
    pub fn update(&mut self, done: u64, total: u64) {
        if self.bar.is_none() {
            if total < self.threshold || !enabled() {
                return;
            }
            let template = match self.unit {
                Unit::Bytes => {
                    "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)"
                }
                Unit::Tokens => "{msg} [{bar:30}] {pos}/{len} tokens ({elapsed})",
            };
            let style = ProgressStyle::with_template(template)
                .expect("the templates are valid")
                .progress_chars("=> ");
            let bar = bars().add(
                ProgressBar::new(total)
                    .with_style(style)
                    .with_message(self.label.clone()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    /// Removes the bar, if one is shown.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Writes to stderr with the bars out of the way: a log line lands above
/// them instead of through them.
pub struct StderrAboveBars;

impl Write for StderrAboveBars {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        bars().suspend(|| std::io::stderr().write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        bars().suspend(|| std::io::stderr().write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_drawn_below_the_threshold_or_off_a_terminal() {
        let mut p = Progress::bytes("loading");
        p.update(1 << 20, 1 << 20);
        assert!(p.bar.is_none());
        let mut p = Progress::tokens("prompt", 512);
        p.update(0, 512);
        assert!(p.bar.is_none());
        // the test harness's stderr is not a terminal (captured or piped)
        if !enabled() {
            let mut p = Progress::bytes("loading");
            p.update(0, 1 << 40);
            assert!(p.bar.is_none());
        }
    }
}
