//! The exact estimate: load the model and reserve its context with
//! virtual memory, through the same code as a real load, and read what the
//! allocator planned. What it says is what a real run allocates.

use std::fmt::Write;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use crate::context::{Context, ContextParams};
use crate::desc::ModelDesc;
use crate::loaded::{LoadMode, Model};
use crate::placement::{GpuLayers, PlacementOptions};
use ggraph_core::backend::{Device, weight_buffer_type_names};
use ggraph_core::error::{Error, Result};
use ggraph_core::util::format_bytes;

/// What one device (or the host) will hold.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceCost {
    /// Device name (`CPU` for the host).
    pub name: String,
    /// Layers whose weights it holds (the output layer is n_layer).
    pub layers: Vec<usize>,
    /// Bytes of weights in its buffer type.
    pub weights: u64,
    /// Bytes of KV cache in its buffer type, every cache together.
    pub kv: u64,
    /// Bytes of compute buffer the scheduler reserves on it for the
    /// worst-case ubatch.
    pub compute: u64,
    /// Free memory the device reports (declared for simulated devices).
    pub free: u64,
}

impl DeviceCost {
    /// Bytes it will hold: weights, KV cache and compute together.
    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.compute
    }
}

/// The dry run's figures.
#[derive(Clone, Debug)]
pub struct ExactEstimate {
    /// The host first, then each device in order.
    pub devices: Vec<DeviceCost>,
    /// Layers whose weights are on a device rather than the host, the
    /// output layer counted (llama.cpp's `n_gpu_layers`).
    pub n_gpu_layers: usize,
    /// The context, in KV cells, the estimate reserved.
    pub n_ctx: usize,
    /// Splits of the worst-case ubatch's graph.
    pub splits: usize,
    /// One line per split: backend, nodes, bytes copied in.
    pub split_lines: Vec<String>,
    /// Weight bytes per buffer type (a device's layout buffer types, such
    /// as the CPU's `CPU_REPACK`, apart from its own memory).
    pub weight_buffer_types: Vec<(String, u64)>,
}

impl ExactEstimate {
    /// Devices whose total exceeds their free memory, with the shortfall:
    /// the GPUs' plus `margin`, the host's as it is (its free memory is
    /// what the system can still give). A device that holds nothing is
    /// never over.
    pub fn over(&self, margin: u64) -> Vec<(String, u64)> {
        self.devices
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let need = d.total().saturating_add(if i == 0 { 0 } else { margin });
                (d.total() > 0 && need > d.free).then(|| (d.name.clone(), need - d.free))
            })
            .collect()
    }

    /// The `exact` part of `ggraph estimate --json`: `n_gpu_layers`, `n_ctx`,
    /// `splits`, and per device its name, layers and byte counts (`weights`,
    /// `kv`, `compute`, `total`, `free`).
    pub fn to_json(&self) -> Json {
        json!({
            "n_gpu_layers": self.n_gpu_layers,
            "n_ctx": self.n_ctx,
            "splits": self.splits,
            "devices": self.devices.iter().map(|d| json!({
                "name": d.name,
                "layers": d.layers,
                "weights": d.weights,
                "kv": d.kv,
                "compute": d.compute,
                "total": d.total(),
                "free": d.free,
            })).collect::<Vec<_>>(),
        })
    }

    /// A table: per device layers, weights, KV, compute, total, free after.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<8} {:<14} {:>11} {:>11} {:>11} {:>11} {:>12}\n",
            "device", "layers", "weights", "kv", "compute", "total", "free after"
        );
        for d in &self.devices {
            let after = d.free as i128 - d.total() as i128;
            let after = if after < 0 {
                format!("-{}", format_bytes((-after) as u64))
            } else {
                format_bytes(after as u64)
            };
            let _ = writeln!(
                s,
                "{:<8} {:<14} {:>11} {:>11} {:>11} {:>11} {:>12}",
                d.name,
                layer_ranges(&d.layers),
                format_bytes(d.weights),
                format_bytes(d.kv),
                format_bytes(d.compute),
                format_bytes(d.total()),
                after
            );
        }
        s
    }
}

/// Sorted layer indices as runs for a table: `0-15, 32`; `-` for none.
pub fn layer_ranges(layers: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            layers[i].to_string()
        } else {
            format!("{}-{}", layers[i], layers[j])
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// Loads `desc` and reserves a context with virtual memory, and reports
/// what every device would hold.
pub fn exact_estimate(
    desc: &ModelDesc,
    devices: &[Arc<dyn Device>],
    cpu: Arc<dyn Device>,
    opts: &PlacementOptions,
    params: &ContextParams,
) -> Result<ExactEstimate> {
    let model = Arc::new(Model::load(
        &desc.without_data(),
        devices,
        cpu.clone(),
        opts,
        LoadMode::DryRun,
        None,
    )?);
    let ctx = Context::new(model.clone(), params.clone())?;
    let n_layer = model.config.n_layer;
    let weights = model.weight_bytes();
    let kv = ctx.kv_bytes_per_buffer_type();
    let compute = ctx.compute_bytes();
    let of = |list: &[(String, u64)], names: &[String]| {
        list.iter()
            .filter(|(n, _)| names.contains(n))
            .map(|(_, b)| b)
            .sum::<u64>()
    };
    let mut out = Vec::with_capacity(devices.len() + 1);
    let all: Vec<&Arc<dyn Device>> = std::iter::once(&cpu).chain(devices).collect();
    for (i, d) in all.iter().enumerate() {
        let own = [d.buffer_type().name().to_string()];
        let holds_weights = weight_buffer_type_names(d.as_ref());
        let layers = (0..=n_layer)
            .filter(|&l| {
                let dev = model.plan.layer_device[l];
                if i == 0 {
                    dev.is_none()
                } else {
                    dev == Some(i - 1)
                }
            })
            .collect();
        // scheduler backends: the devices in order, then the CPU
        let backend = if i == 0 { devices.len() } else { i - 1 };
        out.push(DeviceCost {
            name: d.name().to_string(),
            layers,
            weights: of(&weights, &holds_weights),
            kv: of(&kv, &own),
            compute: compute.get(backend).copied().unwrap_or(0),
            free: d.memory().free_bytes,
        });
    }
    let sched = ctx.scheduler();
    let split_lines = sched
        .splits()
        .iter()
        .map(|s| {
            format!(
                "{} nodes {}..{}, {} inputs ({})",
                sched.device(s.backend).name(),
                s.nodes.start,
                s.nodes.end,
                s.inputs.len(),
                format_bytes(s.bytes_copied())
            )
        })
        .collect();
    Ok(ExactEstimate {
        devices: out,
        n_gpu_layers: model
            .plan
            .layer_device
            .iter()
            .filter(|d| d.is_some())
            .count(),
        n_ctx: params.n_ctx,
        splits: sched.splits().len(),
        split_lines,
        weight_buffer_types: weights,
    })
}

/// The result of fitting a model to its devices.
#[derive(Clone, Debug)]
pub struct Fit {
    /// The exact estimate of the setting chosen.
    pub estimate: ExactEstimate,
    /// The placement to load with: the options given, with the layers
    /// (and op offload) the fit chose.
    pub options: PlacementOptions,
    /// The context to create: the parameters given, with the context (and
    /// ubatch) the fit chose.
    pub params: ContextParams,
    /// Why the search stopped where it did: what limited it.
    pub reason: String,
}

/// What fitting may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FitRequest {
    /// Bytes left free on every device that holds anything.
    pub margin: u64,
    /// The user fixed n_gpu_layers: keep it.
    pub layers_fixed: bool,
    /// Shrink the context (down to `min_ctx`) before offloading fewer
    /// layers; the requested context is the upper bound.
    pub fit_ctx: bool,
    /// The smallest context `fit_ctx` may shrink to, in KV cells.
    pub min_ctx: usize,
}

/// Checks, by a dry run, that `desc` placed as `opts` fits every device
/// with its KV cache and compute memory, before anything is allocated: an
/// error names each device that would run out and by how much. (Loading
/// checks the weights alone; this checks the whole context.)
pub fn check_fits(
    desc: &ModelDesc,
    devices: &[Arc<dyn Device>],
    cpu: Arc<dyn Device>,
    opts: &PlacementOptions,
    params: &ContextParams,
) -> Result<ExactEstimate> {
    let est = exact_estimate(desc, devices, cpu, opts, params)?;
    let over = est.over(0);
    if let Some((name, short)) = over.first() {
        let d = est
            .devices
            .iter()
            .find(|d| &d.name == name)
            .expect("over() names estimate devices");
        let others: String = over[1..]
            .iter()
            .map(|(n, s)| format!(", {n} {} short", format_bytes(*s)))
            .collect();
        return Err(Error::OutOfMemory {
            buffer_type: format!(
                "{name} (weights {} + KV cache {} + compute {}: {} short{others}; offload fewer layers (n_gpu_layers), shrink the context or change tensor_split)",
                format_bytes(d.weights),
                format_bytes(d.kv),
                format_bytes(d.compute),
                format_bytes(*short)
            ),
            requested_bytes: d.total(),
            available_bytes: d.free,
        });
    }
    Ok(est)
}

/// Chooses the most offloaded layers (and, with `fit_ctx`, the largest
/// context) whose exact estimate fits every device's free memory less the
/// margin. Options the user fixed stay as they are.
///
/// Unless the user fixed the layers, a fit always gives a plan that the
/// host can hold: fewer layers (the output layer leaves the GPUs first),
/// down to none; and when even no layer leaves a GPU's share of the
/// compute (op offload) too large, op offload off, so that the GPUs hold
/// nothing. A placement that cannot be allocated at all on a device (a
/// weight larger than its largest buffer) counts as not fitting. The
/// reason names what limited the search.
pub fn fit(
    desc: &ModelDesc,
    devices: &[Arc<dyn Device>],
    cpu: Arc<dyn Device>,
    opts: &PlacementOptions,
    params: &ContextParams,
    req: FitRequest,
) -> Result<Fit> {
    let n_layer = desc.config.n_layer;
    let setting = |layers: usize, n_ctx: usize, op_offload: bool| {
        let o = PlacementOptions {
            n_gpu_layers: if req.layers_fixed {
                opts.n_gpu_layers
            } else {
                GpuLayers::Count(layers)
            },
            op_offload,
            ..opts.clone()
        };
        let p = ContextParams {
            n_ctx,
            n_ubatch: params.n_ubatch.min(n_ctx),
            ..params.clone()
        };
        (o, p)
    };
    // Ok(Ok(fit)), Ok(Err(what does not fit)); Err only for a model that
    // cannot be placed anywhere (a malformed one)
    let attempt = |layers: usize, n_ctx: usize, op_offload: bool| -> Result<Attempt> {
        let (o, p) = setting(layers, n_ctx, op_offload);
        match exact_estimate(desc, devices, cpu.clone(), &o, &p) {
            Ok(e) => {
                let over = e.over(req.margin);
                if over.is_empty() {
                    Ok(Ok(Fitted {
                        estimate: e,
                        options: o,
                        params: p,
                    }))
                } else {
                    Ok(Err(over
                        .iter()
                        .map(|(n, b)| format!("{n} is {} short", format_bytes(*b)))
                        .collect::<Vec<_>>()
                        .join(", ")))
                }
            }
            Err(e) if e.is_out_of_memory() => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    };
    let done = |f: Fitted, reason: String| Fit {
        estimate: f.estimate,
        options: f.options,
        params: f.params,
        reason,
    };
    let max_layers = if req.layers_fixed {
        match opts.n_gpu_layers {
            GpuLayers::All => n_layer + 1,
            GpuLayers::Count(n) => n.min(n_layer + 1),
        }
    } else {
        n_layer + 1
    };
    let ctx_hi = params.n_ctx;
    let ctx_lo = req.min_ctx.clamp(1, ctx_hi);
    // 1. every layer we may offload, with the context shrunk if allowed
    let limit = match attempt(max_layers, ctx_hi, opts.op_offload)? {
        Ok(f) => {
            let reason = if devices.is_empty() {
                "no GPU: every layer on the CPU, and it fits".into()
            } else if max_layers == n_layer + 1 {
                "everything fits".into()
            } else {
                format!("the {max_layers} layers asked for fit")
            };
            return Ok(done(f, reason));
        }
        Err(limit) => limit,
    };
    if req.fit_ctx {
        let mut best: Option<Fitted> = None;
        let (mut lo, mut hi) = (ctx_lo / 256, ctx_hi / 256);
        while lo <= hi && hi > 0 {
            let mid = (lo + hi) / 2;
            match attempt(max_layers, (mid * 256).max(ctx_lo), opts.op_offload)? {
                Ok(f) => {
                    best = Some(f);
                    lo = mid + 1;
                }
                Err(_) if mid == 0 => break,
                Err(_) => hi = mid - 1,
            }
        }
        if let Some(f) = best {
            let reason = format!(
                "context shrunk to {} so that all {max_layers} layers fit (at {ctx_hi}: {limit})",
                f.params.n_ctx
            );
            return Ok(done(f, reason));
        }
    }
    if req.layers_fixed {
        return Err(Error::OutOfMemory {
            buffer_type: format!(
                "the devices, with {max_layers} layers fixed: {limit}; let the fit choose the layers (no n_gpu_layers) or shrink the context"
            ),
            requested_bytes: 0,
            available_bytes: devices.iter().map(|d| d.memory().free_bytes).sum(),
        });
    }
    // 2. fewer layers, at the smallest context allowed. Op offload takes
    // GPU memory for the host layers' products; when it costs layers (or
    // not even zero layers fit with it), the plan goes without it. Without
    // it the GPUs need no more memory, so that search starts where the
    // first stopped.
    let n_ctx = if req.fit_ctx { ctx_lo } else { ctx_hi };
    let settings: &[bool] = if opts.op_offload {
        &[true, false]
    } else {
        &[false]
    };
    let mut plans: Vec<(Fitted, String)> = Vec::new();
    let mut floor = 0;
    let mut not_even_zero = String::new();
    for &op_offload in settings {
        let at_floor = match attempt(floor, n_ctx, op_offload)? {
            Ok(f) => f,
            Err(limit) => {
                not_even_zero = limit;
                continue;
            }
        };
        // what one layer more than the best runs into: the full attempt's
        // limit unless the search below fails somewhere
        let mut next_limit = if op_offload == opts.op_offload {
            limit.clone()
        } else {
            match attempt(max_layers, n_ctx, op_offload)? {
                Ok(f) => {
                    plans.push((f, String::new()));
                    continue;
                }
                Err(limit) => limit,
            }
        };
        let (mut lo, mut hi) = (floor, max_layers - 1);
        let mut best = at_floor;
        // the last attempt that fails is one layer more than the best
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            match attempt(mid, n_ctx, op_offload)? {
                Ok(f) => {
                    best = f;
                    lo = mid;
                }
                Err(limit) => {
                    hi = mid - 1;
                    next_limit = limit;
                }
            }
        }
        floor = lo;
        plans.push((best, next_limit));
    }
    let layers_of = |p: &(Fitted, String)| p.0.estimate.n_gpu_layers;
    let Some(most) = plans.iter().map(layers_of).max() else {
        return Err(Error::OutOfMemory {
            buffer_type: format!("the devices even with no layer offloaded: {not_even_zero}"),
            requested_bytes: 0,
            available_bytes: devices.iter().map(|d| d.memory().free_bytes).sum(),
        });
    };
    let with_offload = plans.iter().find(|p| p.0.options.op_offload).map(layers_of);
    let (best, next_limit) = plans
        .into_iter()
        .find(|p| layers_of(p) == most)
        .expect("the most layers of some plan");
    let note = match (opts.op_offload && !best.options.op_offload, with_offload) {
        (false, _) => String::new(),
        (true, Some(n)) => format!(" (op offload off: with it, {} fit)", layer_count(n)),
        (true, None) => {
            format!(" (op offload off: with it, not even zero layers fit: {not_even_zero})")
        }
    };
    let reason = if most == max_layers {
        format!("all {max_layers} layers fit{note}")
    } else {
        format!(
            "{most} of {} layers fit; one more would not: {next_limit}{note}",
            n_layer + 1
        )
    };
    Ok(done(best, reason))
}

/// `1 layer`, `3 layers`.
fn layer_count(n: usize) -> String {
    if n == 1 {
        "1 layer".into()
    } else {
        format!("{n} layers")
    }
}

/// A placement and context that fit, with their estimate.
struct Fitted {
    estimate: ExactEstimate,
    options: PlacementOptions,
    params: ContextParams,
}

/// A fit, or what does not fit.
type Attempt = std::result::Result<Fitted, String>;
