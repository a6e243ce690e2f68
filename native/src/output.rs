//! What the reader gives back: the header facts, and each event's profile over the
//! shared symbol and stack tables. `header` and `aggregate` build it, `reader` returns it
//! and lib.rs hands it to Python.

#[derive(Debug, PartialEq)]
pub enum Fact {
    Str(String),
    Int(i64),
    Bool(bool),
    List(Vec<String>),
    Pairs(Vec<(String, String)>),
}

#[derive(Debug, PartialEq)]
pub struct EventOut {
    pub name: String,
    pub type_: u32,
    pub config: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub freq: bool,
    pub period_or_freq: u64,
    pub has_period: bool,
    pub samples: u64,
    pub total_weight: u64,
    pub stack_ids: Vec<u32>,
    pub stack_weight: Vec<f64>,
    pub stack_count: Vec<u64>,
    pub self_weight: Vec<f64>,
    pub children_weight: Vec<f64>,
    pub self_count: Vec<u64>,
    pub children_count: Vec<u64>,
    pub edges: Vec<u32>,
    pub edge_weight: Vec<f64>,
    pub edge_count: Vec<u64>,
    /// With `Options::by_process`: (comm id, stack id) -> (weight, count), one entry per
    /// index, sorted by comm id then stack id; empty otherwise.
    pub proc_comm: Vec<u32>,
    pub proc_stack: Vec<u32>,
    pub proc_weight: Vec<f64>,
    pub proc_count: Vec<u64>,
}

#[derive(Debug, PartialEq)]
pub struct Output {
    pub facts: Vec<(String, Fact)>,
    pub events: Vec<EventOut>,
    pub sym_names: Vec<String>,
    pub sym_dso: Vec<u32>,
    pub sym_kernel: Vec<u8>,
    pub dso_names: Vec<String>,
    pub dso_paths: Vec<String>,
    pub stack_frames: Vec<u32>,
    pub stack_offsets: Vec<u64>,
    pub warnings: Vec<String>,
    pub stats: Vec<(String, u64)>,
    /// The process names `EventOut::proc_comm` refers to (empty without `Options::by_process`).
    pub comm_names: Vec<String>,
}
