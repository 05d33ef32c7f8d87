//! Hybrid memory (attention caches and recurrent state) through the
//! context, on the LFM2 fixture (`ggraph-model/tests/fixtures/arch/`):
//! a failed ubatch leaves the state it read, a partial removal is refused
//! and changes nothing, batches recurrent state cannot take are refused
//! with the context still usable, and the state is counted with the
//! cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ggraph::Device;
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams, DecodeError};
use ggraph::model::arch::Attention;
use ggraph::model::desc::ModelDesc;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::runner;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

const PROMPT: [i32; 12] = [1, 51, 88, 125, 162, 199, 236, 273, 25, 62, 99, 136];

fn fixture(name: &str) -> ModelDesc {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../ggraph-model/tests/fixtures/arch/{name}.gguf"));
    runner::open_model(path.to_str().unwrap()).unwrap()
}

fn context(devices: &[Arc<dyn Device>], n_seq_max: usize) -> Context {
    context_of("lfm2", devices, n_seq_max)
}

fn context_of(name: &str, devices: &[Arc<dyn Device>], n_seq_max: usize) -> Context {
    let model = Model::load(
        &fixture(name),
        devices,
        CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )
    .unwrap();
    let params = ContextParams {
        n_ctx: 128,
        n_batch: 64,
        n_ubatch: 64,
        n_seq_max,
        attention: Attention::Standard,
        ..ContextParams::default()
    };
    Context::new(Arc::new(model), params).unwrap()
}

fn sims() -> Vec<Arc<dyn Device>> {
    (0..2)
        .map(|i| SimDevice::new(i, SimConfig::gpu(64 << 20)) as Arc<dyn Device>)
        .collect()
}

/// The logits after the prompt and then `next`, on a fresh context.
fn reference(next: i32) -> Vec<f32> {
    reference_of("lfm2", next)
}

fn reference_of(name: &str, next: i32) -> Vec<f32> {
    let mut ctx = context_of(name, &sims(), 1);
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    ctx.decode(&Batch::tokens(&[next])).unwrap();
    ctx.logits().to_vec()
}

/// Layers split over two simulated GPUs: a compute aborted before the
/// second GPU's split has written the first GPU's layers' state; the
/// ubatch is rolled back, and decoding it again gives the logits of a
/// context that never failed (LFM2's convolution state, Granite's
/// convolution and scan states, Qwen3.5's convolution state and state
/// matrices).
#[test]
fn a_failed_ubatch_leaves_the_recurrent_state_it_read() {
    for name in ["lfm2", "granitehybrid", "qwen35"] {
        let want = reference_of(name, 77);
        let mut ctx = context_of(name, &sims(), 1);
        ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
        let splits = Arc::new(AtomicUsize::new(0));
        let seen = splits.clone();
        ctx.scheduler_mut()
            .set_abort_callback(Some(Box::new(move || {
                seen.fetch_add(1, Ordering::SeqCst) >= 1
            })));
        let e = ctx.decode(&Batch::tokens(&[77])).unwrap_err();
        assert!(matches!(e, DecodeError::Aborted), "{name}: {e}");
        assert!(
            splits.load(Ordering::SeqCst) >= 2,
            "{name}: the first split ran before the abort"
        );
        ctx.scheduler_mut().set_abort_callback(None);
        assert_eq!(ctx.seq_pos_max(0), Some(PROMPT.len() as i32 - 1));
        ctx.decode(&Batch::tokens(&[77])).unwrap();
        assert_eq!(ctx.logits(), &want[..], "{name}");
    }
}

/// A recurrent state holds no earlier positions: cutting a sequence back
/// is refused and changes nothing; removing all of it works, and the
/// sequence then starts afresh (its state zeroed).
#[test]
fn a_partial_removal_is_refused_and_changes_nothing() {
    let want = reference(77);
    let mut ctx = context(&[], 1);
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    let e = ctx.seq_rm(Some(0), Some(5), None).unwrap_err().to_string();
    assert!(e.contains("recurrent state"), "{e}");
    let e = ctx.seq_rm(None, Some(5), Some(8)).unwrap_err().to_string();
    assert!(e.contains("recurrent state"), "{e}");
    let e = ctx.seq_cp(0, 0, Some(3), None).unwrap_err().to_string();
    assert!(e.contains("copied whole"), "{e}");
    assert_eq!(ctx.cells_used(), PROMPT.len());
    assert_eq!(ctx.seq_pos_max(0), Some(PROMPT.len() as i32 - 1));
    // removing nothing (past the end) is no change either
    ctx.seq_rm(Some(0), Some(40), None).unwrap();
    ctx.decode(&Batch::tokens(&[77])).unwrap();
    assert_eq!(ctx.logits(), &want[..]);

    ctx.seq_rm(Some(0), None, None).unwrap();
    assert_eq!((ctx.cells_used(), ctx.seq_pos_max(0)), (0, None));
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    ctx.decode(&Batch::tokens(&[77])).unwrap();
    assert_eq!(ctx.logits(), &want[..]);
}

/// A token in two sequences, a sequence beyond the context's and
/// positions that do not continue a sequence are refused before anything
/// is decoded; the context goes on.
#[test]
fn batches_recurrent_state_cannot_take_are_refused() {
    let want = reference(77);
    let mut ctx = context(&[], 2);
    let shared = Batch {
        seq_ids: Some(vec![vec![0, 1]; PROMPT.len()]),
        ..Batch::tokens(&PROMPT)
    };
    let e = ctx.decode(&shared).unwrap_err();
    assert!(
        matches!(e, DecodeError::InvalidBatch(_)) && e.to_string().contains("several sequences"),
        "{e}"
    );
    let e = ctx.decode(&Batch::of_sequence(&PROMPT, 2)).unwrap_err();
    assert!(matches!(e, DecodeError::InvalidBatch(_)), "{e}");
    assert_eq!(ctx.cells_used(), 0);
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    ctx.decode(&Batch::tokens(&[77])).unwrap();
    assert_eq!(ctx.logits(), &want[..]);
}

/// Logits of contexts of other sizes (attention sums over other cells).
fn close(a: &[f32], b: &[f32]) {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(a.len() == b.len() && d < 1e-4, "logits differ by {d}");
}

/// Two sequences: a fork keeps both branches' state apart (each goes on
/// as a context that decoded only it would), `seq_keep` drops the other
/// one's state, and the state's bytes are counted with the cache's: per
/// convolution layer, two rows of (l_cache - 1) x n_embd F32 values per
/// sequence.
#[test]
fn forks_keep_their_state_apart_and_the_state_is_counted() {
    let mut ctx = context(&[], 2);
    let kv_only: u64 = {
        let c = &ctx.model().config;
        // four convolution layers of the six
        let state = 4 * 2 * 2 * (c.n_embd_r() as u64) * 4;
        let total: u64 = ctx.kv_bytes_per_buffer_type().iter().map(|(_, b)| b).sum();
        assert!(total > state, "{total}");
        total - state
    };
    // attention layers 2 and 5: K and V of 128 cells x 32 F16 values
    assert_eq!(kv_only, 2 * 2 * 128 * 32 * 2);
    ctx.decode(&Batch::tokens(&PROMPT)).unwrap();
    ctx.seq_cp(0, 1, None, None).unwrap();
    ctx.decode(&Batch::of_sequence(&[91], 1)).unwrap();
    ctx.decode(&Batch::of_sequence(&[77], 0)).unwrap();
    close(ctx.logits(), &reference(77));
    ctx.decode(&Batch::of_sequence(&[12], 1)).unwrap();
    let branch = ctx.logits().to_vec();
    let mut alone = context(&[], 1);
    alone.decode(&Batch::tokens(&PROMPT)).unwrap();
    alone.decode(&Batch::tokens(&[91])).unwrap();
    alone.decode(&Batch::tokens(&[12])).unwrap();
    close(&branch, alone.logits());

    ctx.seq_keep(1).unwrap();
    assert_eq!(ctx.seq_pos_max(0), None);
    assert_eq!(ctx.memory().recurrent().unwrap().seqs_used(), 1);
}

/// A prompt of 100 tokens read in ubatches of 16 (the state carried
/// from each to the next) gives the logits of reading it in one, for
/// every hybrid architecture.
#[test]
fn state_carried_across_ubatches_gives_the_logits_of_one_ubatch() {
    let prompt: Vec<i32> = (0..100).map(|i| 3 + (i * 37 + 11) % 285).collect();
    for name in ["lfm2", "lfm2_swa", "granitehybrid", "qwen35", "qwen35moe"] {
        let run = |n_ubatch: usize| {
            let model = Model::load(
                &fixture(name),
                &[],
                CpuDevice::new(),
                &PlacementOptions::default(),
                LoadMode::Real,
                None,
            )
            .unwrap();
            let params = ContextParams {
                n_ctx: 256,
                n_batch: 128,
                n_ubatch,
                attention: Attention::Standard,
                ..ContextParams::default()
            };
            let mut ctx = Context::new(Arc::new(model), params).unwrap();
            ctx.decode(&Batch::tokens(&prompt)).unwrap();
            (ctx.logits().to_vec(), ctx.stats().ubatches)
        };
        let (one, n_one) = run(128);
        let (many, n_many) = run(16);
        assert_eq!((n_one, n_many), (1, 7), "{name}");
        close(&many, &one);
    }
}
