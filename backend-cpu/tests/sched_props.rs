//! Scheduler properties on random graphs with random weight placements and
//! random op support on two simulated devices.

use std::sync::Arc;

use ggraph_conformance::testing::random_graph::RandomGraphRecipe;
use ggraph_core::alloc::bind_graph_weights_by;
use ggraph_core::backend::Device;
use ggraph_core::ir::{Graph, OpKind};
use ggraph_core::sched::{BackendSpec, SchedConfig, Scheduler};
use ggraph_core::util::Rng;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use proptest::prelude::*;

const OPS: [OpKind; 7] = [
    OpKind::Unary,
    OpKind::Scale,
    OpKind::Add,
    OpKind::Mul,
    OpKind::RmsNorm,
    OpKind::SoftMax,
    OpKind::MulMat,
];

fn fill(g: &Graph, ids: &[ggraph_core::TensorId], seed: u64) {
    let mut rng = Rng::new(seed);
    for &id in ids.iter().filter(|id| g.leafs().contains(id)) {
        let n = g.tensor(id).nelements();
        g.write_f32(id, &rng.vec(n, -1.0, 1.0)).unwrap();
    }
}

fn outputs(g: &Graph, ids: &[ggraph_core::TensorId]) -> Vec<Vec<f32>> {
    ids.iter().map(|&id| g.read_f32(id).unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_placements_keep_the_invariants_and_the_results(
        seed in any::<u64>(), n_ops in 1usize..30, n in 1usize..5,
        homes in prop::collection::vec(0usize..3, 3),
        unsupported0 in prop::collection::vec(0usize..OPS.len(), 0..3),
        unsupported1 in prop::collection::vec(0usize..OPS.len(), 0..3),
        n_copies in 1usize..5, runs in 1usize..4, sims_first in any::<bool>(),
    ) {
        let recipe = RandomGraphRecipe { seed, n_ops, n_inputs: 2, n_weights: 3 };
        let cpu: Arc<dyn Device> = CpuDevice::new();

        // the CPU-only result
        let mut plain = recipe.build(16, n).unwrap();
        let _wp = bind_graph_weights_by(&mut plain.graph, |_, _| cpu.buffer_type()).unwrap();
        fill(&plain.graph, &plain.weights, seed ^ 7);
        let mut solo = Scheduler::with_devices(std::slice::from_ref(&cpu), SchedConfig::default()).unwrap();
        solo.alloc_graph(plain.graph.clone()).unwrap();

        // the same graph over CPU and two simulated GPUs
        let sims: Vec<Arc<dyn Device>> = [&unsupported0, &unsupported1]
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let ops: Vec<OpKind> = u.iter().map(|&k| OPS[k]).collect();
                SimDevice::new(i, SimConfig::gpu(64 << 20).unsupported(&ops)) as Arc<dyn Device>
            })
            .collect();
        let devices = [cpu.clone(), sims[0].clone(), sims[1].clone()];
        let mut rg = recipe.build(16, n).unwrap();
        let weights = rg.weights.clone();
        let _w = bind_graph_weights_by(&mut rg.graph, |id, _| {
            let k = weights.iter().position(|&w| w == id).unwrap_or(0);
            devices[homes[k % homes.len()]].buffer_type()
        }).unwrap();
        fill(&rg.graph, &rg.weights, seed ^ 7);
        let mut specs: Vec<BackendSpec> = sims.iter().map(|s| BackendSpec::new(s.clone())).collect();
        if sims_first {
            specs.push(BackendSpec::new(cpu.clone()));
        } else {
            specs.insert(0, BackendSpec::new(cpu.clone()));
        }
        let config = SchedConfig { n_copies, ..SchedConfig::default() };
        let mut sched = Scheduler::new(specs, config).unwrap();
        sched.alloc_graph(rg.graph.clone()).unwrap();

        // every node comes after the nodes it reads
        let g = sched.graph().unwrap();
        prop_assert!(g.validate().is_ok(), "{:?}", g.validate());
        // every node runs on a backend that supports it
        for &node in g.nodes() {
            if g.tensor(node).op.is_noop() { continue; }
            let d = sched.device(sched.backend_of(node).unwrap());
            prop_assert!(d.supports_op(g, node), "{} on {}", g.display_name(node), d.name());
        }
        // splits cover the nodes in order, and neighbours differ
        let splits = sched.splits();
        let mut next = 0;
        for (i, s) in splits.iter().enumerate() {
            prop_assert_eq!(s.nodes.start, next);
            next = s.nodes.end;
            if i > 0 { prop_assert_ne!(splits[i - 1].backend, s.backend); }
            for &node in &g.nodes()[s.nodes.clone()] {
                let t = g.tensor(node);
                if t.op.is_view() { continue; }
                prop_assert_eq!(sched.backend_of(node), Some(s.backend));
            }
        }
        prop_assert_eq!(next, g.nodes().len());
        // one copy per (source, backend), with one storage per graph copy
        let mut pairs = std::collections::HashSet::new();
        for s in splits {
            for input in &s.inputs {
                prop_assert!(pairs.insert((input.source, s.backend)), "copied twice");
                prop_assert_eq!(input.storages.len(), if n_copies > 1 { n_copies } else { 0 });
                prop_assert_ne!(sched.backend_of(input.source), Some(s.backend));
            }
        }
        // and the numbers are the CPU's, run after run
        for run in 0..runs {
            let s = seed.wrapping_add(run as u64);
            fill(solo.graph().unwrap(), &plain.inputs, s);
            solo.compute().unwrap();
            fill(sched.graph().unwrap(), &rg.inputs, s);
            sched.compute().unwrap();
            prop_assert_eq!(
                outputs(solo.graph().unwrap(), &plain.outputs),
                outputs(sched.graph().unwrap(), &rg.outputs)
            );
        }
    }
}
