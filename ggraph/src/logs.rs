//! Logs on stderr: the `tracing` events of ggraph's crates (the
//! scheduler's passes and splits, the allocators' decisions, placement),
//! shown when asked for with `-v`/`-vv` or `RUST_LOG`.
//!
//! The filter starts at `warn`; `RUST_LOG` adds its directives
//! (`RUST_LOG=ggraph=debug`: every ggraph crate, since a target matches
//! by prefix: `ggraph_core::sched`, `ggraph_model::loaded`, ...); `-v`
//! adds `ggraph=info`, `-vv` `ggraph=debug`, `-vvv` `ggraph=trace`.

use clap::ArgAction;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{Directive, LevelFilter};

use crate::progress::StderrAboveBars;

/// `-v`, `-vv`, `-vvv`: the tools' log level.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct Verbosity {
    /// Log to stderr: -v info, -vv debug (every scheduler pass, split and
    /// allocation), -vvv trace; RUST_LOG=ggraph=debug does the same
    #[arg(short = 'v', action = ArgAction::Count, global = true)]
    pub log_level: u8,
}

/// The directive `-v` repeated `verbosity` times adds, if any.
pub fn directive(verbosity: u8) -> Option<Directive> {
    let level = match verbosity {
        0 => return None,
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    Some(
        format!("ggraph={level}")
            .parse()
            .expect("a valid directive"),
    )
}

/// The filter for `verbosity` and `RUST_LOG` (`rust_log`; invalid
/// directives in it are skipped).
pub fn filter(verbosity: u8, rust_log: Option<&str>) -> EnvFilter {
    let mut f = EnvFilter::builder()
        .with_default_directive(LevelFilter::WARN.into())
        .parse_lossy(rust_log.unwrap_or(""));
    if let Some(d) = directive(verbosity) {
        f = f.add_directive(d);
    }
    f
}

/// Installs the log subscriber on stderr (once; later calls do nothing).
pub fn init(verbosity: u8) {
    init_with(verbosity, None);
}

/// [`init`], with a directive the tool adds before `-v` and `RUST_LOG`
/// (`ggraph serve` logs each request at info: `ggraph_server=info`).
pub fn init_with(verbosity: u8, default: Option<Directive>) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let mut f = filter(verbosity, rust_log.as_deref());
    if let Some(d) = default
        && rust_log.is_none()
        && verbosity == 0
    {
        f = f.add_directive(d);
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(f)
        .with_writer(|| StderrAboveBars)
        .with_ansi(crate::progress::enabled())
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_starts_at_warn_and_v_raises_ggraph_s_crates() {
        assert_eq!(filter(0, None).max_level_hint(), Some(LevelFilter::WARN));
        assert_eq!(filter(1, None).max_level_hint(), Some(LevelFilter::INFO));
        assert_eq!(filter(2, None).max_level_hint(), Some(LevelFilter::DEBUG));
        assert_eq!(filter(5, None).max_level_hint(), Some(LevelFilter::TRACE));
        assert_eq!(
            filter(0, Some("ggraph=debug")).max_level_hint(),
            Some(LevelFilter::DEBUG)
        );
        assert_eq!(directive(2).unwrap().to_string(), "ggraph=debug");
    }
}
