//! The mixed-device llama check every GPU backend runs: a small llama
//! model with its layers spread over one or more devices and the CPU,
//! scheduled by the scheduler, compared with a CPU-only run and with the
//! f64 reference.

use std::sync::Arc;

use crate::reference;
use crate::suite::nmse;
use ggraph_core::alloc::bind_graph_weights_by;
use ggraph_core::backend::{Buffer, Device};
use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::ir::Graph;
use ggraph_core::sched::{BackendSpec, SchedConfig, Scheduler};
use ggraph_model::arch::{Attention, BuildShape, FreshWeights, ModelConfig, build_graph};
use ggraph_model::kv::FreshCache;

/// What the mixed check found.
#[derive(Clone, Debug)]
pub struct MixedCheck {
    /// Splits the scheduler cut the mixed graph into; more than one when
    /// `devices` got work.
    pub splits: usize,
    /// Tensor copies between devices in one compute of the mixed graph.
    pub copies: usize,
    /// Nodes that ran on a device other than the CPU.
    pub device_nodes: usize,
    /// Against the CPU-only run of the same graph and data.
    pub nmse_vs_cpu: f64,
    /// Against the f64 reference.
    pub nmse_vs_reference: f64,
    /// The scheduler's account of the mixed run (`Scheduler::explain`):
    /// each node's device and why, each split's copies. Print it when the
    /// check fails.
    pub explain: String,
}

impl MixedCheck {
    /// Within the conformance bound for quantised weights, on real work.
    pub fn passed(&self) -> bool {
        self.nmse_vs_cpu <= 5e-4
            && self.nmse_vs_reference <= 5e-4
            && self.device_nodes > 0
            && self.splits > 1
    }
}

/// Runs a 4-layer llama (n_embd 64, 4 heads, 2 KV heads, 7 tokens) with
/// layer 0 on `cpu` and the other layers and the output spread over
/// `devices` in order; weights of type `weights`.
pub fn mixed_llama(
    devices: &[Arc<dyn Device>],
    cpu: Arc<dyn Device>,
    weights: DType,
    attention: Attention,
) -> Result<MixedCheck> {
    let config = ModelConfig::dense(97, 64, 4, 4, 2, 96);
    let shape = BuildShape::prompt(7, attention);
    let lg = build_graph(
        &config,
        &shape,
        &mut FreshWeights { dtype: weights },
        &mut FreshCache,
    )?;
    let data = super::llama_leaf_data(&lg, &lg.graph, &config, &shape, 23)?;
    let n_layer = config.n_layer;
    let home = |name: &str| -> Arc<dyn Device> {
        let layer = ModelConfig::layer_of(name).unwrap_or(if name.starts_with("token_embd") {
            0
        } else {
            n_layer
        });
        if layer == 0 || devices.is_empty() {
            cpu.clone()
        } else {
            let per = n_layer.div_ceil(devices.len());
            devices[((layer - 1) / per.max(1)).min(devices.len() - 1)].clone()
        }
    };
    let run = |specs: Vec<BackendSpec>,
               home: &dyn Fn(&str) -> Arc<dyn Device>|
     -> Result<(Scheduler, Vec<Arc<dyn Buffer>>)> {
        let mut graph: Graph = lg.graph.clone();
        let buffers = bind_graph_weights_by(&mut graph, |_, name| home(name).buffer_type())?;
        let weights: Vec<_> = data
            .keys()
            .copied()
            .filter(|&id| graph.tensor(id).flags.weight)
            .collect();
        for &id in &weights {
            graph.write_bytes(id, &data[&id])?;
        }
        let mut sched = Scheduler::new(specs, SchedConfig::default())?;
        sched.alloc_graph(graph)?;
        let g = sched.graph().expect("allocated");
        for (id, bytes) in &data {
            if !weights.contains(id) {
                g.write_bytes(*id, bytes)?;
            }
        }
        sched.compute()?;
        Ok((sched, buffers))
    };
    let mut specs: Vec<BackendSpec> = devices
        .iter()
        .map(|d| BackendSpec::new(d.clone()))
        .collect();
    specs.push(BackendSpec::new(cpu.clone()));
    let logits = lg.logits_tensor()?;
    let (mixed, _b1) = run(specs, &home)?;
    let (solo, _b2) = run(vec![BackendSpec::new(cpu.clone())], &|_| cpu.clone())?;
    // both schedulers computed their graph above
    let (mg, sg) = (ran(&mixed)?, ran(&solo)?);
    let got = mg.read_f32(logits)?;
    let want_cpu: Vec<f64> = sg.read_f32(logits)?.into_iter().map(f64::from).collect();
    let ev = reference::evaluate(sg, |id| Ok(data.get(&id).cloned().unwrap_or_default()))?;
    let host = mixed.host();
    let device_nodes = mg
        .nodes()
        .iter()
        .filter(|&&n| !mg.tensor(n).op.is_noop() && mixed.backend_of(n).is_some_and(|b| b != host))
        .count();
    Ok(MixedCheck {
        splits: mixed.splits().len(),
        copies: mixed.stats().copies,
        device_nodes,
        nmse_vs_cpu: nmse(&got, &want_cpu),
        nmse_vs_reference: nmse(&got, &ev.values(logits)),
        explain: mixed.explain(),
    })
}

/// The graph a scheduler computed.
fn ran(s: &Scheduler) -> Result<&Graph> {
    s.graph()
        .ok_or_else(|| Error::InvalidArgument("the scheduler holds no graph".into()))
}
