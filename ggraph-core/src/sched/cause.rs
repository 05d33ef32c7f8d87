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
    /// The id as an index into per-backend tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Which pass decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pass {
    /// The user's placement, applied in pass 1 (see
    /// [`Scheduler::set_tensor_backend`](crate::sched::Scheduler::set_tensor_backend)).
    Manual,
    /// Pass 0: row-split rewrite and the placement of its gathers.
    RowSplit,
    /// Pass 1: where memory, weights and inputs already are.
    WeightsLocation,
    /// Pass 2: spreading to neighbours (or, with one backend, everything
    /// left).
    Expansion,
    /// Pass 3: moves to higher-priority backends, and fallbacks.
    Upgrade,
    /// Pass 4: sources and views left, and the input copies.
    CopyInsertion,
}

impl Pass {
    /// The pass's number, 0 to 4, as logs and [`Cause`]'s `Display` print
    /// it; manual placements count as 0.
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
    /// From the first node to the last: nodes take the backend of an
    /// assigned node before them.
    Down,
    /// From the last node to the first: nodes take the backend of an
    /// assigned node after them.
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
        /// The row-split weight.
        weight: TensorId,
        /// The main device's buffer type.
        buffer_type: &'static str,
    },
    /// Its memory already lives in a buffer of a type this backend owns.
    Allocated {
        /// The buffer type of that memory.
        buffer_type: &'static str,
    },
    /// A view of a tensor whose memory lives there.
    ViewOfAllocated {
        /// The view's base.
        base: TensorId,
        /// The buffer type of the base's memory.
        buffer_type: &'static str,
    },
    /// A graph input: inputs start on the host.
    GraphInput,
    /// It reads a weight that lives there.
    WeightSource {
        /// The first weight among its sources.
        weight: TensorId,
        /// The buffer type of the weight's memory.
        buffer_type: &'static str,
    },
    /// Its weight is in host memory, and this device's op-offload policy
    /// asked for the op anyway.
    OpOffload {
        /// The weight in host memory.
        weight: TensorId,
        /// The policy's [`name`](crate::sched::OffloadPolicy::name).
        policy: &'static str,
    },
    /// Spread from an assigned neighbour so that chains stay together.
    Expanded {
        /// The assigned node it took the backend from.
        from: TensorId,
        /// The sweep's direction.
        direction: Direction,
        /// Whether it was the first phase, in which only GPU-class backends
        /// spread.
        gpu_phase: bool,
    },
    /// Spread down past the end of a run, then moved to the backend of all
    /// its readers: what it reads crosses there anyway, so its own output
    /// need not.
    PulledToReaders {
        /// Its first reader.
        reader: TensorId,
    },
    /// Moved from a lower-priority backend: this one runs the op and reads
    /// every source where it lies.
    Upgraded {
        /// The backend it was on before.
        from: BackendId,
    },
    /// Nothing claimed it; this backend supports the op and most of its
    /// sources' memory.
    MostSupportedInputs {
        /// Sources this backend reads where they lie.
        supported: usize,
        /// Sources in all.
        of: usize,
    },
    /// A source placed with the node that reads it.
    SourceOfConsumer {
        /// The first node found reading it.
        consumer: TensorId,
    },
    /// A view placed with its base.
    ViewOfBase {
        /// The view's base.
        base: TensorId,
    },
    /// The backend the rules chose refuses the op; this is the next one
    /// that runs it.
    Fallback {
        /// The first backend that refused the node.
        refused_by: BackendId,
    },
    /// A copy the scheduler made for a split on this backend.
    InputCopy {
        /// The tensor copied.
        source: TensorId,
    },
    /// The scheduler has one backend, and it runs the op.
    OnlyBackend,
}

impl Cause {
    /// The pass that made the assignment.
    pub fn pass(&self) -> Pass {
        match self {
            Cause::Manual => Pass::Manual,
            Cause::RowSplitGather { .. } => Pass::RowSplit,
            Cause::Allocated { .. }
            | Cause::ViewOfAllocated { .. }
            | Cause::GraphInput
            | Cause::WeightSource { .. }
            | Cause::OpOffload { .. } => Pass::WeightsLocation,
            Cause::Expanded { .. } | Cause::PulledToReaders { .. } | Cause::OnlyBackend => {
                Pass::Expansion
            }
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
            Cause::PulledToReaders { reader } => write!(
                f,
                "with its readers ({reader} first): its sources cross here anyway"
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
