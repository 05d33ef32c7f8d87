//! Writes the seeds of the `model_plan` target: a two-layer model of every
//! architecture, its header without the vocabulary (the plan never reads
//! it), behind an options byte (see model_plan.rs) that differs from one
//! architecture to the next: 0 (the CPU alone, flash attention), 5 (one
//! simulated GPU, standard attention), 2 (two GPUs split by layer) or 3
//! (split by row).
//!
//!     cargo run --manifest-path fuzz/Cargo.toml --bin model_plan_seeds
//!
//! Not a fuzz target: scripts/fuzz does not build it.

use ggraph_core::DType;
use ggraph_model::arch::{ARCHITECTURES, ModelConfig};
use ggraph_model::desc::ModelDesc;
use ggraph_model::gguf::{GgufHeader, encode_header};
use ggraph_model::make::{make_vocab, model_gguf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/model_plan");
    std::fs::create_dir_all(&dir)?;
    for (i, arch) in ARCHITECTURES.iter().enumerate() {
        let n_vocab = 400;
        let config = ModelConfig::new(arch, n_vocab, 64, 2, 4, 2, 128);
        let dtype = [DType::Q4_0, DType::Q8_0, DType::F16, DType::Q4_K][i % 4];
        let desc = ModelDesc::random(config, dtype, 1)?;
        let full = model_gguf(&desc, make_vocab(n_vocab))?.header()?;
        let kv = full
            .kv()
            .iter()
            .filter(|(k, _)| !k.starts_with("tokenizer."))
            .cloned()
            .collect();
        let h = GgufHeader::new(full.version(), kv, full.tensors().to_vec())?;
        let bytes = encode_header(&h)?;
        let flags = [0u8, 5, 2, 3][i % 4];
        let path = dir.join(format!("{}-{dtype}-{flags}.bin", arch.name));
        let mut seed = vec![flags];
        seed.extend_from_slice(&bytes);
        std::fs::write(&path, seed)?;
        println!("{} ({} bytes)", path.display(), bytes.len() + 1);
    }
    Ok(())
}
