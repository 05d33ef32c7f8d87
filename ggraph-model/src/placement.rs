//! Placement of a model's tensors across devices: how many layers go to
//! the GPUs, whether they are split by layer or by matrix rows, in what
//! proportions, where the KV cache follows, and per-tensor overrides.
//!
//! A plan is pure arithmetic over the model's tensor list: nothing is
//! allocated, so it can be computed (and checked against free memory)
//! before anything is loaded. Layers are measured in bytes, not counted.

use regex::Regex;

use super::desc::ModelDesc;
use ggraph_core::alloc::{normalise_shares, split_rows};
use ggraph_core::error::{Error, Result};
use ggraph_core::util::format_bytes;

/// How many layers go to the GPUs, counting the output layer as one (as
/// llama.cpp's `n_gpu_layers`): the last N layers are offloaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuLayers {
    /// Every layer, the output layer included (what a large `-ngl` gives).
    All,
    /// The last `n` layers, counted back from the output layer (`-ngl n`);
    /// more than `n_layer + 1` is all of them.
    Count(usize),
}

/// How offloaded layers are spread over several devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitMode {
    /// Everything offloaded on the main device.
    None,
    /// Whole layers per device, in contiguous ranges.
    Layer,
    /// The matrices of offloaded layers divided by rows across devices;
    /// the other tensors of those layers on the main device.
    Row,
}

/// The proportions of a split, with explicit units.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorSplit {
    /// Shares per device (normalised; [3, 1] puts three quarters on the
    /// first device).
    Fractions(Vec<f64>),
    /// Byte budgets per device: layers fill each device in turn, and a
    /// model that does not fit is an error before anything loads.
    Bytes(Vec<u64>),
}

/// Where an override sends the tensors it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverrideTarget {
    /// Host memory (llama.cpp's `-ot pattern=CPU`).
    Host,
    /// The device at this index in placement order.
    Device(usize),
}

/// A regular expression over tensor names and where its matches go;
/// overrides are tried in order and the first match wins.
#[derive(Clone, Debug)]
pub struct Override {
    /// Matched anywhere in a tensor's GGUF name unless anchored.
    pub pattern: Regex,
    /// Where the matching tensors go.
    pub target: OverrideTarget,
}

impl Override {
    /// An override (llama.cpp's `-ot pattern=buffer type`); an error when
    /// `pattern` is not a valid regular expression.
    pub fn new(pattern: &str, target: OverrideTarget) -> Result<Override> {
        let pattern = Regex::new(pattern)
            .map_err(|e| Error::InvalidArgument(format!("override pattern '{pattern}': {e}")))?;
        Ok(Override { pattern, target })
    }
}

/// Placement options, as llama.cpp's command line gives them.
#[derive(Clone, Debug)]
pub struct PlacementOptions {
    /// How many layers go to the GPUs (`-ngl`).
    pub n_gpu_layers: GpuLayers,
    /// How offloaded layers are spread over the devices (`-sm`).
    pub split_mode: SplitMode,
    /// None: proportional to each device's free memory.
    pub tensor_split: Option<TensorSplit>,
    /// The device (index in placement order) that holds everything
    /// offloaded with [`SplitMode::None`], and the tensors that are not
    /// split with [`SplitMode::Row`] (`-mg`).
    pub main_device: usize,
    /// The KV cache of a layer follows its weights' device (else: host).
    pub offload_kqv: bool,
    /// Ops whose weights are on the host may run on a GPU.
    pub op_offload: bool,
    /// Per-tensor homes that take precedence over the layer's (`-ot`).
    pub overrides: Vec<Override>,
    /// Weights go to their device's layout buffer type where it offers
    /// one for them (the CPU's repacked rows; llama.cpp's default, off
    /// with `--no-repack`). Host weights stay in GGUF's layout when a
    /// device would op-offload their products (op offload copies them
    /// from host memory), as llama.cpp keeps them in a GPU's pinned host
    /// memory then.
    pub repack: bool,
}

impl Default for PlacementOptions {
    fn default() -> Self {
        PlacementOptions {
            n_gpu_layers: GpuLayers::All,
            split_mode: SplitMode::Layer,
            tensor_split: None,
            main_device: 0,
            offload_kqv: true,
            op_offload: true,
            overrides: Vec::new(),
            repack: true,
        }
    }
}

/// The expert tensors of mixture-of-experts layers, their biases
/// included (llama.cpp's `LLM_FFN_EXPS_REGEX`).
const EXPERTS: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

impl PlacementOptions {
    /// Keeps every MoE expert tensor on the host (llama.cpp's `--cpu-moe`).
    pub fn cpu_moe(mut self) -> Self {
        self.overrides.push(
            Override::new(&format!(r"^blk\.\d+{EXPERTS}"), OverrideTarget::Host)
                .expect("valid pattern"),
        );
        self
    }

    /// Keeps the expert tensors of the first `n` layers on the host
    /// (llama.cpp's `--n-cpu-moe N`).
    pub fn n_cpu_moe(mut self, n: usize) -> Self {
        for il in 0..n {
            self.overrides.push(
                Override::new(&format!(r"^blk\.{il}{EXPERTS}"), OverrideTarget::Host)
                    .expect("valid pattern"),
            );
        }
        self
    }
}

/// Where one tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Home {
    /// Host memory.
    Host,
    /// The device at this index in placement order.
    Device(usize),
    /// Rows divided across the devices by `PlacementPlan::row_split`.
    Rows,
}

/// The result of placing a model.
#[derive(Clone, Debug)]
pub struct PlacementPlan {
    /// GPU-class devices planned for (the host not counted).
    pub n_devices: usize,
    /// One per tensor of the model, in its order.
    pub homes: Vec<Home>,
    /// Device of each layer (None = host), layers 0..n_layer then the
    /// output layer.
    pub layer_device: Vec<Option<usize>>,
    /// Device of each layer's KV cache (None = host).
    pub kv_device: Vec<Option<usize>>,
    /// Rows of every row-split matrix per device, as fractions (summing
    /// to 1); empty without row split.
    pub row_split: Vec<f64>,
    /// The tensors each override matched, in override order.
    pub override_matches: Vec<Vec<String>>,
    /// Per tensor: the tensor whose memory it shares, for a copy
    /// (`TensorSpec::copy_of`) placed in the same home as what it copies.
    pub shared_with: Vec<Option<usize>>,
    /// Weight bytes on the host (index 0) and on each device (1..).
    pub weight_bytes: Vec<u64>,
    /// The main device of the options the plan was made with.
    pub main_device: usize,
    /// Whether ops whose weights are on the host may run on a GPU, as the
    /// options said.
    pub op_offload: bool,
}

impl PlacementPlan {
    /// Where tensor `name` lives.
    pub fn home_of(&self, desc: &ModelDesc, name: &str) -> Option<Home> {
        desc.tensors
            .iter()
            .position(|t| t.name == name)
            .map(|i| self.homes[i])
    }
}

/// Places `desc` on `n_devices` devices with `free` bytes each (used for
/// the default split and the fit check; empty skips the check).
pub fn plan_placement(
    desc: &ModelDesc,
    n_devices: usize,
    free: &[u64],
    opts: &PlacementOptions,
) -> Result<PlacementPlan> {
    plan_placement_checked(desc, n_devices, free, opts, true)
}

/// As [`plan_placement`]; `check_free` false skips the free-memory check
/// (estimates report what does not fit rather than refusing it). Byte
/// budgets given in `tensor_split` are always checked.
pub fn plan_placement_checked(
    desc: &ModelDesc,
    n_devices: usize,
    free: &[u64],
    opts: &PlacementOptions,
    check_free: bool,
) -> Result<PlacementPlan> {
    let names: Vec<String> = (0..n_devices).map(|d| format!("device {d}")).collect();
    plan_placement_named(desc, &names, free, opts, check_free)
}

/// As [`plan_placement_checked`] on devices called `names` (one per
/// device, in placement order): errors that a device is short of memory
/// name it.
pub fn plan_placement_named(
    desc: &ModelDesc,
    names: &[String],
    free: &[u64],
    opts: &PlacementOptions,
    check_free: bool,
) -> Result<PlacementPlan> {
    let n_devices = names.len();
    let n_layer = desc.config.n_layer;
    if n_devices > 0 && opts.main_device >= n_devices {
        return Err(Error::InvalidArgument(format!(
            "main device {} does not exist ({n_devices} devices)",
            opts.main_device
        )));
    }
    if let Some(split) = &opts.tensor_split {
        let (n, unit) = match split {
            TensorSplit::Fractions(f) => (f.len(), "fractions"),
            TensorSplit::Bytes(b) => (b.len(), "byte budgets"),
        };
        if n != n_devices {
            return Err(Error::InvalidArgument(format!(
                "tensor split gives {n} {unit} for {n_devices} device(s): give one per device"
            )));
        }
    }
    for o in &opts.overrides {
        if let OverrideTarget::Device(d) = o.target
            && d >= n_devices
        {
            return Err(Error::InvalidArgument(format!(
                "override '{}' names device {d}; there are {n_devices}",
                o.pattern
            )));
        }
    }
    // layers in bytes (the output layer is layer n_layer)
    let mut layer_bytes = vec![0u64; n_layer + 1];
    for t in &desc.tensors {
        if let Some(l) = t.layer(n_layer) {
            layer_bytes[l.min(n_layer)] += t.nbytes();
        }
    }
    let n_gpu = if n_devices == 0 {
        0
    } else {
        match opts.n_gpu_layers {
            GpuLayers::All => n_layer + 1,
            GpuLayers::Count(n) => n.min(n_layer + 1),
        }
    };
    let first_gpu = n_layer + 1 - n_gpu;
    let mut layer_device: Vec<Option<usize>> = vec![None; n_layer + 1];
    let mut row_split = Vec::new();
    if n_gpu > 0 {
        match opts.split_mode {
            SplitMode::None => {
                for d in layer_device.iter_mut().skip(first_gpu) {
                    *d = Some(opts.main_device);
                }
            }
            SplitMode::Row => {
                for d in layer_device.iter_mut().skip(first_gpu) {
                    *d = Some(opts.main_device);
                }
                row_split = match &opts.tensor_split {
                    Some(TensorSplit::Fractions(f)) => normalise_shares(f)?,
                    Some(TensorSplit::Bytes(b)) => {
                        normalise_shares(&b.iter().map(|x| *x as f64).collect::<Vec<_>>())?
                    }
                    None if free.len() == n_devices => {
                        normalise_shares(&free.iter().map(|x| *x as f64).collect::<Vec<_>>())?
                    }
                    None => vec![1.0 / n_devices as f64; n_devices],
                };
            }
            SplitMode::Layer => {
                let layers: Vec<usize> = (first_gpu..=n_layer).collect();
                let assigned = match &opts.tensor_split {
                    Some(TensorSplit::Bytes(budgets)) => {
                        by_budget(&layers, &layer_bytes, budgets, names)?
                    }
                    // the user's shares count layers, as llama.cpp's
                    // -ts does
                    Some(TensorSplit::Fractions(f)) => {
                        by_count(layers.len(), &normalise_shares(f)?)
                    }
                    // by default, fill by free memory, weighing each
                    // layer by its bytes
                    None => {
                        let f = if free.len() == n_devices {
                            normalise_shares(
                                &free.iter().map(|x| (*x).max(1) as f64).collect::<Vec<_>>(),
                            )?
                        } else {
                            vec![1.0 / n_devices as f64; n_devices]
                        };
                        by_fraction(&layers, &layer_bytes, &f)
                    }
                };
                for (l, d) in layers.into_iter().zip(assigned) {
                    layer_device[l] = Some(d);
                }
            }
        }
    }
    // tensors: overrides first, then the layer's home
    let mut override_matches = vec![Vec::new(); opts.overrides.len()];
    let mut homes = Vec::with_capacity(desc.tensors.len());
    for t in &desc.tensors {
        let overridden = opts
            .overrides
            .iter()
            .position(|o| o.pattern.is_match(&t.name));
        let home = match overridden {
            Some(i) => {
                override_matches[i].push(t.name.clone());
                match opts.overrides[i].target {
                    OverrideTarget::Host => Home::Host,
                    OverrideTarget::Device(d) => Home::Device(d),
                }
            }
            None => match t.layer(n_layer).and_then(|l| layer_device[l]) {
                None => Home::Host,
                Some(d) if opts.split_mode == SplitMode::Row && t.is_matrix() => {
                    let _ = d;
                    Home::Rows
                }
                Some(d) => Home::Device(d),
            },
        };
        homes.push(home);
    }
    // a copy in the same home as its source is the same memory
    let shared_with: Vec<Option<usize>> = desc
        .tensors
        .iter()
        .zip(&homes)
        .map(|(t, h)| {
            let source = t.copy_of.as_ref()?;
            let src = desc.tensors.iter().position(|s| &s.name == source)?;
            (*h == homes[src] && *h != Home::Rows).then_some(src)
        })
        .collect();
    let mut weight_bytes = vec![0u64; n_devices + 1];
    for ((t, h), shared) in desc.tensors.iter().zip(&homes).zip(&shared_with) {
        if shared.is_some() {
            continue;
        }
        match h {
            Home::Host => weight_bytes[0] += t.nbytes(),
            Home::Device(d) => weight_bytes[d + 1] += t.nbytes(),
            Home::Rows => {
                let rows = split_rows(t.shape[1], &row_split, ROW_ALIGN);
                let row_bytes = t.nbytes() / t.shape[1] as u64;
                for (d, r) in rows.iter().enumerate() {
                    weight_bytes[d + 1] += *r as u64 * row_bytes;
                }
            }
        }
    }
    if let Some(TensorSplit::Bytes(budgets)) = &opts.tensor_split {
        check_fit(&weight_bytes, budgets, names, "its byte budget")?;
    } else if check_free && free.len() == n_devices {
        check_fit(&weight_bytes, free, names, "its free memory")?;
    }
    let kv_device = (0..n_layer)
        .map(|l| {
            if opts.offload_kqv {
                layer_device[l]
            } else {
                None
            }
        })
        .collect();
    Ok(PlacementPlan {
        n_devices,
        homes,
        layer_device,
        kv_device,
        row_split,
        override_matches,
        shared_with,
        weight_bytes,
        main_device: opts.main_device,
        op_offload: opts.op_offload,
    })
}

/// Rows of row-split matrices come in multiples of this (GPU kernel tiles).
pub const ROW_ALIGN: usize = 32;

/// What to do when weights do not fit.
const FIT_HINT: &str = "offload fewer layers (n_gpu_layers) or change tensor_split";

fn check_fit(weight_bytes: &[u64], limits: &[u64], names: &[String], what: &str) -> Result<()> {
    for (d, (&need, &have)) in weight_bytes[1..].iter().zip(limits).enumerate() {
        if need > have {
            let short = need - have;
            return Err(Error::OutOfMemory {
                buffer_type: format!(
                    "{} (its weights alone need {}, {short} bytes ({}) more than {what}: {FIT_HINT})",
                    names[d],
                    format_bytes(need),
                    format_bytes(short),
                ),
                requested_bytes: need,
                available_bytes: have,
            });
        }
    }
    Ok(())
}

/// Contiguous ranges by cumulative bytes: a layer goes to the device whose
/// share of the total its midpoint falls in.
fn by_fraction(layers: &[usize], bytes: &[u64], f: &[f64]) -> Vec<usize> {
    let total: u64 = layers.iter().map(|&l| bytes[l]).sum();
    let mut bounds = Vec::with_capacity(f.len());
    let mut acc = 0.0;
    for x in f {
        acc += x;
        bounds.push(acc);
    }
    let mut before = 0u64;
    layers
        .iter()
        .map(|&l| {
            let mid = (before as f64 + bytes[l] as f64 / 2.0) / total.max(1) as f64;
            before += bytes[l];
            bounds
                .iter()
                .position(|&b| mid <= b + 1e-12)
                .unwrap_or(f.len() - 1)
        })
        .collect()
}

/// llama.cpp's layer split for shares `f` (normalised): offloaded layer
/// `i` of `n` goes to the first device whose cumulative share exceeds
/// `i / n` (`llama_model::load_tensors`' upper bound), so the shares count
/// layers, whatever their bytes.
fn by_count(n: usize, f: &[f64]) -> Vec<usize> {
    let mut bounds = Vec::with_capacity(f.len());
    let mut acc = 0.0f32;
    for x in f {
        acc += *x as f32;
        bounds.push(acc);
    }
    (0..n)
        .map(|i| {
            let x = i as f32 / n as f32;
            bounds.iter().filter(|&&b| b <= x).count().min(f.len() - 1)
        })
        .collect()
}

/// Contiguous ranges filling each device's byte budget in turn.
fn by_budget(
    layers: &[usize],
    bytes: &[u64],
    budgets: &[u64],
    names: &[String],
) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(layers.len());
    let mut d = 0;
    let mut used = 0u64;
    for &l in layers {
        while d < budgets.len() && used + bytes[l] > budgets[d] {
            d += 1;
            used = 0;
        }
        if d == budgets.len() {
            let rest: u64 = layers.iter().filter(|&&x| x >= l).map(|&x| bytes[x]).sum();
            return Err(Error::OutOfMemory {
                buffer_type: format!(
                    "the byte budgets of {} (layer {l} and after, {rest} bytes ({}) more, do not fit: {FIT_HINT})",
                    names.join(", "),
                    format_bytes(rest)
                ),
                requested_bytes: layers.iter().map(|&x| bytes[x]).sum(),
                available_bytes: budgets.iter().sum(),
            });
        }
        used += bytes[l];
        out.push(d);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::ModelConfig;
    use ggraph_core::dtype::DType;

    fn model() -> ModelDesc {
        ModelDesc::random(ModelConfig::dense(1000, 64, 8, 4, 2, 128), DType::F32, 1).unwrap()
    }

    #[test]
    fn the_last_n_layers_go_to_the_gpus_counting_the_output() {
        let m = model();
        let o = PlacementOptions {
            n_gpu_layers: GpuLayers::Count(3),
            ..Default::default()
        };
        let p = plan_placement(&m, 1, &[], &o).unwrap();
        assert_eq!(
            p.layer_device,
            [
                None,
                None,
                None,
                None,
                None,
                None,
                Some(0),
                Some(0),
                Some(0)
            ]
        );
        assert_eq!(p.home_of(&m, "blk.5.attn_q.weight"), Some(Home::Host));
        assert_eq!(p.home_of(&m, "blk.6.attn_q.weight"), Some(Home::Device(0)));
        assert_eq!(p.home_of(&m, "output.weight"), Some(Home::Device(0)));
        assert_eq!(p.home_of(&m, "token_embd.weight"), Some(Home::Host));
        assert_eq!(p.kv_device[6], Some(0));
    }

    #[test]
    fn fractions_split_layers_by_count_as_llama_cpp_does() {
        let m = model();
        let o = PlacementOptions {
            tensor_split: Some(TensorSplit::Fractions(vec![3.0, 1.0])),
            ..Default::default()
        };
        let p = plan_placement(&m, 2, &[], &o).unwrap();
        let d: Vec<usize> = p.layer_device.iter().map(|x| x.unwrap()).collect();
        // llama.cpp: layer i of n on the first device whose cumulative
        // share exceeds i / n
        let n = d.len();
        let want: Vec<usize> = (0..n)
            .map(|i| usize::from(i as f32 / n as f32 >= 0.75))
            .collect();
        assert_eq!(d, want);
    }

    /// Bytes of each layer (the output layer last).
    fn layer_bytes(m: &ModelDesc) -> Vec<u64> {
        let n = m.config.n_layer;
        let mut out = vec![0; n + 1];
        for t in &m.tensors {
            if let Some(l) = t.layer(n) {
                out[l] += t.nbytes();
            }
        }
        out
    }

    /// Layers split in contiguous ranges whose cumulative bytes are within
    /// half a layer of the cumulative shares `f` (a layer goes where its
    /// middle falls).
    fn assert_split_by_bytes(m: &ModelDesc, p: &PlacementPlan, f: &[f64]) {
        let bytes = layer_bytes(m);
        let d: Vec<usize> = p.layer_device.iter().map(|x| x.unwrap()).collect();
        assert!(d.windows(2).all(|w| w[0] <= w[1]), "contiguous: {d:?}");
        let total: u64 = bytes.iter().sum();
        let half_layer = *bytes.iter().max().unwrap() as f64 / 2.0;
        let sum: f64 = f.iter().sum();
        let (mut want, mut got) = (0.0, 0u64);
        for (dev, share) in f.iter().enumerate() {
            want += share / sum * total as f64;
            got += p.weight_bytes[dev + 1];
            assert!(
                (got as f64 - want).abs() <= half_layer + 1.0,
                "devices 0..={dev} hold {got} bytes; their share is {want:.0} (layers {d:?})"
            );
            assert!(p.weight_bytes[dev + 1] > 0, "device {dev} is empty: {d:?}");
        }
        assert_eq!(got, total);
    }

    #[test]
    fn the_default_layer_split_follows_free_memory() {
        let m =
            ModelDesc::random(ModelConfig::dense(64, 64, 16, 4, 2, 128), DType::F32, 1).unwrap();
        let gib = 1u64 << 30;
        for free in [
            vec![3 * gib, gib],
            vec![gib, 3 * gib],
            vec![gib, 2 * gib, gib],
        ] {
            let p = plan_placement(&m, free.len(), &free, &PlacementOptions::default()).unwrap();
            let f: Vec<f64> = free.iter().map(|&x| x as f64).collect();
            assert_split_by_bytes(&m, &p, &f);
        }
    }

    #[test]
    fn shares_count_layers_and_free_memory_weighs_their_bytes() {
        // layers 0 and 1 in f32, the others in q4_0 (about 7 times smaller)
        let mut m =
            ModelDesc::random(ModelConfig::dense(64, 64, 8, 4, 2, 128), DType::F32, 1).unwrap();
        for t in &mut m.tensors {
            if t.is_matrix() && !t.name.starts_with("blk.0.") && !t.name.starts_with("blk.1.") {
                t.dtype = DType::Q4_0;
            }
        }
        let bytes = layer_bytes(&m);
        assert!(bytes[0] > 5 * bytes[2], "{bytes:?}");
        // -ts 1,1: half of the nine layers each, as llama.cpp counts
        let o = PlacementOptions {
            tensor_split: Some(TensorSplit::Fractions(vec![1.0, 1.0])),
            ..Default::default()
        };
        let p = plan_placement(&m, 2, &[], &o).unwrap();
        let on_first = p.layer_device.iter().filter(|d| **d == Some(0)).count();
        assert_eq!(on_first, 5, "{:?}", p.layer_device);
        // equal free memory, no shares: half of the bytes each
        let gib = 1u64 << 30;
        let p = plan_placement(&m, 2, &[gib, gib], &PlacementOptions::default()).unwrap();
        assert_split_by_bytes(&m, &p, &[1.0, 1.0]);
    }

    #[test]
    fn byte_budgets_place_what_they_say_or_fail_naming_the_shortfall() {
        let m = model();
        let per_layer = m
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("blk.0."))
            .map(|t| t.nbytes())
            .sum::<u64>();
        let o = PlacementOptions {
            n_gpu_layers: GpuLayers::Count(4),
            tensor_split: Some(TensorSplit::Bytes(vec![2 * per_layer + 10, u64::MAX / 4])),
            ..Default::default()
        };
        let p = plan_placement(&m, 2, &[], &o).unwrap();
        assert_eq!(&p.layer_device[5..], &[Some(0), Some(0), Some(1), Some(1)]);
        assert!(p.weight_bytes[1] <= 2 * per_layer + 10);
        let tight = PlacementOptions {
            tensor_split: Some(TensorSplit::Bytes(vec![per_layer, per_layer])),
            ..Default::default()
        };
        let err = plan_placement(&m, 2, &[], &tight).unwrap_err().to_string();
        assert!(err.contains("do not fit"), "{err}");
        assert!(err.contains("device 0, device 1"), "{err}");
        assert!(err.contains("tensor_split"), "{err}");
    }

    #[test]
    fn a_tensor_split_must_give_one_share_per_device_in_every_mode_and_unit() {
        let m = model();
        for mode in [SplitMode::None, SplitMode::Layer, SplitMode::Row] {
            for n in [1, 3] {
                for split in [
                    TensorSplit::Fractions(vec![1.0; n]),
                    TensorSplit::Bytes(vec![u64::MAX / 8; n]),
                ] {
                    let o = PlacementOptions {
                        split_mode: mode,
                        tensor_split: Some(split.clone()),
                        ..Default::default()
                    };
                    match plan_placement(&m, 2, &[], &o) {
                        Err(Error::InvalidArgument(e)) => {
                            assert!(e.contains(&format!("{n} ")), "{e}");
                            assert!(e.contains("2 device(s)"), "{e}");
                        }
                        other => panic!("{mode:?} {split:?}: expected an error, got {other:?}"),
                    }
                }
            }
            // one share per device is accepted in both units
            for split in [
                TensorSplit::Fractions(vec![1.0, 1.0]),
                TensorSplit::Bytes(vec![u64::MAX / 8; 2]),
            ] {
                let o = PlacementOptions {
                    split_mode: mode,
                    tensor_split: Some(split),
                    ..Default::default()
                };
                plan_placement(&m, 2, &[], &o).unwrap();
            }
        }
    }

    #[test]
    fn weights_beyond_free_memory_fail_before_loading() {
        let m = model();
        let err = plan_placement(&m, 1, &[1000], &PlacementOptions::default()).unwrap_err();
        match err {
            Error::OutOfMemory {
                buffer_type,
                requested_bytes,
                available_bytes,
            } => {
                assert!(buffer_type.contains("device 0"), "{buffer_type}");
                let short = requested_bytes - available_bytes;
                assert!(short > 0);
                assert!(
                    buffer_type.contains(&format!("{short} bytes")),
                    "{buffer_type}"
                );
                assert!(buffer_type.contains("n_gpu_layers"), "{buffer_type}");
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn overrides_first_match_wins_and_are_listed() {
        let m = model();
        let o = PlacementOptions {
            overrides: vec![
                Override::new(r"blk\.1\.ffn_(gate|up|down)", OverrideTarget::Device(1)).unwrap(),
                Override::new(r"ffn_down", OverrideTarget::Host).unwrap(),
            ],
            ..Default::default()
        };
        let p = plan_placement(&m, 2, &[], &o).unwrap();
        assert_eq!(
            p.override_matches[0],
            [
                "blk.1.ffn_gate.weight",
                "blk.1.ffn_up.weight",
                "blk.1.ffn_down.weight"
            ]
        );
        assert_eq!(
            p.override_matches[1].len(),
            7,
            "every other layer's ffn_down"
        );
        assert_eq!(
            p.home_of(&m, "blk.1.ffn_down.weight"),
            Some(Home::Device(1))
        );
        assert_eq!(p.home_of(&m, "blk.2.ffn_down.weight"), Some(Home::Host));
    }

    #[test]
    fn row_split_divides_matrices_and_keeps_the_rest_on_the_main_device() {
        let m = model();
        let o = PlacementOptions {
            split_mode: SplitMode::Row,
            tensor_split: Some(TensorSplit::Fractions(vec![1.0, 1.0])),
            main_device: 1,
            ..Default::default()
        };
        let p = plan_placement(&m, 2, &[], &o).unwrap();
        assert_eq!(p.home_of(&m, "blk.0.attn_q.weight"), Some(Home::Rows));
        assert_eq!(
            p.home_of(&m, "blk.0.attn_norm.weight"),
            Some(Home::Device(1))
        );
        assert_eq!(split_rows(100, &p.row_split, 32), vec![64, 36]);
        assert_eq!(split_rows(10, &[0.5, 0.5], 32), vec![0, 10]);
    }

    #[test]
    fn moe_experts_can_stay_on_the_host() {
        let mut c = ModelConfig::dense(100, 64, 3, 4, 2, 128);
        c.n_expert = 4;
        c.n_expert_used = 2;
        let m = ModelDesc::random(c, DType::F32, 1).unwrap();
        let p = plan_placement(&m, 1, &[], &PlacementOptions::default().cpu_moe()).unwrap();
        assert_eq!(p.override_matches[0].len(), 9);
        assert_eq!(p.home_of(&m, "blk.2.ffn_up_exps.weight"), Some(Home::Host));
        assert_eq!(
            p.home_of(&m, "blk.2.ffn_gate_inp.weight"),
            Some(Home::Device(0))
        );
        let p = plan_placement(&m, 1, &[], &PlacementOptions::default().n_cpu_moe(1)).unwrap();
        assert_eq!(p.home_of(&m, "blk.0.ffn_up_exps.weight"), Some(Home::Host));
        assert_eq!(
            p.home_of(&m, "blk.1.ffn_up_exps.weight"),
            Some(Home::Device(0))
        );
    }
}
