//! The llama runner on a small random-weight GGUF: its logits match the
//! f64 reference, generation is deterministic, and the CPU and a simulated
//! GPU give the same greedy tokens; a GGUF written by the PyPI gguf package
//! loads and runs.

use std::collections::HashMap;
use std::sync::Arc;

use ggraph::backend::Device;
use ggraph::context::{Context, ContextParams};
use ggraph::model::arch::{
    Attention, BuildShape, FreshWeights, ModelConfig, build_graph, causal_mask,
};
use ggraph::model::desc::ModelDesc;
use ggraph::model::gguf::ModelFile;
use ggraph::model::kv::FreshCache;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::make::{make_vocab, model_gguf};
use ggraph::model::placement::PlacementOptions;
use ggraph::{DType, TensorId, quant, runner};
use ggraph_conformance::nmse;
use ggraph_conformance::reference;
use ggraph_cpu::{CpuDevice, SimConfig, SimDevice};

const PROMPT: [i32; 7] = [1, 345, 302, 420, 38, 99, 101];

fn write_random_gguf(name: &str) -> std::path::PathBuf {
    let desc = runner::random_model("tiny", DType::Q8_0, 11).unwrap();
    let w = model_gguf(&desc, make_vocab(desc.config.n_vocab)).unwrap();
    let path =
        std::env::temp_dir().join(format!("ggraph-runner-{}-{name}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    path
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 64,
        n_batch: 64,
        n_ubatch: 16,
        attention: Attention::Standard,
        k_type: DType::F32,
        v_type: DType::F32,
        n_kv_pad: 64,
        ..ContextParams::default()
    }
}

fn context(desc: &ModelDesc, devices: &[Arc<dyn Device>]) -> Context {
    let m = Model::load(
        desc,
        devices,
        CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )
    .unwrap();
    Context::new(Arc::new(m), params()).unwrap()
}

/// The prompt's last logits by the f64 evaluator, from the file's bytes.
fn reference_logits(file: &ModelFile, desc: &ModelDesc, prompt: &[i32]) -> Vec<f64> {
    let shape = BuildShape::prompt(prompt.len(), Attention::Standard);
    let lg = build_graph(
        &desc.config,
        &shape,
        &mut FreshWeights { dtype: DType::F32 },
        &mut FreshCache,
    )
    .unwrap();
    let g = &lg.graph;
    let positions: Vec<i32> = (0..prompt.len() as i32).collect();
    let cells: Vec<Option<i32>> = positions.iter().map(|p| Some(*p)).collect();
    let mut inputs: HashMap<TensorId, Vec<u8>> = HashMap::new();
    inputs.insert(
        lg.inputs.tokens,
        prompt.iter().flat_map(|t| t.to_le_bytes()).collect(),
    );
    inputs.insert(
        lg.inputs.positions,
        positions.iter().flat_map(|t| t.to_le_bytes()).collect(),
    );
    let mask = lg
        .inputs
        .kq_mask
        .expect("a llama layer attends to every position");
    inputs.insert(
        mask,
        quant::quantize(g.tensor(mask).dtype, &causal_mask(&positions, &cells, 0)).unwrap(),
    );
    let ev = reference::evaluate(g, |id| {
        if let Some(b) = inputs.get(&id) {
            return Ok(b.clone());
        }
        let name = &g.tensor(id).name;
        // the graph asked for F32 weights: decode the file's tensor
        let spec = desc.tensor(name).expect("a model tensor");
        let values = quant::dequantize(
            spec.dtype,
            file.tensor_data(name)?,
            spec.shape.iter().product(),
        )?;
        quant::quantize(DType::F32, &values)
    })
    .unwrap();
    let all = ev.values(lg.logits.unwrap());
    all[all.len() - desc.config.n_vocab..].to_vec()
}

/// The models here have quantised weights, and the CPU quantises the
/// activations of a quantised mul_mat to 8 bits (as ggml does), so the
/// logits carry that rounding: the bound is the conformance suite's for a
/// quantised mul_mat. The f64 reference takes the weights as stored and
/// the activations exact.
const QUANTISED_BOUND: f64 = 5e-4;

#[test]
fn the_runner_matches_the_f64_reference_and_repeats_itself() {
    let path = write_random_gguf("reference");
    let file = ModelFile::open(&path).unwrap();
    let desc = ModelDesc::from_file(ModelFile::open(&path).unwrap()).unwrap();
    let want = reference_logits(&file, &desc, &PROMPT);
    let mut ctx = context(&desc, &[]);
    let g1 = runner::generate(&mut ctx, &PROMPT, 12).unwrap();
    // the first logits are those of the prompt's last token
    let mut first = context(&desc, &[]);
    first
        .decode(&ggraph::batch::Batch::tokens(&PROMPT))
        .unwrap();
    let e = nmse(first.logits(), &want);
    assert!(e < QUANTISED_BOUND, "nmse against the f64 reference: {e}");
    assert_eq!(g1.generated[0], runner::argmax(first.logits()));
    let mut again = context(&desc, &[]);
    let g2 = runner::generate(&mut again, &PROMPT, 12).unwrap();
    assert_eq!(g1.generated, g2.generated, "deterministic");
    let sim: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(64 << 20));
    let mut split = context(&desc, &[sim]);
    let g3 = runner::generate(&mut split, &PROMPT, 12).unwrap();
    assert_eq!(g1.generated, g3.generated, "CPU + simulated GPU");
    assert!(split.scheduler().splits().len() > 1);
    std::fs::remove_file(path).ok();
}

#[test]
fn a_llama_in_every_quantised_type_matches_the_f64_reference() {
    // rows of 256 and 512 values: whole super-blocks, so every matrix is
    // in the type asked for (no fallback)
    let config = ModelConfig::dense(512, 256, 1, 4, 2, 512);
    for t in DType::QUANTIZED {
        let desc = ModelDesc::random(config.clone(), t, 5).unwrap();
        assert!(
            desc.tensors
                .iter()
                .all(|s| s.shape.len() == 1 || s.dtype == t),
            "{t}: a matrix fell back to another type"
        );
        let w = model_gguf(&desc, make_vocab(desc.config.n_vocab)).unwrap();
        let path = std::env::temp_dir().join(format!(
            "ggraph-runner-{}-{}.gguf",
            std::process::id(),
            t.name()
        ));
        std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
        let file = ModelFile::open(&path).unwrap();
        let desc = ModelDesc::from_file(ModelFile::open(&path).unwrap()).unwrap();
        let want = reference_logits(&file, &desc, &PROMPT[..5]);
        let mut ctx = context(&desc, &[]);
        ctx.decode(&ggraph::batch::Batch::tokens(&PROMPT[..5]))
            .unwrap();
        let e = nmse(ctx.logits(), &want);
        assert!(
            e < QUANTISED_BOUND,
            "{t}: nmse against the f64 reference: {e}"
        );
        std::fs::remove_file(path).ok();
    }
}

#[test]
fn a_prompt_decoded_one_ubatch_at_a_time_reports_progress_and_generates_the_same() {
    let path = write_random_gguf("pieces");
    let desc = ModelDesc::from_file(ModelFile::open(&path).unwrap()).unwrap();
    // 40 tokens: one batch of 64, or three ubatches of 16
    let prompt = runner::random_prompt(40, desc.config.n_vocab, 5);
    let mut whole = context(&desc, &[]);
    let g1 = runner::generate(&mut whole, &prompt, 6).unwrap();
    let mut pieces = context(&desc, &[]);
    let mut seen = Vec::new();
    let g2 = runner::generate_with(&mut pieces, &prompt, 6, &mut |done, total| {
        seen.push((done, total))
    })
    .unwrap();
    assert_eq!(seen, [(0, 40), (16, 40), (32, 40), (40, 40)]);
    assert_eq!(g1.generated, g2.generated);
    assert_eq!(whole.logits(), pieces.logits(), "the same last logits");
    std::fs::remove_file(path).ok();
}

#[test]
fn a_gguf_written_by_the_gguf_package_loads_and_runs() {
    // written by gguf-py (fixtures/gguf/generate.py: valued_llama), its
    // matrices quantised by gguf.quants
    let path = format!(
        "{}/../ggraph-model/tests/fixtures/gguf/valued_llama.gguf",
        env!("CARGO_MANIFEST_DIR")
    );
    let prompt = [1, 10, 20, 30, 40];
    let desc = runner::open_model(&path).unwrap();
    let mut ctx = context(&desc, &[]);
    let g = runner::generate(&mut ctx, &prompt, 6).unwrap();
    assert_eq!(g.generated.len(), 6);
    assert!(
        g.generated
            .iter()
            .all(|&t| (t as usize) < desc.config.n_vocab)
    );
    let mut first = context(&desc, &[]);
    first
        .decode(&ggraph::batch::Batch::tokens(&prompt))
        .unwrap();
    assert!(first.logits().iter().all(|v| v.is_finite()));
    let want = reference_logits(&ModelFile::open(&path).unwrap(), &desc, &prompt);
    let e = nmse(first.logits(), &want);
    assert!(e < QUANTISED_BOUND, "nmse against the f64 reference: {e}");
}

/// A dry run on a device too small for its share allocates nothing, so
/// cannot fail; the memory report names what would not fit, and by how
/// much (what split-experiment prints for each placement).
#[test]
fn a_dry_run_reports_the_devices_it_overfills() {
    let desc = runner::random_model("tiny", DType::Q8_0, 1).unwrap();
    let cpu: Arc<dyn Device> = CpuDevice::new();
    let small: Arc<dyn Device> = SimDevice::new(0, SimConfig::gpu(64 << 10));
    let roomy: Arc<dyn Device> = SimDevice::new(1, SimConfig::gpu(256 << 20));
    let opts = PlacementOptions::default();
    let load = |dev: &Arc<dyn Device>| {
        let model = Model::load(
            &desc,
            std::slice::from_ref(dev),
            cpu.clone(),
            &opts,
            LoadMode::DryRun,
            None,
        )
        .unwrap();
        Context::new(Arc::new(model), params()).unwrap()
    };
    let ctx = load(&small);
    let over = runner::over_memory(&ctx);
    assert_eq!(over.len(), 1, "{over:?}");
    let sim = runner::device_memory(&ctx)
        .into_iter()
        .find(|d| d.name == "sim:0")
        .unwrap();
    assert!(sim.total() > 64 << 10 && sim.capacity == 64 << 10);
    assert!(over[0].starts_with("does not fit: sim:0") && over[0].contains("short"));
    assert!(runner::over_memory(&load(&roomy)).is_empty());
}

#[test]
fn argmax_is_the_first_largest_and_never_a_nan() {
    fn first_largest(v: &[f32]) -> i32 {
        let mut best: Option<usize> = None;
        for (i, x) in v.iter().enumerate() {
            if !x.is_nan() && best.is_none_or(|b| *x > v[b]) {
                best = Some(i);
            }
        }
        best.unwrap_or(0) as i32
    }
    let mut seed = 7u32;
    let mut next = || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) % 64
    };
    for len in [0, 1, 3, 15, 16, 17, 31, 32, 33, 100, 32000] {
        for _ in 0..20 {
            // few distinct values, so ties are common
            let mut v: Vec<f32> = (0..len).map(|_| next() as f32 - 32.0).collect();
            if len > 2 {
                v[len / 2] = f32::NAN;
                v[len - 1] = f32::NEG_INFINITY;
            }
            assert_eq!(runner::argmax(&v), first_largest(&v), "len {len}: {v:?}");
        }
    }
    assert_eq!(runner::argmax(&[f32::NEG_INFINITY; 40]), 0);
    assert_eq!(runner::argmax(&[f32::NAN, 1.0, 2.0, 2.0]), 2);
}
