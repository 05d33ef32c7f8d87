//! An opt-in profile of the CPU kernels: wall time per op and shape,
//! summed over every graph the CPU streams run while it is on.
//!
//! Off by default (the stream then reads one atomic flag per node). Turn
//! it on with [`start`] or by setting `GGRAPH_CPU_PROFILE=1`, read it
//! with [`report`].

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ggraph_core::ir::{Graph, TensorId};

static ON: AtomicBool = AtomicBool::new(false);
static TABLE: Mutex<Option<HashMap<String, (Duration, u64)>>> = Mutex::new(None);

/// Clears the table and starts recording.
pub fn start() {
    *TABLE.lock().unwrap_or_else(|e| e.into_inner()) = Some(HashMap::new());
    ON.store(true, Ordering::SeqCst);
}

/// Stops recording (the table stays readable).
pub fn stop() {
    ON.store(false, Ordering::SeqCst);
}

pub(crate) fn enabled() -> bool {
    static FROM_ENV: std::sync::Once = std::sync::Once::new();
    FROM_ENV.call_once(|| {
        if std::env::var("GGRAPH_CPU_PROFILE").is_ok_and(|v| v != "0" && !v.is_empty()) {
            start();
        }
    });
    ON.load(Ordering::Relaxed)
}

/// Adds one kernel run of `node` that took `took`.
pub(crate) fn record(graph: &Graph, node: TensorId, took: Duration) {
    let t = graph.tensor(node);
    let src = |k: usize| {
        t.src.get(k).map_or(String::new(), |&s| {
            let st = graph.tensor(s);
            format!(" {}{}", st.dtype, st.shape_str())
        })
    };
    let key = format!(
        "{} {}{} <-{}{}",
        t.op.label(),
        t.dtype,
        t.shape_str(),
        src(0),
        src(1)
    );
    let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let entry = table
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_insert((Duration::ZERO, 0));
    entry.0 += took;
    entry.1 += 1;
}

/// The recorded kernels, slowest total first: total ms, calls, µs per
/// call, op and shapes (result <- first two sources). `top` limits the
/// rows (0: all).
pub fn report(top: usize) -> String {
    let table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(table) = table.as_ref() else {
        return "CPU profile: off (GGRAPH_CPU_PROFILE=1 or ggraph_cpu::profile::start)\n".into();
    };
    let mut rows: Vec<_> = table.iter().collect();
    rows.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
    let total: Duration = rows.iter().map(|r| r.1.0).sum();
    let mut out = format!("CPU kernels: {:.2} ms in all\n", total.as_secs_f64() * 1e3);
    let _ = writeln!(
        out,
        "{:>10} {:>8} {:>10}  op",
        "total ms", "calls", "µs/call"
    );
    let shown = if top == 0 {
        rows.len()
    } else {
        top.min(rows.len())
    };
    for (key, (time, calls)) in &rows[..shown] {
        let _ = writeln!(
            out,
            "{:>10.2} {:>8} {:>10.2}  {key}",
            time.as_secs_f64() * 1e3,
            calls,
            time.as_secs_f64() * 1e6 / (*calls).max(1) as f64
        );
    }
    out
}
