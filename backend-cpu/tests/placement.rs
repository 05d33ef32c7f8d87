//! Multi-device placement on simulated GPUs: layer and row split give the
//! single-device logits, splits place what they say, a placement that does
//! not fit fails before loading, overrides match what the plan lists.

use std::sync::Arc;

use ggraph_conformance::nmse;
use ggraph_core::alloc::split_rows;
use ggraph_core::backend::Device;
use ggraph_core::ir::Op;
use ggraph_core::sched::Cause;
use ggraph_core::{DType, Error};
use ggraph_cpu::{CPU_BUFFER_TYPE, CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{Attention, ModelConfig};
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams};
use ggraph_model::desc::ModelDesc;
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::{
    GpuLayers, Home, OverrideTarget, PlacementOptions, PlacementPlan, ROW_ALIGN, SplitMode,
    TensorSplit,
};

const PROMPT: [i32; 6] = [3, 14, 15, 92, 65, 35];

/// Four layers wide enough that every row-split matrix, attn_k and attn_v
/// (64 rows) included, has rows for at least two devices at ROW_ALIGN.
fn desc(moe: bool) -> ModelDesc {
    let mut c = ModelConfig::dense(128, 128, 4, 8, 4, 256);
    if moe {
        c.n_expert = 4;
        c.n_expert_used = 2;
        c.n_ff_expert = 64;
    }
    ModelDesc::random(c, DType::Q8_0, 9).unwrap()
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 16,
        n_batch: 16,
        n_ubatch: 4,
        attention: Attention::Standard,
        n_kv_pad: 16,
        ..ContextParams::default()
    }
}

/// The logits of the prompt's last token, and then of one more token.
fn logits(model: Model) -> Vec<f32> {
    run(model).0
}

/// Logits, the number of per-device partial mul_mats in the last graph
/// (not the scheduler's copies of them), and its splits.
fn run(model: Model) -> (Vec<f32>, usize, usize) {
    let mut ctx = Context::new(Arc::new(model), params()).unwrap();
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    let mut out = ctx.logits().to_vec();
    ctx.decode(&Batch::tokens(&[7])).unwrap();
    out.extend_from_slice(ctx.logits());
    let g = ctx.scheduler().graph().unwrap();
    let parts = g
        .nodes()
        .iter()
        .filter(|&&n| {
            let t = g.tensor(n);
            t.op == Op::MulMat && t.name.contains("@rows")
        })
        .count();
    (out, parts, ctx.scheduler().splits().len())
}

/// The CPU alone, its weights in GGUF's layout, as the host weights of
/// the runs with simulated GPUs are (op offload keeps them so).
fn single(d: &ModelDesc) -> Vec<f64> {
    let opts = PlacementOptions {
        repack: false,
        ..PlacementOptions::default()
    };
    let m = Model::load(d, &[], CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
    logits(m).into_iter().map(f64::from).collect()
}

fn sims(mib: &[u64]) -> Vec<Arc<dyn Device>> {
    mib.iter()
        .enumerate()
        .map(|(i, m)| SimDevice::new(i, SimConfig::gpu(m << 20)) as Arc<dyn Device>)
        .collect()
}

/// Rows of each row-split matrix per device, by the plan.
fn row_splits(d: &ModelDesc, plan: &PlacementPlan) -> Vec<(String, Vec<usize>)> {
    d.tensors
        .iter()
        .filter(|t| plan.home_of(d, &t.name) == Some(Home::Rows))
        .map(|t| {
            let rows = split_rows(t.shape[1], &plan.row_split, ROW_ALIGN);
            (t.name.clone(), rows)
        })
        .collect()
}

/// How many devices hold rows of a split.
fn holders(rows: &[usize]) -> usize {
    rows.iter().filter(|&&r| r > 0).count()
}

#[test]
fn layer_and_row_split_over_two_to_four_devices_give_the_single_device_logits() {
    let d = desc(false);
    let want = single(&d);
    // unequal memory, chosen so that the default split (by free memory)
    // gives every device a share in both modes
    for memory in [vec![64, 32], vec![48, 16, 32], vec![24, 48, 32, 40]] {
        for mode in [SplitMode::Layer, SplitMode::Row] {
            let devices: Vec<Arc<SimDevice>> = memory
                .iter()
                .enumerate()
                .map(|(i, m)| SimDevice::new(i, SimConfig::gpu(m << 20)))
                .collect();
            let dyns: Vec<Arc<dyn Device>> = devices
                .iter()
                .map(|s| s.clone() as Arc<dyn Device>)
                .collect();
            let opts = PlacementOptions {
                split_mode: mode,
                ..PlacementOptions::default()
            };
            let m = Model::load(&d, &dyns, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
            for (i, s) in devices.iter().enumerate() {
                assert!(
                    s.allocated_bytes() > 0 && m.plan.weight_bytes[i + 1] > 0,
                    "{mode:?} over {memory:?}: sim:{i} holds no weights ({:?})",
                    m.weight_bytes()
                );
            }
            let splits = row_splits(&d, &m.plan);
            let want_parts: usize = splits.iter().map(|(_, r)| holders(r)).sum();
            if mode == SplitMode::Row {
                for i in 0..memory.len() {
                    assert!(
                        splits.iter().any(|(_, r)| r[i] > 0),
                        "{memory:?}: sim:{i} holds no matrix rows"
                    );
                }
                for name in ["blk.0.attn_k.weight", "blk.0.attn_v.weight"] {
                    let (_, r) = splits.iter().find(|(n, _)| n == name).unwrap();
                    assert!(holders(r) >= 2, "{memory:?}: {name} is not split: {r:?}");
                }
                // 7 matrices per layer and the output
                assert_eq!(splits.len(), 7 * 4 + 1);
            } else {
                assert!(splits.is_empty());
            }
            let (got, parts, n_splits) = run(m);
            let e = nmse(&got, &want);
            assert!(e < 1e-9, "{mode:?} over {memory:?}: nmse {e}");
            assert!(
                n_splits >= memory.len(),
                "{mode:?} over {memory:?}: {n_splits} splits"
            );
            // one partial mul_mat per device holding rows of each matrix
            // (a matrix on one device keeps its own mul_mat, not counted)
            let one_part = splits.iter().filter(|(_, r)| holders(r) == 1).count();
            assert_eq!(parts, want_parts - one_part, "{mode:?} over {memory:?}");
        }
    }
}

#[test]
fn row_split_gathers_run_on_the_main_device() {
    let d = desc(false);
    let want = single(&d);
    for (n, main) in [(2, 0), (2, 1), (3, 1), (3, 2)] {
        let devices = sims(&vec![64; n]);
        let opts = PlacementOptions {
            split_mode: SplitMode::Row,
            main_device: main,
            ..PlacementOptions::default()
        };
        let m = Model::load(&d, &devices, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
        // a matrix over k devices is gathered by k - 1 concats
        let want_gathers: usize = row_splits(&d, &m.plan)
            .iter()
            .map(|(_, r)| holders(r) - 1)
            .sum();
        assert!(want_gathers >= (7 * 4 + 1) * (n - 1) / 2, "{want_gathers}");
        let mut ctx = Context::new(Arc::new(m), params()).unwrap();
        ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
        let mut got = ctx.logits().to_vec();
        ctx.decode(&Batch::tokens(&[7])).unwrap();
        got.extend_from_slice(ctx.logits());
        let e = nmse(&got, &want);
        assert!(e < 1e-9, "{n} devices, main {main}: nmse {e}");

        let sched = ctx.scheduler();
        let g = sched.graph().unwrap();
        // a gather is a concat of partial mul_mats (or their copies)
        let gathers: Vec<_> = g
            .nodes()
            .iter()
            .copied()
            .filter(|&id| {
                let t = g.tensor(id);
                matches!(t.op, Op::Concat { .. })
                    && t.src.iter().any(|&s| g.tensor(s).name.contains("@rows"))
            })
            .collect();
        assert_eq!(gathers.len(), want_gathers, "{n} devices");
        let main_name = format!("sim:{main}");
        for id in gathers {
            let b = sched.backend_of(id).unwrap();
            assert_eq!(
                sched.device(b).name(),
                main_name,
                "gather '{}' ({n} devices)",
                g.display_name(id)
            );
            let cause = sched.cause_of(id).copied();
            assert!(
                matches!(cause, Some(Cause::RowSplitGather { buffer_type, .. }) if buffer_type == main_name),
                "gather '{}': {cause:?}",
                g.display_name(id)
            );
        }
        assert!(sched.explain().contains("row split: gathers the row parts"));
    }
}

#[test]
fn fractions_and_bytes_place_what_they_say() {
    let d = desc(false);
    let devices = sims(&[256, 256]);
    let opts = PlacementOptions {
        tensor_split: Some(TensorSplit::Fractions(vec![1.0, 3.0])),
        ..PlacementOptions::default()
    };
    let m = Model::load(&d, &devices, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
    let bytes = |name: &str| {
        m.weight_bytes()
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, b)| *b)
    };
    // the shares count layers, as llama.cpp's: of the five (four and the
    // output), layer i goes to sim:1 from i / 5 >= 1/4
    assert_eq!(
        m.plan.layer_device,
        [Some(0), Some(0), Some(1), Some(1), Some(1)]
    );
    assert!(bytes("sim:0") > 0 && bytes("sim:1") > 0);

    let layer: u64 = d
        .tensors
        .iter()
        .filter(|t| t.name.starts_with("blk.0."))
        .map(|t| t.nbytes())
        .sum();
    let opts = PlacementOptions {
        n_gpu_layers: GpuLayers::Count(4),
        tensor_split: Some(TensorSplit::Bytes(vec![layer + layer / 2, 1 << 30])),
        ..PlacementOptions::default()
    };
    let m = Model::load(
        &d,
        &sims(&[256, 256]),
        CpuDevice::new(),
        &opts,
        LoadMode::Real,
        None,
    )
    .unwrap();
    assert_eq!(
        m.plan.layer_device[1..],
        [Some(0), Some(1), Some(1), Some(1)]
    );
    assert!(m.plan.weight_bytes[1] <= layer + layer / 2);
}

#[test]
fn a_placement_that_does_not_fit_fails_naming_the_device_and_shortfall_before_loading() {
    let d = desc(false);
    let big = SimDevice::new(0, SimConfig::gpu(256 << 20));
    let small = SimDevice::new(1, SimConfig::gpu(64 << 10));
    let devices: Vec<Arc<dyn Device>> = vec![big.clone(), small.clone()];
    let opts = PlacementOptions {
        tensor_split: Some(TensorSplit::Fractions(vec![1.0, 1.0])),
        ..PlacementOptions::default()
    };
    match Model::load(&d, &devices, CpuDevice::new(), &opts, LoadMode::Real, None) {
        Err(Error::OutOfMemory {
            buffer_type,
            requested_bytes,
            available_bytes,
        }) => {
            assert!(buffer_type.starts_with("sim:1 "), "{buffer_type}");
            assert!(!buffer_type.contains("sim:0"), "{buffer_type}");
            assert_eq!(available_bytes, 64 << 10);
            assert!(requested_bytes > available_bytes);
            let short = requested_bytes - available_bytes;
            assert!(
                buffer_type.contains(&format!("{short} bytes")),
                "the shortfall, {short} bytes: {buffer_type}"
            );
            assert!(
                buffer_type.contains("offload fewer layers (n_gpu_layers) or change tensor_split"),
                "{buffer_type}"
            );
        }
        Err(e) => panic!("expected out of memory, got {e}"),
        Ok(_) => panic!("expected out of memory"),
    }
    assert_eq!(big.allocated_bytes(), 0, "nothing was allocated");
    assert_eq!(small.allocated_bytes(), 0, "nothing was allocated");
}

#[test]
fn overrides_match_what_the_dry_run_lists_and_moe_experts_can_stay_home() {
    let d = desc(true);
    let want = single(&d);
    let devices = sims(&[256]);
    let opts = PlacementOptions::default().cpu_moe();
    let dry = Model::load(
        &d,
        &devices,
        CpuDevice::new(),
        &opts,
        LoadMode::DryRun,
        None,
    )
    .unwrap();
    let listed = &dry.plan.override_matches[0];
    assert_eq!(listed.len(), 12, "three expert tensors in four layers");
    for name in listed {
        assert_eq!(dry.plan.home_of(&d, name), Some(Home::Host));
    }
    let m = Model::load(&d, &devices, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
    assert_eq!(m.plan.override_matches, dry.plan.override_matches);
    let e = nmse(&logits(m), &want);
    assert!(e < 1e-9, "nmse {e}");

    // first match wins
    let opts = PlacementOptions {
        overrides: vec![
            ggraph_model::placement::Override::new(r"blk\.0\.", OverrideTarget::Device(0)).unwrap(),
            ggraph_model::placement::Override::new(r"attn_q", OverrideTarget::Host).unwrap(),
        ],
        n_gpu_layers: GpuLayers::Count(0),
        ..PlacementOptions::default()
    };
    let p = Model::load(
        &d,
        &devices,
        CpuDevice::new(),
        &opts,
        LoadMode::DryRun,
        None,
    )
    .unwrap()
    .plan;
    assert_eq!(p.home_of(&d, "blk.0.attn_q.weight"), Some(Home::Device(0)));
    assert_eq!(p.home_of(&d, "blk.1.attn_q.weight"), Some(Home::Host));
    assert!(
        p.override_matches[1]
            .iter()
            .all(|n| !n.starts_with("blk.0."))
    );
}

#[test]
fn weights_take_one_allocation_per_device() {
    let d = desc(false);
    let m = Model::load(
        &d,
        &sims(&[256, 256]),
        CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )
    .unwrap();
    assert_eq!(m.n_buffers(), 3, "host, sim:0, sim:1");
    let opts = PlacementOptions {
        split_mode: SplitMode::Row,
        ..PlacementOptions::default()
    };
    let m = Model::load(
        &d,
        &sims(&[256, 256]),
        CpuDevice::new(),
        &opts,
        LoadMode::Real,
        None,
    )
    .unwrap();
    assert!(m.n_buffers() <= 5, "{} buffers", m.n_buffers());
}

#[test]
fn the_kv_cache_follows_its_layer_or_stays_on_the_host_without_offload_kqv() {
    let d = desc(false);
    let want = single(&d);
    let n_layer = d.config.n_layer;
    for offload_kqv in [true, false] {
        let devices = sims(&[64, 32]);
        let opts = PlacementOptions {
            offload_kqv,
            ..PlacementOptions::default()
        };
        let m = Model::load(&d, &devices, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
        let layer_bt: Vec<String> = (0..n_layer)
            .map(|il| {
                let dev = m.plan.layer_device[il].expect("every layer offloaded");
                devices[dev].buffer_type().name().to_string()
            })
            .collect();
        let mut ctx = Context::new(Arc::new(m), params()).unwrap();
        let cache_bt: Vec<String> = (0..n_layer)
            .map(|il| {
                ctx.memory()
                    .main()
                    .unwrap()
                    .layer(il)
                    .unwrap()
                    .buffer_type
                    .clone()
            })
            .collect();
        if offload_kqv {
            assert_eq!(cache_bt, layer_bt, "each layer's cache on its device");
            assert!(
                cache_bt.iter().any(|n| n == "sim:0") && cache_bt.iter().any(|n| n == "sim:1"),
                "the layers span both devices: {cache_bt:?}"
            );
        } else {
            assert!(
                cache_bt.iter().all(|n| n == CPU_BUFFER_TYPE),
                "without offload_kqv the cache is on the host: {cache_bt:?}"
            );
            let bytes = ctx.kv_bytes_per_buffer_type();
            assert!(bytes.iter().all(|(n, _)| n == CPU_BUFFER_TYPE), "{bytes:?}");
        }
        ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
        let mut got = ctx.logits().to_vec();
        ctx.decode(&Batch::tokens(&[7])).unwrap();
        got.extend_from_slice(ctx.logits());
        let e = nmse(&got, &want);
        assert!(e < 1e-9, "offload_kqv {offload_kqv}: nmse {e}");
    }
}

/// A model with tied embeddings reads its logits from a copy of the token
/// embeddings on the output layer's device (as llama.cpp duplicates them),
/// so the output mul_mat runs there; on the host alone the copy is the
/// embeddings' own memory, and the logits are the same either way.
#[test]
fn tied_embeddings_are_copied_to_the_output_device_and_shared_on_the_host() {
    let c = ModelConfig::new(&ggraph_model::arch::GEMMA2, 128, 128, 4, 8, 4, 256);
    let desc = ModelDesc::random(c, DType::Q8_0, 9).unwrap();
    let embd = desc.tensor("token_embd.weight").unwrap().nbytes();
    let out = desc.tensor("output.weight").unwrap();
    assert_eq!(out.copy_of.as_deref(), Some("token_embd.weight"));

    let host = Model::load(
        &desc,
        &[],
        CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )
    .unwrap();
    let i = desc
        .tensors
        .iter()
        .position(|t| t.name == "output.weight")
        .unwrap();
    assert!(host.plan.shared_with[i].is_some(), "one copy on the host");
    assert_eq!(host.plan.weight_bytes[0], desc.total_bytes());

    let sims: Vec<Arc<dyn Device>> = (0..2)
        .map(|i| SimDevice::new(i, SimConfig::gpu(64 << 20)) as Arc<dyn Device>)
        .collect();
    let opts = PlacementOptions {
        split_mode: SplitMode::Layer,
        ..PlacementOptions::default()
    };
    let split = Model::load(&desc, &sims, CpuDevice::new(), &opts, LoadMode::Real, None).unwrap();
    assert_eq!(
        split.plan.home_of(&desc, "output.weight"),
        Some(Home::Device(1))
    );
    assert_eq!(
        split.plan.home_of(&desc, "token_embd.weight"),
        Some(Home::Host)
    );
    assert_eq!(split.plan.shared_with[i], None);
    let total: u64 = split.plan.weight_bytes.iter().sum();
    assert_eq!(
        total,
        desc.total_bytes() + embd,
        "the copy is allocated once more"
    );

    let want: Vec<f64> = logits(host).iter().map(|&x| x as f64).collect();
    let e = nmse(&logits(split), &want);
    assert!(e < 1e-6, "{e}");
}
