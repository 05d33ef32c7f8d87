//! `ggraph serve` under load beside llama.cpp's `llama-server`: the same
//! model file, slots, context and batch; a bounded number of streamed
//! completions over loopback at concurrency 1, 2, 4, 8 and 16, each
//! generating the same number of tokens (`ignore_eos`). Prints per server
//! and concurrency: generated tokens/s, requests/s, time to first token
//! and time per output token (p50, p99), errors; and for `ggraph serve`
//! the cells the cache holds after the run beyond the slots' prompt
//! caches (leaked cells: must be 0).
//!
//! Run: cargo build --release -p ggraph --bin ggraph &&
//! cargo run --release -p ggraph-benches --bin server_bench --
//! [--model M.gguf] [--llama-server PATH] [--concurrency 1,2,4,8,16]
//! [--requests N] [--max-tokens N] [--ctx N] [--batch N] [--ggraph PATH]
//!
//! Defaults: `$GGRAPH_REAL_GGUF/Q8_0.gguf` (or
//! `~/.cache/ggraph-models/smollm2-135m-instruct/Q8_0.gguf`), 16 slots of
//! 256 cells, batch 512, 64 tokens a request, 4 x concurrency requests a
//! level (at least 16); the ggraph binary next to this one;
//! `scripts/llama-server` builds llama-server from the sdist.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error>;

const PROMPTS: [&str; 8] = [
    "The history of the printing press begins",
    "Write a short story about a lighthouse keeper who",
    "Explain how a refrigerator works:",
    "The three most important inventions of the last century are",
    "A recipe for bread: first,",
    "In the year 2300, cities on Mars",
    "The rules of chess, explained for a child:",
    "Dear diary, today I learned that",
];

struct Options {
    model: PathBuf,
    ggraph: PathBuf,
    llama_server: Option<PathBuf>,
    concurrency: Vec<usize>,
    requests: Option<usize>,
    max_tokens: usize,
    ctx: usize,
    batch: usize,
}

fn options() -> Result<Options, Error> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let real = std::env::var_os("GGRAPH_REAL_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/ggraph-models/smollm2-135m-instruct"));
    let exe = std::env::current_exe()?;
    let mut o = Options {
        model: real.join("Q8_0.gguf"),
        ggraph: exe.with_file_name("ggraph"),
        llama_server: None,
        concurrency: vec![1, 2, 4, 8, 16],
        requests: None,
        max_tokens: 64,
        ctx: 256,
        batch: 512,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--model" => o.model = value()?.into(),
            "--ggraph" => o.ggraph = value()?.into(),
            "--llama-server" => o.llama_server = Some(value()?.into()),
            "--concurrency" => {
                o.concurrency = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--requests" => o.requests = Some(value()?.parse()?),
            "--max-tokens" => o.max_tokens = value()?.parse()?,
            "--ctx" => o.ctx = value()?.parse()?,
            "--batch" => o.batch = value()?.parse()?,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    if o.concurrency.is_empty() || o.concurrency.contains(&0) {
        return Err("--concurrency: positive numbers".into());
    }
    Ok(o)
}

/// A server process, killed when dropped.
struct Running {
    child: Child,
    addr: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `cmd` listening on `port` and waits until `/health` says 200.
fn start(mut cmd: Command, port: u16) -> Result<Running, Error> {
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
    let mut r = Running {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(120) {
        if let Some(status) = r.child.try_wait()? {
            return Err(format!("the server exited: {status}").into());
        }
        if get(&r.addr, "/health").is_ok_and(|(s, _)| s == 200) {
            return Ok(r);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("the server did not become ready in 120 s".into())
}

/// One GET; the status and the body (not chunked).
fn get(addr: &str, path: &str) -> Result<(u16, String), Error> {
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP head")?;
    let status = head.split(' ').nth(1).ok_or("no status")?.parse()?;
    Ok((status, dechunk(head, body)))
}

fn dechunk(head: &str, body: &str) -> String {
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_string();
    }
    let mut out = String::new();
    let mut s = body;
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One streamed request's times.
struct Sample {
    ttft: Duration,
    /// Mean time between tokens after the first.
    tpot: Option<Duration>,
    tokens: usize,
}

/// Reads a chunked body's bytes as they come.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            // the CRLF closing the previous chunk, then the size
            while line.trim().is_empty() {
                line.clear();
                if self.inner.read_line(&mut line)? == 0 {
                    self.done = true;
                    return Ok(0);
                }
            }
            self.left = usize::from_str_radix(line.trim(), 16)
                .map_err(|e| std::io::Error::other(format!("chunk size {line:?}: {e}")))?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let got = self.inner.read(&mut buf[..n])?;
        self.left -= got;
        Ok(got)
    }
}

/// A streamed `/v1/completions`: time to the first token, then between
/// tokens.
fn stream_one(addr: &str, prompt: &str, max_tokens: usize, seed: usize) -> Result<Sample, Error> {
    let body = format!(
        "{{\"prompt\": {prompt:?}, \"max_tokens\": {max_tokens}, \"stream\": true, \
         \"ignore_eos\": true, \"seed\": {seed}, \"cache_prompt\": false}}"
    );
    let start = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status)?;
    if status.split(' ').nth(1) != Some("200") {
        return Err(format!("status {}", status.trim()).into());
    }
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        chunked |= h
            .to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked");
    }
    let body: Box<dyn Read> = if chunked {
        Box::new(Chunked {
            inner: r,
            left: 0,
            done: false,
        })
    } else {
        Box::new(r)
    };
    let mut times = Vec::new();
    for line in BufReader::new(body).lines() {
        let line = line?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        if data.contains("\"error\"") {
            return Err(data.to_string().into());
        }
        // a chunk per token; the last one carries the finish reason
        if data.contains("\"finish_reason\":null") || data.contains("\"finish_reason\": null") {
            times.push(start.elapsed());
        }
    }
    let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
        return Err("no token streamed".into());
    };
    Ok(Sample {
        ttft: first,
        tpot: (times.len() > 1).then(|| (last - first) / (times.len() as u32 - 1)),
        tokens: times.len(),
    })
}

/// One concurrency level's figures.
struct Level {
    tokens_per_s: f64,
    requests_per_s: f64,
    ttft: (f64, f64),
    tpot: (f64, f64),
    errors: usize,
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i]
}

fn load(addr: &str, concurrency: usize, requests: usize, max_tokens: usize) -> Level {
    let next = AtomicUsize::new(0);
    let samples = Mutex::new(Vec::new());
    let errors = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..concurrency {
            sc.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        return;
                    }
                    match stream_one(addr, PROMPTS[i % PROMPTS.len()], max_tokens, i) {
                        Ok(s) => {
                            if let Ok(mut v) = samples.lock() {
                                v.push(s);
                            }
                        }
                        Err(e) => {
                            eprintln!("server_bench: request {i}: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let samples = samples.into_inner().unwrap_or_default();
    let tokens: usize = samples.iter().map(|s| s.tokens).sum();
    let mut ttft: Vec<f64> = samples.iter().map(|s| s.ttft.as_secs_f64() * 1e3).collect();
    let mut tpot: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.tpot)
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    Level {
        tokens_per_s: tokens as f64 / secs,
        requests_per_s: samples.len() as f64 / secs,
        ttft: (percentile(&mut ttft, 0.5), percentile(&mut ttft, 0.99)),
        tpot: (percentile(&mut tpot, 0.5), percentile(&mut tpot, 0.99)),
        errors: errors.load(Ordering::Relaxed),
    }
}

/// ggraph serve's cache cells beyond its slots' prompt caches.
fn leaked_cells(addr: &str) -> Result<i64, Error> {
    let (_, metrics) = get(addr, "/metrics")?;
    let used: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("llamacpp:kv_cache_tokens ")?.parse().ok())
        .ok_or("no kv_cache_tokens metric")?;
    let (_, slots) = get(addr, "/slots")?;
    let cached: i64 = slots
        .split("\"n_cached\":")
        .skip(1)
        .filter_map(|s| {
            s.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<i64>()
                .ok()
        })
        .sum();
    Ok(used as i64 - cached)
}

fn main() -> Result<(), Error> {
    let o = options()?;
    if !o.model.exists() {
        return Err(format!("no model at {}", o.model.display()).into());
    }
    if !o.ggraph.exists() {
        return Err(format!(
            "no ggraph binary at {}: cargo build --release -p ggraph --bin ggraph",
            o.ggraph.display()
        )
        .into());
    }
    let slots = *o.concurrency.iter().max().unwrap_or(&1);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let model = o.model.to_string_lossy().into_owned();
    println!(
        "server_bench: {model}; {slots} slots of {} cells, batch {}, {} tokens a request, {threads} threads",
        o.ctx, o.batch, o.max_tokens
    );
    let mut peers: Vec<(&str, Command, u16)> = Vec::new();
    let port = free_port()?;
    let mut cmd = Command::new(&o.ggraph);
    cmd.args(["serve", &model, "--cpu-only", "--port", &port.to_string()])
        .args(["-np", &slots.to_string(), "-c", &o.ctx.to_string()])
        .args([
            "-b",
            &o.batch.to_string(),
            "-ub",
            &o.batch.min(512).to_string(),
        ])
        .args(["-t", &threads.to_string(), "-fa", "on"])
        .env("RUST_LOG", "warn");
    peers.push(("ggraph serve", cmd, port));
    if let Some(bin) = &o.llama_server {
        let port = free_port()?;
        let mut cmd = Command::new(bin);
        // llama-server's -c is the whole context, shared by its slots
        cmd.args(["-m", &model, "--port", &port.to_string()])
            .args([
                "-np",
                &slots.to_string(),
                "-c",
                &(o.ctx * slots).to_string(),
            ])
            .args([
                "-b",
                &o.batch.to_string(),
                "-ub",
                &o.batch.min(512).to_string(),
            ])
            .args(["-t", &threads.to_string(), "-fa", "on", "--no-webui"]);
        peers.push(("llama-server", cmd, port));
    }
    println!(
        "\n| server | concurrency | requests | gen tok/s | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | errors | leaked cells |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, cmd, port) in peers {
        let server = start(cmd, port)?;
        // warm: the graphs of the first shapes built
        let _ = stream_one(&server.addr, PROMPTS[0], 8, 0);
        for &c in &o.concurrency {
            let requests = o.requests.unwrap_or((4 * c).max(16));
            let l = load(&server.addr, c, requests, o.max_tokens);
            let leaked = if name == "ggraph serve" {
                leaked_cells(&server.addr).map_or("?".into(), |n| n.to_string())
            } else {
                "-".into()
            };
            println!(
                "| {name} | {c} | {requests} | {:.1} | {:.2} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {leaked} |",
                l.tokens_per_s, l.requests_per_s, l.ttft.0, l.ttft.1, l.tpot.0, l.tpot.1, l.errors
            );
        }
    }
    Ok(())
}
