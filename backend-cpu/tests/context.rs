//! The decode loop: incremental decoding equals one-shot decoding, graphs
//! are reused when shapes repeat, sequences stay apart, cache operations
//! keep attention right, and every failure leaves the cache as it was.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ggraph_conformance::nmse;
use ggraph_conformance::reference;
use ggraph_core::backend::{BufferType, Device, DeviceKind, MemoryInfo, Stream};
use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{DType, Result, quant};
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};
use ggraph_model::arch::{
    Attention, BuildShape, FreshWeights, ModelConfig, build_graph, causal_mask,
};
use ggraph_model::batch::Batch;
use ggraph_model::context::{Context, ContextParams, DecodeError};
use ggraph_model::desc::{ModelDesc, TensorSpec};
use ggraph_model::kv::FreshCache;
use ggraph_model::loaded::{LoadMode, Model};
use ggraph_model::placement::PlacementOptions;

fn model_on(devices: &[Arc<dyn Device>], cpu: Arc<dyn Device>) -> Arc<Model> {
    model_with_layers(devices, cpu, 2)
}

fn model_with_layers(
    devices: &[Arc<dyn Device>],
    cpu: Arc<dyn Device>,
    n_layer: usize,
) -> Arc<Model> {
    let desc = ModelDesc::random(
        ModelConfig::dense(101, 64, n_layer, 4, 2, 96),
        DType::Q8_0,
        3,
    )
    .unwrap();
    load(desc, devices, cpu)
}

/// A one-layer model that carries rope frequency factors
/// (`rope_freqs.weight`, as llama 3.1 GGUFs do): n_rot / 2 values that
/// divide each rotated pair's frequency, here random in 0.8..1.2 (a
/// shift by 2 positions then turns the fastest pair by up to 0.5 rad
/// more or less than without them).
fn model_with_rope_freqs(cpu: Arc<dyn Device>) -> Arc<Model> {
    let mut desc =
        ModelDesc::random(ModelConfig::dense(101, 64, 1, 4, 2, 96), DType::Q8_0, 3).unwrap();
    let n = desc.config.n_rot / 2;
    desc.tensors.push(TensorSpec {
        name: "rope_freqs.weight".into(),
        dtype: DType::F32,
        shape: vec![n],
        copy_of: None,
    });
    load(desc, &[], cpu)
}

fn load(desc: ModelDesc, devices: &[Arc<dyn Device>], cpu: Arc<dyn Device>) -> Arc<Model> {
    Arc::new(
        Model::load(
            &desc,
            devices,
            cpu,
            &PlacementOptions::default(),
            LoadMode::Real,
            None,
        )
        .unwrap(),
    )
}

fn params(attention: Attention) -> ContextParams {
    ContextParams {
        n_ctx: 32,
        n_batch: 32,
        n_ubatch: 8,
        n_seq_max: 4,
        attention,
        k_type: DType::F32,
        v_type: DType::F32,
        n_kv_pad: 32,
        ..ContextParams::default()
    }
}

fn context(attention: Attention) -> Context {
    Context::new(model_on(&[], CpuDevice::new()), params(attention)).unwrap()
}

/// A KV cache configuration the decode loop must run with, and how
/// close two decodes that should agree come with it (nmse bounds).
///
/// F32 and F16 round K and V at most to half precision (relative 2^-11):
/// everything agrees to the float sums. Q8_0 keeps 8 bits per value and
/// Q4_0 4 bits: a value is off by up to half a step, the step being
/// 1/127 (Q8_0) or 1/8 (Q4_0) of the block's largest value, so a K row
/// rounded twice (a K shift dequantises, rotates and rounds again) is
/// off from a row rounded once by an nmse of about step^2 / 12 over the
/// block's mean square: ~5e-5 for Q8_0 and ~2e-2 for Q4_0 here (a
/// missing shift is off by 0.2). Through one layer's attention that
/// reaches the logits as ~1e-4 and ~4e-4 (a missing shift: ~1e-2). The
/// bounds leave a margin above the measured errors and stay below what a
/// missing shift gives.
#[derive(Clone, Copy, Debug)]
struct KvCase {
    kv: DType,
    attention: Attention,
    /// Logits of two decodes that read the same cache bytes (the rows
    /// each token wrote, perhaps moved): only the float sums differ.
    same_cache: f64,
    /// Logits where one decode's cache values were rounded to the cache
    /// type again (a K shift) or from a slightly different float (rows
    /// written from another batch).
    rounded_again: f64,
    /// Shifted K rows against the rows a fresh decode wrote.
    shifted_k: f64,
}

const KV_CASES: [KvCase; 5] = [
    KvCase {
        kv: DType::F32,
        attention: Attention::Standard,
        same_cache: 1e-9,
        rounded_again: 1e-9,
        shifted_k: 1e-9,
    },
    KvCase {
        kv: DType::F32,
        attention: Attention::Flash,
        same_cache: 1e-9,
        rounded_again: 1e-9,
        shifted_k: 1e-9,
    },
    KvCase {
        kv: DType::F16,
        attention: Attention::Standard,
        same_cache: 1e-9,
        // the scores' softmax is rounded to F16 for the product with V, as
        // ggml rounds it: a rotation's last bits can move one of them
        rounded_again: 3e-4,
        shifted_k: 1e-6,
    },
    KvCase {
        kv: DType::Q8_0,
        attention: Attention::Flash,
        same_cache: 1e-9,
        rounded_again: 1e-3,
        shifted_k: 3e-4,
    },
    KvCase {
        kv: DType::Q4_0,
        attention: Attention::Flash,
        same_cache: 1e-9,
        rounded_again: 3e-3,
        shifted_k: 5e-2,
    },
];

impl KvCase {
    /// A context over a random model of `n_layer` layers whose head_dim
    /// (32) is whole Q8_0/Q4_0 blocks, as the K shift of a quantised
    /// cache needs (it rotates each head's K in place).
    fn context(&self, n_layer: usize) -> Context {
        let desc = ModelDesc::random(
            ModelConfig::dense(101, 128, n_layer, 4, 2, 96),
            DType::Q8_0,
            5,
        )
        .unwrap();
        let p = ContextParams {
            k_type: self.kv,
            v_type: self.kv,
            ..params(self.attention)
        };
        Context::new(load(desc, &[], CpuDevice::new()), p).unwrap()
    }
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| *x as f64).collect()
}

const PROMPT: [i32; 9] = [1, 17, 42, 5, 99, 3, 64, 8, 21];

#[test]
fn incremental_decoding_equals_one_shot_decoding() {
    for case in KV_CASES {
        let mut one = case.context(2);
        one.decode(&Batch::tokens(&PROMPT)).unwrap();
        let want = one.logits().to_vec();
        let mut inc = case.context(2);
        inc.decode(&Batch::tokens(&PROMPT[..5])).unwrap();
        for t in &PROMPT[5..] {
            inc.decode(&Batch::tokens(&[*t])).unwrap();
        }
        let e = nmse(inc.logits(), &f64s(&want));
        assert!(e < case.same_cache, "{case:?}: nmse {e}");
        // one-shot: two ubatches (8 + 1 tokens), two shapes, two graphs
        let s = one.stats();
        assert_eq!((s.ubatches, s.tokens), (2, 9));
        assert_eq!((s.graphs_built, s.graphs_reused), (2, 0), "{s:?}");
        // incremental: a 5-token graph, then one 1-token graph built for
        // the first step and reused for the other three (the cells the
        // attention sees stay padded to 32, so the shape repeats)
        let s = inc.stats();
        assert_eq!((s.ubatches, s.tokens), (5, 9));
        assert_eq!((s.graphs_built, s.graphs_reused), (2, 3), "{s:?}");
    }
}

#[test]
fn sequences_in_one_batch_do_not_see_each_other() {
    let mut joint = context(Attention::Flash);
    let batch = Batch {
        tokens: vec![5, 6, 7, 50, 60],
        seq_ids: Some(vec![vec![0], vec![0], vec![0], vec![1], vec![1]]),
        outputs: Some(vec![false, false, true, false, true]),
        ..Batch::default()
    };
    joint.decode(&batch).unwrap();
    let mut a = context(Attention::Flash);
    a.decode(&Batch::tokens(&[5, 6, 7])).unwrap();
    let mut b = context(Attention::Flash);
    b.decode(&Batch::tokens(&[50, 60])).unwrap();
    assert!(nmse(joint.logits_of(2).unwrap(), &f64s(a.logits())) < 1e-9);
    assert!(nmse(joint.logits_of(4).unwrap(), &f64s(b.logits())) < 1e-9);
}

#[test]
fn a_copied_sequence_continues_like_the_original() {
    let mut ctx = context(Attention::Standard);
    ctx.decode(&Batch::tokens(&[4, 8, 15])).unwrap();
    ctx.seq_cp(0, 1, None, None).unwrap();
    let next = |seq| Batch {
        tokens: vec![16],
        seq_ids: Some(vec![vec![seq]]),
        ..Batch::default()
    };
    ctx.decode(&next(0)).unwrap();
    let from0 = ctx.logits().to_vec();
    ctx.decode(&next(1)).unwrap();
    assert!(nmse(ctx.logits(), &f64s(&from0)) < 1e-9);
    assert_eq!(
        ctx.memory().cells().used(),
        5,
        "three shared cells and one each"
    );
}

#[test]
fn shifted_positions_rotate_k_like_a_fresh_decode() {
    for case in KV_CASES {
        let (k, logits) = shift_against_a_fresh_decode(&|| case.context(1));
        assert!(k < case.shifted_k, "{case:?}: K nmse {k}");
        assert!(
            logits < case.rounded_again,
            "{case:?}: logits nmse {logits}"
        );
    }
}

#[test]
fn the_k_shift_uses_the_models_rope_frequency_factors() {
    let (k, logits) = shift_against_a_fresh_decode(&|| {
        Context::new(
            model_with_rope_freqs(CpuDevice::new()),
            params(Attention::Flash),
        )
        .unwrap()
    });
    assert!(k < 1e-9 && logits < 1e-9, "nmse: K {k}, logits {logits}");
}

/// Layer 0's K of `n` cells from `first`, as f32.
fn k_rows(ctx: &Context, first: usize, n: usize) -> Vec<f32> {
    let t = ctx.memory().main().unwrap().layout().k_type;
    let n_embd_kv = ctx.model().config.n_embd_kv();
    let row = t.row_size(n_embd_kv).unwrap();
    let k = &ctx.memory().main().unwrap().layer(0).unwrap().k;
    let mut bytes = vec![0u8; row * n];
    k.buffer
        .read(k.offset + (row * first) as u64, &mut bytes)
        .unwrap();
    ggraph_core::quant::dequantize(t, &bytes, n_embd_kv * n).unwrap()
}

/// Decode A B C D, drop A B, shift C D to positions 0 1, then decode E.
/// With one layer, a token's K and V depend only on the token and its
/// position, so the shifted cache must equal a fresh decode of C D E:
/// the nmse of C D's K rows and of E's logits against the fresh decode's.
fn shift_against_a_fresh_decode(one_layer: &dyn Fn() -> Context) -> (f64, f64) {
    let mut shifted = one_layer();
    shifted.decode(&Batch::tokens(&[10, 20, 30, 40])).unwrap();
    shifted.seq_rm(Some(0), Some(0), Some(2)).unwrap();
    shifted.seq_add(0, Some(2), None, -2).unwrap();
    shifted.decode(&Batch::tokens(&[50])).unwrap();
    let mut fresh = one_layer();
    fresh.decode(&Batch::tokens(&[30, 40, 50])).unwrap();
    assert!(
        !shifted.memory().cells().has_shift(),
        "the shift was applied"
    );
    // C D stay in cells 2 3 (E took the free cell 0); fresh: cells 0 1
    assert_eq!(shifted.memory().cells().cell(2).pos, Some(0));
    let k = nmse(&k_rows(&shifted, 2, 2), &f64s(&k_rows(&fresh, 0, 2)));
    (k, nmse(shifted.logits(), &f64s(fresh.logits())))
}

#[test]
fn defragmentation_moves_cells_without_changing_attention() {
    for case in KV_CASES {
        // two sequences interleaved, then sequence 0 removed: sequence 1
        // is scattered over cells 1, 3, 5 (a twin context is not packed)
        let scattered = || {
            let mut ctx = case.context(2);
            let two = Batch {
                tokens: vec![1, 2, 3, 4, 5, 6],
                seq_ids: Some(vec![vec![0], vec![1], vec![0], vec![1], vec![0], vec![1]]),
                outputs: Some(vec![false; 6]),
                ..Batch::default()
            };
            ctx.decode(&two).unwrap();
            ctx.seq_rm(Some(0), None, None).unwrap();
            ctx
        };
        let mut ctx = scattered();
        let mut twin = scattered();
        assert_eq!(
            ctx.memory().cells().used_end(),
            6,
            "sequence 1 is scattered"
        );
        let moved = ctx.defragment().unwrap();
        assert!(moved > 0);
        assert_eq!(ctx.memory().cells().used_end(), 3, "packed");
        let next = Batch {
            tokens: vec![7],
            seq_ids: Some(vec![vec![1]]),
            ..Batch::default()
        };
        ctx.decode(&next).unwrap();
        twin.decode(&next).unwrap();
        let e = nmse(ctx.logits(), &f64s(twin.logits()));
        assert!(e < case.same_cache, "{case:?}: against the twin, nmse {e}");
        // and like a decode of sequence 1 alone, whose rows came from
        // another batch (float sums in another order, perhaps rounded to
        // the cache type the other way)
        let mut alone = case.context(2);
        alone.decode(&Batch::tokens(&[2, 4, 6])).unwrap();
        alone.decode(&Batch::tokens(&[7])).unwrap();
        let e = nmse(ctx.logits(), &f64s(alone.logits()));
        assert!(
            e < case.rounded_again,
            "{case:?}: against a fresh decode, nmse {e}"
        );
    }
}

#[test]
fn a_full_cache_is_an_error_and_changes_nothing() {
    let mut ctx = context(Attention::Flash);
    ctx.decode(&Batch::tokens(&[1; 24])).unwrap();
    let before = ctx.memory().cells().clone();
    match ctx.decode(&Batch::tokens(&[2; 9])) {
        Err(DecodeError::CacheFull { needed, free }) => {
            // the first ubatch of 8 fits and stays; the second does not
            assert_eq!((needed, free), (1, 0));
        }
        other => panic!("expected a full cache, got {other:?}"),
    }
    assert_eq!(ctx.memory().cells().used(), 32);
    ctx.seq_rm(Some(0), Some(24), None).unwrap();
    assert_eq!(ctx.memory().cells().cells(), before.cells());
}

#[test]
fn an_abort_rolls_the_ubatch_back() {
    let mut ctx = context(Attention::Flash);
    ctx.decode(&Batch::tokens(&[1, 2, 3])).unwrap();
    let before = ctx.memory().cells().clone();
    ctx.scheduler_mut()
        .set_abort_callback(Some(Box::new(|| true)));
    assert!(matches!(
        ctx.decode(&Batch::tokens(&[4])),
        Err(DecodeError::Aborted)
    ));
    assert_eq!(*ctx.memory().cells(), before);
    ctx.scheduler_mut().set_abort_callback(None);
    ctx.decode(&Batch::tokens(&[4])).unwrap();
}

#[test]
fn invalid_batches_change_nothing() {
    let mut ctx = context(Attention::Flash);
    ctx.decode(&Batch::tokens(&[1, 2])).unwrap();
    let before = ctx.memory().cells().clone();
    for b in [
        Batch::tokens(&[500]),
        Batch {
            tokens: vec![1],
            positions: Some(vec![7]),
            ..Batch::default()
        },
        Batch::tokens(&[1; 40]),
    ] {
        assert!(
            matches!(ctx.decode(&b), Err(DecodeError::InvalidBatch(_))),
            "{b:?}"
        );
        assert_eq!(*ctx.memory().cells(), before);
    }
}

#[test]
fn an_allocation_failure_rolls_back_and_names_the_device() {
    // a simulated GPU with room for the model, the cache and the first
    // graphs, but not for an 8-token graph that needs more compute memory
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let sim: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(1 << 20));
    let model = model_on(&[sim.clone()], cpu);
    let mut p = params(Attention::Flash);
    p.n_ubatch = 1;
    let mut ctx = Context::new(model, p).unwrap();
    ctx.decode(&Batch::tokens(&[1, 2])).unwrap();
    // the context reserved for 1-token ubatches; now take the rest
    let rest = sim.memory().free_bytes;
    let hog = sim
        .buffer_type()
        .alloc(rest, ggraph_core::BufferUsage::Compute)
        .unwrap();
    let before = ctx.memory().cells().clone();
    ctx.params.n_ubatch = 8;
    match ctx.decode(&Batch::tokens(&[3, 4, 5, 6])) {
        Err(DecodeError::Alloc(e)) => assert!(e.to_string().contains("sim:0"), "{e}"),
        other => panic!("expected an allocation failure, got {other:?}"),
    }
    assert_eq!(*ctx.memory().cells(), before);
    drop(hog);
    ctx.decode(&Batch::tokens(&[3, 4, 5, 6])).unwrap();
}

/// The CPU, with a switch that makes every compute fail.
struct Flaky {
    cpu: Arc<CpuDevice>,
    fail: Arc<AtomicBool>,
}

struct FlakyStream {
    inner: Box<dyn Stream>,
    fail: Arc<AtomicBool>,
}

impl Device for Flaky {
    fn name(&self) -> &str {
        "flaky-CPU"
    }
    fn description(&self) -> String {
        "a CPU that fails on demand".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }
    fn memory(&self) -> MemoryInfo {
        self.cpu.memory()
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.cpu.buffer_type()
    }
    fn supports_buffer_type(&self, b: &dyn BufferType) -> bool {
        self.cpu.supports_buffer_type(b)
    }
    fn supports_op(&self, g: &Graph, n: TensorId) -> bool {
        self.cpu.supports_op(g, n)
    }
    fn new_stream(&self) -> Result<Box<dyn Stream>> {
        Ok(Box::new(FlakyStream {
            inner: self.cpu.new_stream()?,
            fail: self.fail.clone(),
        }))
    }
}

impl Stream for FlakyStream {
    fn compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(ggraph_core::Error::backend("flaky-CPU", "injected failure"));
        }
        self.inner.compute(graph, nodes)
    }
}

#[test]
fn a_compute_failure_rolls_the_ubatch_back() {
    let fail = Arc::new(AtomicBool::new(false));
    let cpu: Arc<dyn Device> = Arc::new(Flaky {
        cpu: CpuDevice::new(),
        fail: fail.clone(),
    });
    let mut ctx = Context::new(model_on(&[], cpu), params(Attention::Flash)).unwrap();
    ctx.decode(&Batch::tokens(&[1, 2, 3])).unwrap();
    let before = ctx.memory().cells().clone();
    fail.store(true, Ordering::SeqCst);
    match ctx.decode(&Batch::tokens(&[4, 5])) {
        Err(DecodeError::Compute(e)) => assert!(e.to_string().contains("injected"), "{e}"),
        other => panic!("expected a compute failure, got {other:?}"),
    }
    assert_eq!(*ctx.memory().cells(), before);
    fail.store(false, Ordering::SeqCst);
    ctx.decode(&Batch::tokens(&[4, 5])).unwrap();
}

#[test]
fn embeddings_are_the_output_norm_of_each_output_token_as_the_f64_reference_computes_it() {
    // F32 weights and cache: the CPU computes in f32, the reference in f64
    let desc = ModelDesc::random(ModelConfig::dense(101, 64, 2, 4, 2, 96), DType::F32, 7).unwrap();
    let prompt = PROMPT;
    let outputs = [2, 7, 8]; // in both ubatches (8 + 1 tokens)
    let mut ctx = Context::new(
        load(desc.clone(), &[], CpuDevice::new()),
        ContextParams {
            embeddings: true,
            ..params(Attention::Flash)
        },
    )
    .unwrap();
    let batch = Batch {
        tokens: prompt.to_vec(),
        outputs: Some((0..prompt.len()).map(|i| outputs.contains(&i)).collect()),
        ..Batch::default()
    };
    ctx.decode(&batch).unwrap();
    let n_embd = desc.config.n_embd;
    assert_eq!(ctx.embeddings().len(), outputs.len() * n_embd);

    // the reference: the whole prompt in one graph, every token an output
    let lg = build_graph(
        &desc.config,
        &BuildShape::prompt(prompt.len(), Attention::Standard),
        &mut FreshWeights { dtype: DType::F32 },
        &mut FreshCache,
    )
    .unwrap();
    let g = &lg.graph;
    let positions: Vec<i32> = (0..prompt.len() as i32).collect();
    let cells: Vec<Option<i32>> = positions.iter().map(|p| Some(*p)).collect();
    let mut inputs: HashMap<TensorId, Vec<u8>> = HashMap::new();
    let i32_bytes = |v: &[i32]| v.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>();
    inputs.insert(lg.inputs.tokens, i32_bytes(&prompt));
    inputs.insert(lg.inputs.positions, i32_bytes(&positions));
    let kq_mask = lg
        .inputs
        .kq_mask
        .expect("a llama layer attends to every position");
    let mask =
        quant::quantize(g.tensor(kq_mask).dtype, &causal_mask(&positions, &cells, 0)).unwrap();
    inputs.insert(kq_mask, mask);
    let ev = reference::evaluate(g, |id| {
        if let Some(b) = inputs.get(&id) {
            return Ok(b.clone());
        }
        desc.bytes_of(desc.tensor(&g.tensor(id).name).expect("a model tensor"))
    })
    .unwrap();
    let want = ev.values(lg.embeddings);
    for &i in &outputs {
        let got = ctx.embeddings_of(i).expect("an output token");
        let e = nmse(got, &want[i * n_embd..(i + 1) * n_embd]);
        assert!(e < 1e-9, "token {i}: nmse {e}");
    }
    assert!(ctx.embeddings_of(0).is_none(), "token 0 was not an output");

    // without the option, nothing is kept
    let mut plain = context(Attention::Flash);
    plain.decode(&Batch::tokens(&PROMPT)).unwrap();
    assert!(plain.embeddings().is_empty() && plain.embeddings_of(8).is_none());
}
