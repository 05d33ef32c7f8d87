//! The scheduler on the CPU and simulated devices: where ops go and why,
//! the splits and copies that follow, and results equal to a CPU-only run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ggraph_conformance::testing;
use ggraph_core::alloc::bind_graph_weights_by;
use ggraph_core::backend::{Buffer, Device};
use ggraph_core::ir::{Graph, OpKind, TensorId};
use ggraph_core::sched::{BackendSpec, Cause, EvalCallback, OffloadPolicy, SchedConfig, Scheduler};
use ggraph_core::{DType, Error};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{
    Attention, BuildShape, FreshWeights, ModelConfig, ModelGraph, build_graph,
};
use ggraph_model::kv::FreshCache;

struct Fixture {
    lg: ModelGraph,
    data: HashMap<TensorId, Vec<u8>>,
}

fn fixture(n_layer: usize, n_tokens: usize) -> Fixture {
    let config = ModelConfig::dense(97, 64, n_layer, 4, 2, 96);
    let shape = BuildShape::prompt(n_tokens, Attention::Standard);
    let lg = build_graph(
        &config,
        &shape,
        &mut FreshWeights { dtype: DType::Q8_0 },
        &mut FreshCache,
    )
    .unwrap();
    let data = testing::llama_leaf_data(&lg, &lg.graph, &config, &shape, 11).unwrap();
    Fixture { lg, data }
}

/// Layer of a weight by name; the output weights count as the last layer
/// plus one (as in llama.cpp's n_gpu_layers).
fn layer_of(name: &str, n_layer: usize) -> usize {
    ModelConfig::layer_of(name).unwrap_or(if name.starts_with("token_embd") {
        0
    } else {
        n_layer
    })
}

struct Run {
    sched: Scheduler,
    logits: Vec<f32>,
    _weights: Vec<Arc<dyn Buffer>>,
}

/// Binds each weight to the device `home` picks, schedules over `specs`,
/// fills the data and computes.
fn run(
    f: &Fixture,
    specs: Vec<BackendSpec>,
    config: SchedConfig,
    home: &dyn Fn(&str) -> Arc<dyn Device>,
) -> Run {
    let mut graph = f.lg.graph.clone();
    let weights = bind_graph_weights_by(&mut graph, |_, name| home(name).buffer_type()).unwrap();
    let is_weight = |g: &Graph, id: TensorId| g.tensor(id).flags.weight;
    for (id, bytes) in &f.data {
        if is_weight(&graph, *id) {
            graph.write_bytes(*id, bytes).unwrap();
        }
    }
    let mut sched = Scheduler::new(specs, config).unwrap();
    sched.alloc_graph(graph).unwrap();
    let g = sched.graph().unwrap();
    for (id, bytes) in &f.data {
        if !is_weight(g, *id) {
            g.write_bytes(*id, bytes).unwrap();
        }
    }
    sched.compute().unwrap();
    let logits = sched
        .graph()
        .unwrap()
        .read_f32(f.lg.logits.unwrap())
        .unwrap();
    Run {
        sched,
        logits,
        _weights: weights,
    }
}

fn cpu_only(f: &Fixture) -> Vec<f32> {
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let c = cpu.clone();
    let r = run(
        f,
        vec![BackendSpec::new(cpu)],
        SchedConfig::default(),
        &move |_| c.clone(),
    );
    assert_eq!(r.sched.splits().len(), 1);
    r.logits
}

fn devices(n_sims: usize, unsupported: &[OpKind]) -> (Arc<dyn Device>, Vec<Arc<dyn Device>>) {
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let sims = (0..n_sims)
        .map(|i| {
            SimDevice::new(i, SimConfig::gpu(256 << 20).unsupported(unsupported)) as Arc<dyn Device>
        })
        .collect();
    (cpu, sims)
}

fn name_of(r: &Run, id: TensorId) -> String {
    r.sched.graph().unwrap().display_name(id)
}

#[test]
fn the_last_layers_on_a_simulated_gpu_give_two_splits_and_the_cpu_result() {
    let f = fixture(4, 7);
    let want = cpu_only(&f);
    let (cpu, sims) = devices(1, &[]);
    let sim = sims[0].clone();
    let (c2, s2) = (cpu.clone(), sim.clone());
    let home = move |name: &str| {
        if layer_of(name, 4) >= 2 {
            s2.clone()
        } else {
            c2.clone()
        }
    };
    let specs = vec![
        BackendSpec::new(sim).op_offload(false),
        BackendSpec::new(cpu),
    ];
    let r = run(&f, specs, SchedConfig::default(), &home);
    let splits = r.sched.splits();
    println!("{}", r.sched.explain());
    assert_eq!(splits.len(), 2, "CPU layers, then simulated-GPU layers");
    assert_eq!(r.sched.device(splits[0].backend).name(), "CPU");
    assert_eq!(r.sched.device(splits[1].backend).name(), "sim:0");
    // layer 1's closing residual add has no weight: the GPU-phase upward
    // expansion from layer 2 takes it, so its two operands are copied
    let g = r.sched.graph().unwrap();
    let l_out_1 = g.find("l_out-1").unwrap();
    assert!(matches!(
        r.sched.cause_of(l_out_1),
        Some(Cause::Expanded {
            direction: ggraph_core::sched::Direction::Up,
            gpu_phase: true,
            ..
        })
    ));
    let copied: Vec<TensorId> = splits[1].inputs.iter().map(|i| i.source).collect();
    let mut names: Vec<String> = copied.iter().map(|&i| name_of(&r, i)).collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.contains(&"inp_pos".to_string()) && names.contains(&"kq_mask".to_string()));
    let operands = &&f.lg.graph.tensor(l_out_1).src;
    assert!(
        operands.iter().all(|o| copied.contains(o)),
        "the residual's operands are copied"
    );
    assert!(splits[0].inputs.is_empty(), "inputs start on the host");
    assert_eq!(r.logits, want, "same kernels, same numbers");
}

/// A 4-layer model on two GPUs, layers 0-1 on the first and 2-3 (with
/// the output) on the second, the token embeddings on the CPU.
fn run_on_two_gpus(
    f: &Fixture,
    cpu: Arc<dyn Device>,
    first: Arc<dyn Device>,
    second: Arc<dyn Device>,
) -> Run {
    let (c2, s0, s1) = (cpu.clone(), first.clone(), second.clone());
    let home = move |name: &str| match layer_of(name, 4) {
        _ if name.starts_with("token_embd") => c2.clone(),
        0 | 1 => s0.clone(),
        _ => s1.clone(),
    };
    let specs = vec![
        BackendSpec::new(first),
        BackendSpec::new(second),
        BackendSpec::new(cpu),
    ];
    run(f, specs, SchedConfig::default(), &home)
}

/// Between two GPUs the downward expansion carries the next layer's input
/// norm to the first one; it moves to the second, whose residual add reads
/// the same input anyway: one activation crosses instead of two.
#[test]
fn a_norm_at_a_gpu_to_gpu_boundary_runs_with_its_readers_and_one_activation_crosses() {
    let f = fixture(4, 7);
    let want = cpu_only(&f);
    let (cpu, sims) = devices(2, &[]);
    let r = run_on_two_gpus(&f, cpu, sims[0].clone(), sims[1].clone());
    println!("{}", r.sched.explain());
    let splits = r.sched.splits();
    let names: Vec<&str> = splits
        .iter()
        .map(|s| r.sched.device(s.backend).name())
        .collect();
    assert_eq!(names, ["CPU", "sim:0", "sim:1"]);
    let g = r.sched.graph().unwrap();
    let l_out_1 = g.find("l_out-1").unwrap();
    let activations: Vec<String> = splits[2]
        .inputs
        .iter()
        .map(|i| name_of(&r, i.source))
        .filter(|n| !["inp_pos", "kq_mask"].contains(&n.as_str()))
        .collect();
    assert_eq!(activations, ["l_out-1"], "only the residual stream crosses");
    // layer 2's input norm, the first after layer 1's output
    let norm = g
        .nodes()
        .iter()
        .copied()
        .skip_while(|&n| n != l_out_1)
        .find(|&n| g.tensor(n).op.kind() == OpKind::RmsNorm)
        .unwrap();
    assert!(
        matches!(r.sched.cause_of(norm), Some(Cause::PulledToReaders { .. })),
        "{:?}",
        r.sched.cause_of(norm)
    );
    assert_eq!(
        r.sched.device(r.sched.backend_of(norm).unwrap()).name(),
        "sim:1"
    );
    assert_eq!(r.logits, want, "same kernels, same numbers");
}

#[test]
fn graph_inputs_start_on_the_host_and_weights_pull_their_ops() {
    let f = fixture(2, 5);
    let (cpu, sims) = devices(1, &[]);
    let sim = sims[0].clone();
    let s2 = sim.clone();
    let r = run(
        &f,
        vec![BackendSpec::new(sim), BackendSpec::new(cpu)],
        SchedConfig::default(),
        &move |_| s2.clone(),
    );
    let g = r.sched.graph().unwrap();
    for name in ["inp_tokens", "inp_pos", "kq_mask"] {
        let id = g.find(name).unwrap();
        assert_eq!(r.sched.cause_of(id), Some(&Cause::GraphInput), "{name}");
        assert_eq!(
            r.sched.device(r.sched.backend_of(id).unwrap()).name(),
            "CPU"
        );
    }
    let mm = g
        .nodes()
        .iter()
        .copied()
        .find(|&n| g.tensor(n).op.kind() == OpKind::MulMat)
        .unwrap();
    assert!(matches!(
        r.sched.cause_of(mm),
        Some(Cause::WeightSource { .. })
    ));
    assert_eq!(
        r.sched.splits().len(),
        1,
        "everything but the inputs on the device"
    );
}

#[test]
fn op_offload_moves_exactly_the_large_batch_matrix_ops_with_host_weights() {
    let f = fixture(2, 40);
    let want = cpu_only(&f);
    let (cpu, sims) = devices(1, &[]);
    let c2 = cpu.clone();
    let home = move |_: &str| c2.clone();
    let placements = |offload: bool| {
        let specs = vec![
            BackendSpec::new(sims[0].clone()).op_offload(offload),
            BackendSpec::new(cpu.clone()),
        ];
        run(&f, specs, SchedConfig::default(), &home)
    };
    let off = placements(false);
    let on = placements(true);
    assert_eq!(
        off.sched.splits().len(),
        1,
        "all weights on the host: one CPU split"
    );
    assert_eq!(off.logits, want);
    assert_eq!(on.logits, want);
    let g = on.sched.graph().unwrap();
    for &n in f.lg.graph.nodes() {
        let moved = on.sched.backend_of(n) != off.sched.backend_of(n);
        let t = g.tensor(n);
        // a mul_mat whose first source is a host weight and whose batch is
        // at least 32 is offloaded; nothing else moves
        let original = &f.lg.graph;
        let offloadable = t.op.kind() == OpKind::MulMat
            && original.tensor(original.tensor(n).src[0]).flags.weight
            && t.ne[1] >= 32;
        if offloadable {
            assert!(moved, "{} should be offloaded", g.display_name(n));
            assert!(matches!(
                on.sched.cause_of(n),
                Some(Cause::OpOffload { .. })
            ));
        } else if !t.op.is_view() {
            assert!(
                !moved || matches!(on.sched.cause_of(n), Some(Cause::Expanded { .. })),
                "{} moved: {:?}",
                g.display_name(n),
                on.sched.cause_of(n)
            );
        }
    }
    assert!(on.sched.splits().len() > 1);
}

#[test]
fn a_cost_model_refuses_offload_to_a_slow_link() {
    let f = fixture(2, 40);
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let mut slow = SimConfig::gpu(256 << 20);
    slow.perf.link_bytes_per_s = 1e6; // 1 MB/s: copying a weight costs more than the whole op
    let sim: Arc<dyn Device> = SimDevice::new(0, slow);
    let c2 = cpu.clone();
    let config = SchedConfig {
        offload_policy: OffloadPolicy::CostModel(Default::default()),
        ..SchedConfig::default()
    };
    let r = run(
        &f,
        vec![BackendSpec::new(sim), BackendSpec::new(cpu)],
        config,
        &move |_| c2.clone(),
    );
    assert_eq!(r.sched.splits().len(), 1, "nothing offloaded");
}

#[test]
fn a_cost_model_offloads_to_a_fast_device_over_a_fast_link() {
    let f = fixture(2, 40);
    let want = cpu_only(&f);
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let mut fast = SimConfig::gpu(256 << 20);
    fast.perf.link_bytes_per_s = 1e13;
    fast.perf.flops_per_s = 1e15;
    let sim: Arc<dyn Device> = SimDevice::new(0, fast);
    let c2 = cpu.clone();
    let config = SchedConfig {
        offload_policy: OffloadPolicy::CostModel(Default::default()),
        ..SchedConfig::default()
    };
    let r = run(
        &f,
        vec![BackendSpec::new(sim), BackendSpec::new(cpu)],
        config,
        &move |_| c2.clone(),
    );
    assert_eq!(r.logits, want);
    let g = r.sched.graph().unwrap();
    let original = &f.lg.graph;
    let mut offloaded = 0;
    for &n in original.nodes() {
        let t = original.tensor(n);
        if t.op.kind() == OpKind::MulMat && original.tensor(t.src[0]).flags.weight {
            assert_eq!(
                r.sched.device(r.sched.backend_of(n).unwrap()).name(),
                "sim:0"
            );
            match r.sched.cause_of(n) {
                Some(c @ Cause::OpOffload { .. }) => {
                    assert!(format!("{c:?}").contains("cost model"), "{c:?}")
                }
                other => panic!("{}: {other:?}", g.display_name(n)),
            }
            offloaded += 1;
        }
    }
    // 7 weight matrices per layer and the output
    assert_eq!(offloaded, 2 * 7 + 1);
}

#[test]
fn a_configured_batch_threshold_decides_offload() {
    let f = fixture(2, 40);
    let want = cpu_only(&f);
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let sim: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(256 << 20));
    for (threshold, offloaded) in [(40, true), (41, false)] {
        let c2 = cpu.clone();
        let config = SchedConfig {
            offload_policy: OffloadPolicy::MinBatch(threshold),
            ..SchedConfig::default()
        };
        let r = run(
            &f,
            vec![
                BackendSpec::new(sim.clone()).op_offload(true),
                BackendSpec::new(cpu.clone()),
            ],
            config,
            &move |_| c2.clone(),
        );
        assert_eq!(r.logits, want);
        let causes = f
            .lg
            .graph
            .nodes()
            .iter()
            .filter(|&&n| {
                matches!(r.sched.cause_of(n), Some(Cause::OpOffload { policy, .. }) if policy.contains(&threshold.to_string()))
            })
            .count();
        assert_eq!(causes > 0, offloaded, "batch 40, threshold {threshold}");
        assert_eq!(r.sched.splits().len() > 1, offloaded);
    }
}

#[test]
fn a_hand_placement_the_backend_cannot_run_is_an_error() {
    let f = fixture(2, 5);
    let (cpu, sims) = devices(1, &[OpKind::RmsNorm]);
    let graph = &f.lg.graph;
    let norm = graph
        .nodes()
        .iter()
        .copied()
        .find(|&n| graph.tensor(n).op.kind() == OpKind::RmsNorm)
        .unwrap();
    let mut sched = Scheduler::new(
        vec![BackendSpec::new(sims[0].clone()), BackendSpec::new(cpu)],
        SchedConfig::default(),
    )
    .unwrap();
    let sim = sched.backend_named("sim:0").unwrap();
    sched.set_tensor_backend(norm, sim).unwrap();
    let e = sched.split_graph(graph.clone()).unwrap_err().to_string();
    assert!(e.contains("sim:0") && e.contains("RMS_NORM"), "{e}");
}

#[test]
fn an_op_the_device_refuses_falls_back_with_the_cause_recorded() {
    let f = fixture(2, 7);
    let want = cpu_only(&f);
    let (cpu, sims) = devices(1, &[OpKind::Glu, OpKind::SoftMax]);
    let s2 = sims[0].clone();
    let r = run(
        &f,
        vec![BackendSpec::new(sims[0].clone()), BackendSpec::new(cpu)],
        SchedConfig::default(),
        &move |_| s2.clone(),
    );
    let g = r.sched.graph().unwrap();
    let mut refused = 0;
    for &n in g.nodes() {
        if matches!(g.tensor(n).op.kind(), OpKind::Glu | OpKind::SoftMax) {
            refused += 1;
            assert_eq!(r.sched.device(r.sched.backend_of(n).unwrap()).name(), "CPU");
            assert!(
                matches!(r.sched.cause_of(n), Some(Cause::Fallback { .. })),
                "{}: {:?}",
                g.display_name(n),
                r.sched.cause_of(n)
            );
        }
    }
    assert_eq!(refused, 4);
    assert!(r.sched.explain().contains("refuses the op"));
    assert_eq!(r.logits, want);
}

#[test]
fn manual_placement_overrides_the_passes() {
    let f = fixture(2, 5);
    let (cpu, sims) = devices(1, &[]);
    let graph = &f.lg.graph;
    let norm = graph
        .nodes()
        .iter()
        .copied()
        .find(|&n| graph.tensor(n).op.kind() == OpKind::RmsNorm)
        .unwrap();
    let mut sched = Scheduler::new(
        vec![BackendSpec::new(cpu), BackendSpec::new(sims[0].clone())],
        SchedConfig::default(),
    )
    .unwrap();
    let sim = sched.backend_named("sim:0").unwrap();
    sched.set_tensor_backend(norm, sim).unwrap();
    sched.split_graph(graph.clone()).unwrap();
    assert_eq!(sched.backend_of(norm), Some(sim));
    assert_eq!(sched.cause_of(norm), Some(&Cause::Manual));
    sched.reset();
    sched.split_graph(graph.clone()).unwrap();
    assert_ne!(sched.backend_of(norm), Some(sim));
}

#[test]
fn pipeline_depths_2_to_4_give_the_outputs_of_depth_1_run_after_run() {
    let f = fixture(3, 6);
    let (cpu, sims) = devices(2, &[]);
    let home = |name: &str| -> Arc<dyn Device> {
        match layer_of(name, 3) {
            0 => cpu.clone(),
            1 => sims[0].clone(),
            _ => sims[1].clone(),
        }
    };
    let outputs = |depth: usize| {
        let specs = vec![
            BackendSpec::new(sims[0].clone()),
            BackendSpec::new(sims[1].clone()),
            BackendSpec::new(cpu.clone()),
        ];
        let config = SchedConfig {
            n_copies: depth,
            ..SchedConfig::default()
        };
        let mut r = run(&f, specs, config, &home);
        let tokens = f.lg.inputs.tokens;
        let mut per_run = vec![r.logits.clone()];
        for step in 1..6 {
            let toks: Vec<i32> = (0..6).map(|i| (i * 7 + step * 13) % 97).collect();
            r.sched.graph().unwrap().write_i32(tokens, &toks).unwrap();
            r.sched.compute().unwrap();
            per_run.push(
                r.sched
                    .graph()
                    .unwrap()
                    .read_f32(f.lg.logits.unwrap())
                    .unwrap(),
            );
        }
        assert!(r.sched.stats().graph_reuses >= 5);
        (per_run, r.sched.splits().len())
    };
    let (base, n_splits) = outputs(1);
    assert!(n_splits >= 3);
    for depth in 2..=4 {
        let (got, _) = outputs(depth);
        assert_eq!(got, base, "depth {depth}");
    }
}

#[test]
fn eval_and_abort_callbacks() {
    struct Watch(Arc<Mutex<Vec<String>>>);
    impl EvalCallback for Watch {
        fn wants(&mut self, g: &Graph, n: TensorId) -> bool {
            g.tensor(n).op.kind() == OpKind::RmsNorm
        }
        fn observe(&mut self, g: &Graph, n: TensorId) -> bool {
            let v = g.read_f32(n).unwrap();
            // rms-normalised rows have mean square 1
            let ms: f32 = v[..64].iter().map(|x| x * x).sum::<f32>() / 64.0;
            assert!((ms - 1.0).abs() < 1e-3);
            self.0.lock().unwrap().push(g.display_name(n));
            true
        }
    }
    let f = fixture(2, 5);
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let mut graph = f.lg.graph.clone();
    let _w = bind_graph_weights_by(&mut graph, |_, _| cpu.buffer_type()).unwrap();
    for (id, bytes) in &f.data {
        if graph.tensor(*id).flags.weight {
            graph.write_bytes(*id, bytes).unwrap();
        }
    }
    let mut sched = Scheduler::with_devices(&[cpu], SchedConfig::default()).unwrap();
    let weights: Vec<TensorId> = f
        .data
        .keys()
        .copied()
        .filter(|&id| graph.tensor(id).flags.weight)
        .collect();
    sched.alloc_graph(graph).unwrap();
    for (id, bytes) in &f.data {
        if !weights.contains(id) {
            sched.graph().unwrap().write_bytes(*id, bytes).unwrap();
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    sched.set_eval_callback(Some(Box::new(Watch(seen.clone()))));
    sched.compute().unwrap();
    assert_eq!(
        seen.lock().unwrap().len(),
        2 * 2 + 1,
        "two norms per layer and the output norm"
    );
    sched.set_eval_callback(None);
    sched.set_abort_callback(Some(Box::new(|| true)));
    assert!(matches!(sched.compute(), Err(Error::Aborted)));
}

#[test]
fn explain_and_dot_show_backends_and_splits() {
    let f = fixture(2, 5);
    let (cpu, sims) = devices(1, &[]);
    let (c2, s2) = (cpu.clone(), sims[0].clone());
    let home = move |name: &str| {
        if layer_of(name, 2) >= 1 {
            s2.clone()
        } else {
            c2.clone()
        }
    };
    let r = run(
        &f,
        vec![BackendSpec::new(sims[0].clone()), BackendSpec::new(cpu)],
        SchedConfig::default(),
        &home,
    );
    let text = r.sched.explain();
    assert!(
        text.contains("split 0 on CPU") && text.contains("split 1 on sim:0"),
        "{text}"
    );
    assert!(text.contains("pass 1: graph input"));
    assert!(text.contains("kq_mask (CPU -> sim:0)"), "{text}");
    let dot = r.sched.to_dot();
    assert!(dot.contains("subgraph cluster_0") && dot.contains("split 1: sim:0"));
}

#[test]
fn a_scheduler_needs_a_host_and_a_valid_depth() {
    let sim: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(1 << 20));
    assert!(Scheduler::with_devices(std::slice::from_ref(&sim), SchedConfig::default()).is_err());
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let bad = SchedConfig {
        n_copies: 5,
        ..SchedConfig::default()
    };
    assert!(Scheduler::with_devices(std::slice::from_ref(&cpu), bad).is_err());
    assert!(
        Scheduler::with_devices(&[cpu.clone(), cpu], SchedConfig::default()).is_err(),
        "a device twice"
    );
}

#[test]
fn the_mixed_device_check_passes_on_one_and_two_simulated_gpus() {
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let (_, sims) = devices(2, &[]);
    for n in [1, 2] {
        let m = ggraph_conformance::testing::mixed::mixed_llama(
            &sims[..n],
            cpu.clone(),
            DType::Q8_0,
            Attention::Standard,
        )
        .unwrap();
        assert!(m.passed(), "{m:?}");
        assert_eq!(m.nmse_vs_cpu, 0.0, "same kernels on the simulated devices");
        assert_eq!(m.splits, n + 1, "{}", m.explain);
    }
}

#[test]
fn one_backend_runs_everything_in_one_split_or_names_the_op_it_refuses() {
    let f = fixture(2, 5);
    let want = cpu_only(&f);
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let c = cpu.clone();
    let r = run(
        &f,
        vec![BackendSpec::new(cpu.clone())],
        SchedConfig::default(),
        &move |_| c.clone(),
    );
    assert_eq!(r.sched.splits().len(), 1);
    assert_eq!(r.sched.stats().copies, 0);
    let g = r.sched.graph().unwrap();
    for &n in g.nodes() {
        let cause = r.sched.cause_of(n).unwrap();
        assert!(
            matches!(
                cause,
                Cause::OnlyBackend | Cause::WeightSource { .. } | Cause::ViewOfAllocated { .. }
            ),
            "{}: {cause:?}",
            g.display_name(n)
        );
    }
    assert!(r.sched.explain().contains("the scheduler's only backend"));
    assert_eq!(r.logits, want);

    let refusing: Arc<dyn Device> = Arc::new(Wrapped {
        inner: cpu,
        refuses: Some(OpKind::SoftMax),
        copies: None,
    });
    let mut graph = f.lg.graph.clone();
    let _weights = bind_graph_weights_by(&mut graph, |_, _| refusing.buffer_type()).unwrap();
    let mut sched =
        Scheduler::new(vec![BackendSpec::new(refusing)], SchedConfig::default()).unwrap();
    match sched.split_graph(graph) {
        Err(Error::Unsupported { device, what }) => {
            assert_eq!(device, "CPU");
            assert!(
                what.contains("soft_max") && what.contains("only backend"),
                "{what}"
            );
        }
        other => panic!("expected Unsupported, got {:?}", other.map(|s| s.len())),
    }
}

/// Another device, seen through: it may refuse one kind of op, and its
/// streams may note where each input copy comes from.
struct Wrapped {
    inner: Arc<dyn Device>,
    refuses: Option<OpKind>,
    copies: Option<Arc<Mutex<Vec<String>>>>,
}

struct RecordingStream {
    inner: Box<dyn ggraph_core::backend::Stream>,
    copies: Arc<Mutex<Vec<String>>>,
}

impl Device for Wrapped {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> String {
        self.inner.description()
    }
    fn kind(&self) -> ggraph_core::backend::DeviceKind {
        self.inner.kind()
    }
    fn memory(&self) -> ggraph_core::backend::MemoryInfo {
        self.inner.memory()
    }
    fn buffer_type(&self) -> Arc<dyn ggraph_core::backend::BufferType> {
        self.inner.buffer_type()
    }
    fn caps(&self) -> ggraph_core::backend::DeviceCaps {
        self.inner.caps()
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        Some(graph.tensor(node).op.kind()) != self.refuses && self.inner.supports_op(graph, node)
    }
    fn supports_buffer_type(&self, buft: &dyn ggraph_core::backend::BufferType) -> bool {
        self.inner.supports_buffer_type(buft)
    }
    fn new_stream(&self) -> ggraph_core::Result<Box<dyn ggraph_core::backend::Stream>> {
        let inner = self.inner.new_stream()?;
        Ok(match &self.copies {
            Some(copies) => Box::new(RecordingStream {
                inner,
                copies: copies.clone(),
            }),
            None => inner,
        })
    }
}

impl ggraph_core::backend::Stream for RecordingStream {
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> ggraph_core::Result<()> {
        self.inner.compute(graph, nodes)
    }
    fn copy_async(
        &mut self,
        src: &dyn Buffer,
        src_offset: u64,
        dst: &dyn Buffer,
        dst_offset: u64,
        len: u64,
    ) -> ggraph_core::Result<()> {
        let from = src.buffer_type_name().to_string();
        self.copies.lock().unwrap().push(from);
        self.inner.copy_async(src, src_offset, dst, dst_offset, len)
    }
    fn synchronize(&mut self) -> ggraph_core::Result<()> {
        self.inner.synchronize()
    }
    fn record_event(&mut self) -> ggraph_core::Result<Arc<dyn ggraph_core::backend::Event>> {
        self.inner.record_event()
    }
    fn wait_event(&mut self, event: &dyn ggraph_core::backend::Event) -> ggraph_core::Result<()> {
        self.inner.wait_event(event)
    }
}

/// A split takes the graph's own inputs (positions, mask) before the
/// tensors an earlier split writes: its device can take them while that
/// split still runs.
#[test]
fn a_split_copies_the_graph_inputs_before_what_other_splits_write() {
    let f = fixture(4, 7);
    let (cpu, sims) = devices(2, &[]);
    let copies = Arc::new(Mutex::new(Vec::new()));
    let second: Arc<dyn Device> = Arc::new(Wrapped {
        inner: sims[1].clone(),
        refuses: None,
        copies: Some(copies.clone()),
    });
    let r = run_on_two_gpus(&f, cpu, sims[0].clone(), second);
    assert_eq!(r.sched.splits().len(), 3, "{}", r.sched.explain());
    let copies = copies.lock().unwrap().clone();
    let first_sim = sims[0].buffer_type().name().to_string();
    assert_eq!(
        copies.iter().filter(|c| **c == first_sim).count(),
        1,
        "{copies:?}"
    );
    assert_eq!(copies.last(), Some(&first_sim), "{copies:?}");
    assert!(copies.len() >= 3, "positions and mask first: {copies:?}");
}
