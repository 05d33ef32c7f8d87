//! ggraph's tensors beside llama.cpp's, op by op, for one prompt: where two
//! runs of the same model part, and by how much.
//!
//! llama.cpp's side comes from `ggraph/tests/fixtures/real_gguf/tensors.cpp`
//! (its eval callback over libllama), which writes every named F32 tensor of
//! a decode to a directory; this program decodes the same token ids with
//! ggraph on the CPU, observes the nodes of the same names (`attn_norm-0`,
//! `attn_out-0`, `ffn_inp-0`, `ffn_norm-0`, `ffn_out-0`, `l_out-0`, ...,
//! `result_norm`, `result_output`) and prints, in the order ggraph computes
//! them, the largest absolute difference and the RMS difference relative
//! to llama.cpp's RMS.
//!
//! ```text
//! tensors MODEL.gguf 0 DIR 1,4093,198            (llama.cpp, flash attention off)
//! cargo run --release -p ggraph-examples --example compare_tensors -- MODEL.gguf DIR 1,4093,198 [--flash] [--out OURS]
//! ```
//!
//! `--out OURS` also writes ggraph's tensors to the directory OURS, as
//! `tensors` writes llama.cpp's. `--embeddings` computes embeddings (an
//! encoder's, pooled as the model says), as `tensors ... embd` does.
//!
//! `GGRAPH_CPU_ISA` and `GGRAPH_CPU_REPACK=0` choose ggraph's CPU path as
//! they do for the tools.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ggraph::DType;
use ggraph::batch::Batch;
use ggraph::context::{Context, ContextParams};
use ggraph::ir::{Graph, TensorId};
use ggraph::model::arch::Attention;
use ggraph::model::loaded::{LoadMode, Model};
use ggraph::model::placement::PlacementOptions;
use ggraph::runner;
use ggraph::sched::EvalCallback;
use ggraph_cpu::CpuDevice;

/// llama.cpp's tensors: name to shape, in `index.txt`.
fn read_index(dir: &Path) -> Result<HashMap<String, [usize; 4]>, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(dir.join("index.txt"))?;
    let mut out = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.rsplitn(5, ' ').collect();
        if fields.len() != 5 {
            return Err(format!("index.txt: bad line {line:?}").into());
        }
        let ne = [
            fields[3].parse()?,
            fields[2].parse()?,
            fields[1].parse()?,
            fields[0].parse()?,
        ];
        out.insert(fields[4].to_string(), ne);
    }
    Ok(out)
}

/// Observed nodes: name and values, in the order they ran.
type Seen = Arc<Mutex<Vec<(String, Vec<f32>)>>>;

/// The eval callback: keeps the nodes llama.cpp named too.
struct Observed {
    wanted: HashMap<String, [usize; 4]>,
    seen: Seen,
}

impl EvalCallback for Observed {
    fn wants(&mut self, graph: &Graph, node: TensorId) -> bool {
        self.wanted.contains_key(&*graph.tensor(node).name)
    }

    fn observe(&mut self, graph: &Graph, node: TensorId) -> bool {
        if let Ok(values) = graph.read_f32(node) {
            let name = graph.tensor(node).name.to_string();
            self.seen.lock().unwrap().push((name, values));
        }
        true
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flash = args.iter().any(|a| a == "--flash");
    let embeddings = args.iter().any(|a| a == "--embeddings");
    let out_dir = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let plain: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with('-') && (*i == 0 || args[i - 1] != "--out"))
        .map(|(_, a)| a)
        .collect();
    let [model_path, dir, ids] = plain[..] else {
        eprintln!("usage: compare_tensors MODEL.gguf DIR IDS [--flash]   (see the head comment)");
        return Ok(());
    };
    let dir = PathBuf::from(dir);
    let ids: Vec<i32> = ids.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let wanted = read_index(&dir)?;

    let desc = runner::open_model(model_path)?;
    let model = Model::load(
        &desc,
        &[],
        CpuDevice::new(),
        &PlacementOptions::default(),
        LoadMode::Real,
        None,
    )?;
    let mut ctx = Context::new(
        Arc::new(model),
        ContextParams {
            n_ctx: 512,
            n_batch: 512,
            n_ubatch: 512,
            attention: if flash {
                Attention::Flash
            } else {
                Attention::Standard
            },
            k_type: DType::F16,
            v_type: DType::F16,
            embeddings,
            ..ContextParams::default()
        },
    )?;
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    ctx.scheduler_mut()
        .set_eval_callback(Some(Box::new(Observed {
            wanted: wanted.clone(),
            seen: seen.clone(),
        })));
    // the last token's logits, as llama_batch_get_one asks for them
    ctx.decode(&Batch::tokens(&ids))?;

    println!("{:<24} {:>12} {:>12}", "tensor", "max |d|", "rms d / rms");
    if let Some(out) = &out_dir {
        std::fs::create_dir_all(out)?;
    }
    for (name, ours) in seen.lock().unwrap().iter() {
        if let Some(out) = &out_dir {
            let bytes: Vec<u8> = ours.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(out.join(format!("{name}.f32")), bytes)?;
        }
        let theirs = std::fs::read(dir.join(format!("{name}.f32")))?;
        let theirs: Vec<f32> = theirs
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if theirs.len() != ours.len() {
            println!(
                "{name:<24} sizes differ: {} here, {} in llama.cpp's {:?}",
                ours.len(),
                theirs.len(),
                wanted[name]
            );
            continue;
        }
        let (mut max, mut d2, mut t2) = (0f64, 0f64, 0f64);
        for (a, b) in ours.iter().zip(&theirs) {
            let d = (*a as f64 - *b as f64).abs();
            max = max.max(d);
            d2 += d * d;
            t2 += (*b as f64) * (*b as f64);
        }
        let rel = if t2 > 0.0 {
            (d2 / t2).sqrt()
        } else {
            d2.sqrt()
        };
        println!("{name:<24} {max:>12.6} {rel:>12.3e}");
    }
    Ok(())
}
