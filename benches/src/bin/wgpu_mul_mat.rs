//! mul_mat throughput of the wgpu backend (lavapipe on a machine without a
//! GPU) next to the CPU backend, in GFLOP/s.
//!
//! ```text
//! cargo run --release -p ggraph-benches --bin wgpu_mul_mat [-- --quick] [--types f32,q4_0] [--shapes 4096x4096x32]
//! ```
//!
//! Each row is `m x k` weights of a type times `k x n` f32 activations.
//! The first run of each shape (which builds the kernels) is not timed;
//! the figure is the best of several runs, waiting for the result each
//! time. `--quick` runs the small shapes only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggraph_core::backend::{Buffer, Device};
use ggraph_core::ir::GraphBuilder;
use ggraph_core::util::Rng;
use ggraph_core::{DType, Graph, exec, quant};
use ggraph_wgpu::{MatmulKernel, WgpuDevice, WgpuOptions};

struct Shape {
    m: usize,
    k: usize,
    n: usize,
}

/// A graph computing one product, bound to memory of `device`, with data.
fn setup(device: &dyn Device, w: DType, s: &Shape) -> (Graph, Option<Arc<dyn Buffer>>) {
    let mut b = GraphBuilder::new();
    let a = b.input("w", w, &[s.k, s.m]).unwrap();
    let x = b.input("x", DType::F32, &[s.k, s.n]).unwrap();
    let y = b.mul_mat(a, x).unwrap();
    b.set_output(y).unwrap();
    let mut g = b.build();
    let buf = exec::alloc_one_buffer(&mut g, &device.buffer_type()).unwrap();
    let mut rng = Rng::new(7);
    let wv = rng.vec(s.m * s.k, -1.0, 1.0);
    g.write_bytes(a, &quant::quantize(w, &wv).unwrap()).unwrap();
    g.write_f32(x, &rng.vec(s.k * s.n, -1.0, 1.0)).unwrap();
    (g, buf)
}

/// Best seconds per product, and the seconds of the first (untimed-for-
/// throughput) run.
fn time(device: &dyn Device, g: &Graph, budget: Duration) -> (f64, f64) {
    let mut stream = device.new_stream().unwrap();
    let t0 = Instant::now();
    stream.compute(g, g.nodes()).unwrap();
    stream.synchronize().unwrap();
    let first = t0.elapsed().as_secs_f64();
    let mut best = f64::MAX;
    let started = Instant::now();
    let mut runs = 0;
    while runs < 2 || (started.elapsed() < budget && runs < 20) {
        let t = Instant::now();
        stream.compute(g, g.nodes()).unwrap();
        stream.synchronize().unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    (best, first)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let no_cpu = args.iter().any(|a| a == "--no-cpu");
    let types: Vec<DType> = arg("--types")
        .map(|t| {
            t.split(',')
                .map(|n| DType::from_name(n).expect("unknown type"))
                .collect()
        })
        .unwrap_or_else(|| vec![DType::F32, DType::F16, DType::Q8_0, DType::Q4_0]);
    let mut shapes: Vec<(DType, Shape)> = Vec::new();
    if let Some(list) = arg("--shapes") {
        for s in list.split(',') {
            let d: Vec<usize> = s.split('x').map(|v| v.parse().unwrap()).collect();
            for &t in &types {
                shapes.push((
                    t,
                    Shape {
                        m: d[0],
                        k: d[1],
                        n: d[2],
                    },
                ));
            }
        }
    } else {
        if types.contains(&DType::F32) {
            shapes.push((
                DType::F32,
                Shape {
                    m: 1024,
                    k: 1024,
                    n: 1024,
                },
            ));
        }
        let ns: &[usize] = if quick { &[1, 32] } else { &[1, 32, 512] };
        for &n in ns {
            for &t in &types {
                shapes.push((
                    t,
                    Shape {
                        m: 4096,
                        k: 4096,
                        n,
                    },
                ));
            }
        }
    }

    let Some(gpu) = ggraph_wgpu::devices().first().cloned() else {
        eprintln!("no wgpu adapter: install mesa-vulkan-drivers (lavapipe) or run on a GPU");
        std::process::exit(1);
    };
    // the portable tiled kernel (64x64 tiles, 4x4 register blocks, vec4
    // reads from workgroup memory), for comparison on the first shape
    let tiled = WgpuDevice::open_with(
        0,
        WgpuOptions {
            matmul_kernel: Some(MatmulKernel::Tiled),
            ..WgpuOptions::default()
        },
    )
    .unwrap();
    let cpu: Arc<dyn Device> = ggraph_cpu::CpuDevice::new();
    println!("wgpu: {} — {}", gpu.name(), gpu.description());
    println!("cpu:  {}", cpu.description());
    println!(
        "load average at start: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "{:<7} {:>5} {:>5} {:>5} {:>12} {:>12} {:>11} {:>12}",
        "type", "m", "k", "n", "wgpu GFLOP/s", "wgpu ms", "first ms", "cpu GFLOP/s"
    );
    let budget = Duration::from_secs(if quick { 1 } else { 3 });
    if let Some((t, s)) = shapes
        .first()
        .filter(|_| !args.iter().any(|a| a == "--no-tiled"))
    {
        let (g, _buf) = setup(tiled.as_ref(), *t, s);
        let (best, first) = time(tiled.as_ref(), &g, budget);
        println!(
            "{:<7} {:>5} {:>5} {:>5} {:>12.2} {:>12.2} {:>11.0} {:>12}",
            format!("{}*", t.name()),
            s.m,
            s.k,
            s.n,
            2.0 * (s.m * s.k * s.n) as f64 / best / 1e9,
            best * 1e3,
            first * 1e3,
            "tiled kernel"
        );
    }
    for (t, s) in &shapes {
        let flops = 2.0 * (s.m * s.k * s.n) as f64;
        let (g, _buf) = setup(gpu.as_ref(), *t, s);
        let (best, first) = time(gpu.as_ref(), &g, budget);
        drop(g);
        let cpu_rate = if no_cpu {
            "-".to_string()
        } else {
            let (cg, _cbuf) = setup(cpu.as_ref(), *t, s);
            let (cbest, _) = time(cpu.as_ref(), &cg, budget);
            format!("{:.1}", flops / cbest / 1e9)
        };
        println!(
            "{:<7} {:>5} {:>5} {:>5} {:>12.2} {:>12.2} {:>11.0} {:>12}",
            t.name(),
            s.m,
            s.k,
            s.n,
            flops / best / 1e9,
            best * 1e3,
            first * 1e3,
            cpu_rate
        );
    }
}
