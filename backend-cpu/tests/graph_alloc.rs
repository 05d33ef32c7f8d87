//! The graph allocator with real memory: planned (heavily reused) memory
//! computes the same results as one fresh buffer per tensor; device
//! out-of-memory leaves it usable; a 32-layer model needs few allocations.

use std::sync::Arc;

use ggraph_conformance::testing;
use ggraph_conformance::testing::random_graph::RandomGraphRecipe;
use ggraph_core::alloc::{CountingBufferType, GraphAllocator, bind_graph_weights};
use ggraph_core::backend::{BufferType, Device};
use ggraph_core::ir::Graph;
use ggraph_core::util::Rng;
use ggraph_core::{DType, Error, exec};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{Attention, BuildShape, FreshWeights, ModelConfig, build_graph};
use ggraph_model::kv::{FreshCache, KvLayout};
use proptest::prelude::*;

fn fill_inputs(g: &Graph, leafs: &[ggraph_core::TensorId], seed: u64) {
    let mut rng = Rng::new(seed);
    // leafs no output depends on are not part of the graph
    for &l in leafs.iter().filter(|l| g.leafs().contains(l)) {
        let n = g.tensor(l).nelements();
        g.write_f32(l, &rng.vec(n, -1.0, 1.0)).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn planned_memory_computes_what_fresh_memory_computes(
        seed in any::<u64>(), n_ops in 1usize..40, n in 1usize..6,
    ) {
        let recipe = RandomGraphRecipe { seed, n_ops, n_inputs: 2, n_weights: 2 };
        let cpu: Arc<dyn Device> = CpuDevice::new();
        let bt = cpu.buffer_type();

        // reference: every tensor in its own place
        let mut fresh = recipe.build(16, n).unwrap();
        let _b1 = exec::alloc_one_buffer(&mut fresh.graph, &bt).unwrap();
        fill_inputs(&fresh.graph, &fresh.inputs, seed);
        fill_inputs(&fresh.graph, &fresh.weights, seed ^ 1);
        exec::compute_on(cpu.as_ref(), &fresh.graph).unwrap();

        // planned: weights packed, the rest in reused compute memory
        let mut planned = recipe.build(16, n).unwrap();
        let _w = bind_graph_weights(&mut planned.graph, &bt).unwrap();
        let mut alloc = GraphAllocator::single(bt.clone());
        alloc.alloc_graph(&mut planned.graph, &|_| 0).unwrap();
        fill_inputs(&planned.graph, &planned.inputs, seed);
        fill_inputs(&planned.graph, &planned.weights, seed ^ 1);
        exec::compute_on(cpu.as_ref(), &planned.graph).unwrap();

        for (a, b) in fresh.outputs.iter().zip(&planned.outputs) {
            let x = fresh.graph.read_f32(*a).unwrap();
            let y = planned.graph.read_f32(*b).unwrap();
            prop_assert_eq!(x, y);
        }
    }
}

fn llama_graph(
    config: &ModelConfig,
    n_tokens: usize,
    n_kv: usize,
) -> (ggraph_model::arch::ModelGraph, BuildShape) {
    let kv = KvLayout {
        kv_size: 64,
        k_type: DType::F16,
        v_type: DType::F16,
    };
    let shape = BuildShape::cached(n_tokens, n_tokens, n_kv, Attention::Standard, kv);
    (
        build_graph(
            config,
            &shape,
            &mut FreshWeights { dtype: DType::Q8_0 },
            &mut FreshCache,
        )
        .unwrap(),
        shape,
    )
}

#[test]
fn a_llama_model_runs_in_planned_memory_and_matches_the_reference() {
    let config = ModelConfig::dense(97, 64, 3, 4, 2, 96);
    let (lg, shape) = llama_graph(&config, 7, 20);
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let bt = cpu.buffer_type();
    let mut g = lg.graph.clone();
    let _w = bind_graph_weights(&mut g, &bt).unwrap();
    let mut alloc = GraphAllocator::single(bt.clone());
    alloc.alloc_graph(&mut g, &|_| 0).unwrap();
    let data = testing::llama_leaf_data(&lg, &g, &config, &shape, 5).unwrap();
    for (id, bytes) in &data {
        g.write_bytes(*id, bytes).unwrap();
    }
    exec::compute_on(cpu.as_ref(), &g).unwrap();
    let got = g.read_f32(lg.logits.unwrap()).unwrap();
    let want = ggraph_conformance::reference::evaluate(&g, |id| Ok(data[&id].clone()))
        .unwrap()
        .values(lg.logits.unwrap());
    let e = ggraph_conformance::nmse(&got, &want);
    // Q8_0 weights: the CPU quantises activations to 8 bits as ggml does,
    // so the bound is the conformance suite's for quantised weights
    assert!(e < 5e-4, "nmse {e}");
    let planned = alloc.buffer_bytes()[0];
    let naive: u64 = exec::unbound_tensors(&lg.graph)
        .iter()
        .map(|&id| g.tensor(id).nbytes() as u64)
        .sum();
    assert!(planned < naive, "reuse saves memory: {planned} vs {naive}");
}

#[test]
fn device_out_of_memory_leaves_the_allocator_usable() {
    let config = ModelConfig::dense(97, 64, 2, 4, 2, 96);
    let sim = SimDevice::new(0, SimConfig::gpu(64 << 10));
    let bt = sim.buffer_type();
    let mut alloc = GraphAllocator::single(bt.clone());

    let (small, _) = llama_graph(&config, 1, 2);
    let mut sg = small.graph.clone();
    let wb: Arc<dyn BufferType> = CpuDevice::new().buffer_type();
    bind_graph_weights(&mut sg, &wb).unwrap();
    // caches live elsewhere too
    for (k, v) in &small.caches {
        for c in [*k, *v] {
            let t = sg.tensor(c).clone();
            let buf = wb
                .alloc(
                    t.nbytes() as u64,
                    ggraph_core::backend::BufferUsage::Compute,
                )
                .unwrap();
            sg.set_data(
                c,
                ggraph_core::ir::TensorData {
                    buffer: buf,
                    offset: 0,
                },
            )
            .unwrap();
        }
    }
    let need_small = alloc.measure(&sg, &|_| 0).unwrap()[0];
    assert!(need_small < 64 << 10, "the small graph fits: {need_small}");

    let (big, _) = llama_graph(&config, 64, 64);
    let mut bg = big.graph.clone();
    bind_graph_weights(&mut bg, &wb).unwrap();
    match alloc.reserve(&bg, &|_| 0) {
        Err(Error::OutOfMemory {
            buffer_type,
            requested_bytes,
            available_bytes,
        }) => {
            assert!(buffer_type.starts_with("sim:0"), "{buffer_type}");
            assert!(requested_bytes > available_bytes);
            assert_eq!(available_bytes, 64 << 10);
        }
        other => panic!("expected out of memory, got {:?}", other.err()),
    }
    assert_eq!(
        sim.allocated_bytes(),
        0,
        "nothing kept from the failed reserve"
    );
    assert!(alloc.buffers()[0].is_empty());
    alloc.reserve(&sg, &|_| 0).unwrap();
    alloc.alloc_graph(&mut sg, &|_| 0).unwrap();
    assert_eq!(alloc.stats().reallocations, 0);
    assert!(sim.allocated_bytes() > 0);
}

#[test]
fn a_32_layer_model_takes_a_few_dozen_device_allocations() {
    let config = ModelConfig::dense(512, 128, 32, 4, 2, 256);
    let (lg, _) = llama_graph(&config, 16, 64);
    let mut g = lg.graph.clone();
    // a device whose buffers are at most 256 KiB: weights and compute
    // memory both need several chunks
    let sim = SimDevice::new(0, SimConfig::gpu(1 << 30).max_buffer(256 << 10));
    let counting = CountingBufferType::new(sim.buffer_type());
    let bt: Arc<dyn BufferType> = counting.clone();
    let n_weights = g
        .leafs()
        .iter()
        .filter(|&&l| g.tensor(l).flags.weight)
        .count();
    let _w = bind_graph_weights(&mut g, &bt).unwrap();
    let weight_allocs = counting.allocations();
    let mut alloc = GraphAllocator::single(bt.clone());
    alloc.reserve(&g, &|_| 0).unwrap();
    alloc.alloc_graph(&mut g, &|_| 0).unwrap();
    alloc.alloc_graph(&mut g, &|_| 0).unwrap();
    let total = counting.allocations();
    println!(
        "{n_weights} weights in {weight_allocs} buffers; {} compute chunks; {total} allocations for {} tensors",
        total - weight_allocs,
        g.leafs().len() + g.nodes().len()
    );
    assert!(n_weights > 290);
    assert!(weight_allocs > 1 && weight_allocs < 24, "{weight_allocs}");
    assert!(total < 36, "{total} device allocations");
    assert_eq!(alloc.stats().reallocations, 0);
}

#[test]
fn read_f32_into_reads_what_read_f32_reads_and_checks_the_length() {
    let mut b = ggraph_core::ir::GraphBuilder::new();
    let f32s = b.input("f32s", DType::F32, &[6, 4]).unwrap();
    let f16s = b.input("f16s", DType::F16, &[6, 4]).unwrap();
    // not contiguous: the first half of each row
    let strided = b.view_2d(f32s, 3, 4, 24, 0).unwrap();
    let out = b.add(f32s, f16s).unwrap();
    b.set_output(out).unwrap();
    let half = b.cont(strided).unwrap();
    b.set_output(half).unwrap();
    let mut g = b.build();
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let _mem = exec::alloc_one_buffer(&mut g, &cpu.buffer_type()).unwrap();
    let vals: Vec<f32> = (0..24).map(|i| i as f32 * 0.5 - 3.0).collect();
    g.write_f32(f32s, &vals).unwrap();
    g.write_f32(f16s, &vals).unwrap();
    for id in [f32s, f16s, strided] {
        let whole = g.read_f32(id).unwrap();
        let mut into = vec![f32::NAN; whole.len()];
        g.read_f32_into(id, &mut into).unwrap();
        assert_eq!(into, whole);
    }
    assert_eq!(g.read_f32(strided).unwrap()[3..6], [0.0, 0.5, 1.0]);
    let mut short = vec![0f32; 23];
    assert!(matches!(
        g.read_f32_into(f32s, &mut short),
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        short.iter().all(|&v| v == 0.0),
        "a refused read writes nothing"
    );
}
