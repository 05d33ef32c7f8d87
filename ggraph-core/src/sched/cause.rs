//! Why a tensor runs where it runs: every assignment the scheduler makes
//! records its cause (the pass and the rule) as plain data.

use std::fmt;
use std::sync::Mutex;

use crate::ir::TensorId;

/// `name` as a `&'static str`, each distinct name stored once per process
/// (buffer type and policy names: a handful), so that causes are plain
/// copyable data: recording one costs no allocation or reference count.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(n);
    n
}

/// Index of a backend in the scheduler's priority list (0 is first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(pub u16);

impl BackendId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Which pass decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pass {
    Manual,
    RowSplit,
    WeightsLocation,
    Expansion,
    Upgrade,
    CopyInsertion,
}

impl Pass {
    pub fn number(self) -> u8 {
        match self {
            Pass::Manual | Pass::RowSplit => 0,
            Pass::WeightsLocation => 1,
            Pass::Expansion => 2,
            Pass::Upgrade => 3,
            Pass::CopyInsertion => 4,
        }
    }
}

/// Direction of an expansion sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Down,
    Up,
}

/// The rule behind one assignment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cause {
    /// Placed by the user (`set_tensor_backend`).
    Manual,
    /// Gathers the row parts of a row-split weight on the device whose
    /// memory is `buffer_type` (the main device).
    RowSplitGather {
        weight: TensorId,
        buffer_type: &'static str,
    },
    /// Its memory already lives in a buffer of a type this backend owns.
    Allocated { buffer_type: &'static str },
    /// A view of a tensor whose memory lives there.
    ViewOfAllocated {
        base: TensorId,
        buffer_type: &'static str,
    },
    /// A graph input: inputs start on the host.
    GraphInput,
    /// It reads a weight that lives there.
    WeightSource {
        weight: TensorId,
        buffer_type: &'static str,
    },
    /// Its weight is in host memory, and this device's op-offload policy
    /// asked for the op anyway.
    OpOffload {
        weight: TensorId,
        policy: &'static str,
    },
    /// Spread from an assigned neighbour so that chains stay together.
    Expanded {
        from: TensorId,
        direction: Direction,
        gpu_phase: bool,
    },
    /// Moved from a lower-priority backend: this one runs the op and reads
    /// every source where it lies.
    Upgraded { from: BackendId },
    /// Nothing claimed it; this backend supports the op and most of its
    /// sources' memory.
    MostSupportedInputs { supported: usize, of: usize },
    /// A source placed with the node that reads it.
    SourceOfConsumer { consumer: TensorId },
    /// A view placed with its base.
    ViewOfBase { base: TensorId },
    /// The backend the rules chose refuses the op; this is the next one
    /// that runs it.
    Fallback { refused_by: BackendId },
    /// A copy the scheduler made for a split on this backend.
    InputCopy { source: TensorId },
    /// The scheduler has one backend, and it runs the op.
    OnlyBackend,
}

impl Cause {
    pub fn pass(&self) -> Pass {
        match self {
            Cause::Manual => Pass::Manual,
            Cause::RowSplitGather { .. } => Pass::RowSplit,
            Cause::Allocated { .. }
            | Cause::ViewOfAllocated { .. }
            | Cause::GraphInput
            | Cause::WeightSource { .. }
            | Cause::OpOffload { .. } => Pass::WeightsLocation,
            Cause::Expanded { .. } | Cause::OnlyBackend => Pass::Expansion,
            Cause::Upgraded { .. } | Cause::MostSupportedInputs { .. } | Cause::Fallback { .. } => {
                Pass::Upgrade
            }
            Cause::SourceOfConsumer { .. } | Cause::ViewOfBase { .. } | Cause::InputCopy { .. } => {
                Pass::CopyInsertion
            }
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pass {}: ", self.pass().number())?;
        match self {
            Cause::Manual => write!(f, "placed by the user"),
            Cause::RowSplitGather {
                weight,
                buffer_type,
            } => write!(
                f,
                "row split: gathers the row parts of weight {weight} where {buffer_type} is"
            ),
            Cause::Allocated { buffer_type } => write!(f, "its memory is in {buffer_type}"),
            Cause::ViewOfAllocated { base, buffer_type } => {
                write!(f, "view of {base}, whose memory is in {buffer_type}")
            }
            Cause::GraphInput => write!(f, "graph input (inputs start on the host)"),
            Cause::WeightSource {
                weight,
                buffer_type,
            } => {
                write!(f, "reads weight {weight} in {buffer_type}")
            }
            Cause::OpOffload { weight, policy } => {
                write!(
                    f,
                    "op offload ({policy}) of an op whose weight {weight} is in host memory"
                )
            }
            Cause::Expanded {
                from,
                direction,
                gpu_phase,
            } => write!(
                f,
                "expanded {} from {from}{}",
                match direction {
                    Direction::Down => "down",
                    Direction::Up => "up",
                },
                if *gpu_phase { " (GPU phase)" } else { "" }
            ),
            Cause::Upgraded { from } => {
                write!(
                    f,
                    "upgraded from backend {} (runs the op, reads all sources in place)",
                    from.0
                )
            }
            Cause::MostSupportedInputs { supported, of } => {
                write!(
                    f,
                    "unclaimed; supports {supported} of its {of} sources' memory"
                )
            }
            Cause::SourceOfConsumer { consumer } => write!(f, "source of {consumer}"),
            Cause::ViewOfBase { base } => write!(f, "view of {base}"),
            Cause::Fallback { refused_by } => {
                write!(
                    f,
                    "backend {} refuses the op; first backend that runs it",
                    refused_by.0
                )
            }
            Cause::InputCopy { source } => write!(f, "copy of {source} for this backend's split"),
            Cause::OnlyBackend => write!(f, "the scheduler's only backend"),
        }
    }
}
