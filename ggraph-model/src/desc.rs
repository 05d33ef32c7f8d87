//! A model as a list of tensors: names, types, shapes, and where their
//! bytes come from (a GGUF file, a seeded generator, or nowhere for dry
//! runs on a header alone).

use std::borrow::Cow;
use std::sync::Arc;

use super::arch::{ModelConfig, check_tensors, read_config};
use super::gguf::{GgufHeader, ModelFile};
use super::tokenizer::Tokenizer;
use ggraph_core::dtype::DType;
use ggraph_core::error::{Error, Result};
use ggraph_core::quant;
use ggraph_core::util::Rng;

/// One tensor of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    /// GGUF name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Element type, quantised or not.
    pub dtype: DType,
    /// ggml order, in elements: `shape[0]` is the row length.
    pub shape: Vec<usize>,
    /// A second copy of another tensor of the model, under this name: the
    /// token embeddings as the output matrix of a model with tied
    /// embeddings, so that the logits are computed where the output layer
    /// lives (llama.cpp duplicates them the same way). Where both copies
    /// land in the same buffer type, they share memory.
    pub copy_of: Option<String>,
}

impl TensorSpec {
    /// Bytes of the tensor's data (rows times `dtype`'s row size); 0 when a
    /// row is not whole blocks of `dtype`.
    pub fn nbytes(&self) -> u64 {
        let n0 = self.shape.first().copied().unwrap_or(1);
        let rows: usize = self.shape.iter().skip(1).product();
        (self.dtype.row_size(n0).unwrap_or(0) * rows) as u64
    }

    /// The layer this tensor belongs to: `blk.N.` gives N; the output
    /// weights count as layer `n_layer` (as llama.cpp counts them); the
    /// embedding and anything else as `None`.
    pub fn layer(&self, n_layer: usize) -> Option<usize> {
        ModelConfig::layer_of(&self.name)
            .or_else(|| self.name.starts_with("output").then_some(n_layer))
    }

    /// The name of the tensor whose bytes this one holds: its own, or
    /// that of the tensor it copies.
    pub fn stored_as(&self) -> &str {
        self.copy_of.as_deref().unwrap_or(&self.name)
    }

    /// A 2-D matrix a mul_mat reads (rows can be split across devices).
    pub fn is_matrix(&self) -> bool {
        self.shape.len() == 2
            && self.shape[1] > 1
            && !self.name.contains("token_embd")
            && !ModelConfig::is_table(&self.name)
    }
}

/// Where a model's tensor bytes come from.
#[derive(Clone)]
pub enum WeightData {
    /// A GGUF file with its data.
    File(Arc<ModelFile>),
    /// Values from a generator seeded per tensor name (tests, benches).
    Random {
        /// Mixed with each tensor's name to seed its generator.
        seed: u64,
    },
    /// No data: placement, estimates and dry runs only.
    None,
}

impl WeightData {
    /// Bytes of a tensor's data, as stored: borrowed from a file's
    /// mapping, generated for `Random`.
    pub fn bytes_of(&self, t: &TensorSpec) -> Result<Cow<'_, [u8]>> {
        match self {
            WeightData::File(f) => Ok(Cow::Borrowed(f.tensor_data(t.stored_as())?)),
            WeightData::Random { seed } => {
                let mut rng = Rng::new(name_seed(*seed, t.stored_as()));
                let n: usize = t.shape.iter().product();
                let (lo, hi) = ModelConfig::random_range(t.stored_as(), &t.shape);
                let values = rng.vec(n, lo, hi);
                quant::quantize(t.dtype, &values).map(Cow::Owned)
            }
            WeightData::None => Err(Error::InvalidArgument(format!(
                "tensor '{}' has no data: this model was opened from a header only",
                t.name
            ))),
        }
    }

    /// Says that `t`'s bytes have been copied where they will be read:
    /// a file gives back its pages ([`ModelFile::release`]).
    pub fn release(&self, t: &TensorSpec) {
        if let WeightData::File(f) = self {
            f.release(t.stored_as());
        }
    }
}

/// A model: its hyperparameters and tensors.
#[derive(Clone)]
pub struct ModelDesc {
    /// The hyperparameters, read from the header or given.
    pub config: ModelConfig,
    /// Every tensor, in GGUF order, then the output copy of the token
    /// embeddings when the model ties them.
    pub tensors: Vec<TensorSpec>,
    /// Where the tensors' bytes come from.
    pub data: WeightData,
    /// The GGUF metadata the model came from: its vocabulary and chat
    /// template (`None` for a random model without one).
    pub metadata: Option<Arc<GgufHeader>>,
}

/// The tokenizer of a model's metadata, or why there is none.
pub(crate) fn tokenizer_of(metadata: Option<&GgufHeader>) -> Result<Tokenizer> {
    match metadata {
        Some(h) => Tokenizer::from_header(h),
        None => Err(Error::InvalidArgument(
            "this model has no vocabulary: give token ids".into(),
        )),
    }
}

/// `tensors` with the output matrix a model with tied embeddings reads:
/// a copy of the token embeddings named `output.weight` (none for an
/// embedding model, which has no output layer).
fn with_output_copy(config: &ModelConfig, mut tensors: Vec<TensorSpec>) -> Vec<TensorSpec> {
    let has_output = config.arch.embeddings_only || tensors.iter().any(|t| t.name == OUTPUT);
    if let Some(embd) = tensors.iter().find(|t| t.name == EMBEDDINGS)
        && !has_output
    {
        let copy = TensorSpec {
            name: OUTPUT.into(),
            copy_of: Some(EMBEDDINGS.into()),
            ..embd.clone()
        };
        tensors.push(copy);
    }
    tensors
}

const EMBEDDINGS: &str = "token_embd.weight";
const OUTPUT: &str = "output.weight";

fn name_seed(seed: u64, name: &str) -> u64 {
    name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

impl ModelDesc {
    /// The tensors of a GGUF header (with the file's data, if any).
    pub fn from_header(h: &GgufHeader, file: Option<Arc<ModelFile>>) -> Result<ModelDesc> {
        let config = read_config(h)?;
        let mut tensors = Vec::with_capacity(h.tensors().len());
        // a prediction head's layers are not the model's: not loaded
        for t in h
            .tensors()
            .iter()
            .filter(|t| !config.is_extra_layer_tensor(&t.name))
        {
            let dtype = t.ggml_type.dtype().ok_or_else(|| Error::Unsupported {
                device: "ggraph".into(),
                what: format!("tensor '{}' of type {}", t.name, t.ggml_type),
            })?;
            tensors.push(TensorSpec {
                name: t.name.clone(),
                dtype,
                shape: t.shape.iter().map(|&d| d as usize).collect(),
                copy_of: None,
            });
        }
        check_tensors(
            &config,
            tensors
                .iter()
                .map(|t| (t.name.as_str(), t.shape.as_slice())),
        )?;
        let tensors = with_output_copy(&config, tensors);
        let data = match file {
            Some(f) if f.has_data() => WeightData::File(f),
            _ => WeightData::None,
        };
        Ok(ModelDesc {
            config,
            tensors,
            data,
            metadata: Some(Arc::new(h.clone())),
        })
    }

    /// The model's tokenizer, from the vocabulary in its metadata.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        tokenizer_of(self.metadata.as_deref())
    }

    /// A GGUF file opened with its data.
    pub fn from_file(file: ModelFile) -> Result<ModelDesc> {
        let file = Arc::new(file);
        ModelDesc::from_header(&file.header().clone(), Some(file))
    }

    /// A model of `config` with random weights of `dtype` (norms in F32;
    /// matrices whose rows are not whole blocks of `dtype` in the type
    /// llama-quantize falls back to, [`DType::for_row_len`]).
    pub fn random(config: ModelConfig, dtype: DType, seed: u64) -> Result<ModelDesc> {
        config.validate()?;
        let tensors = config
            .weight_shapes()
            .into_iter()
            .map(|(name, shape)| {
                let t = if shape.len() == 1 || ModelConfig::stays_f32(&name) {
                    DType::F32
                } else {
                    dtype.for_row_len(shape[0])
                };
                TensorSpec {
                    name,
                    dtype: t,
                    shape,
                    copy_of: None,
                }
            })
            .collect();
        let tensors = with_output_copy(&config, tensors);
        Ok(ModelDesc {
            config,
            tensors,
            data: WeightData::Random { seed },
            metadata: None,
        })
    }

    /// Removes the data source (for dry runs of a model one has).
    pub fn without_data(&self) -> ModelDesc {
        ModelDesc {
            data: WeightData::None,
            ..self.clone()
        }
    }

    /// The tensor with GGUF name `name`, if the model has one.
    pub fn tensor(&self, name: &str) -> Option<&TensorSpec> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Bytes of the model's tensors as stored (copies not counted).
    pub fn total_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.copy_of.is_none())
            .map(|t| t.nbytes())
            .sum()
    }

    /// Bytes of a tensor's data, as stored (for `Random`: generated).
    pub fn bytes_of(&self, t: &TensorSpec) -> Result<Vec<u8>> {
        self.data.bytes_of(t).map(Cow::into_owned)
    }

    /// Whether tensor bytes are available.
    pub fn has_data(&self) -> bool {
        !matches!(self.data, WeightData::None)
    }
}
