//! What the reader is asked to do: where to find symbols, and whether to name processes.
//! The driver (`reader`) takes it and `symbolize` keeps it while it resolves addresses.
use std::path::PathBuf;

pub struct Options {
    pub kallsyms: Option<PathBuf>,
    pub symfs: Vec<PathBuf>,
    pub debug_dirs: Vec<PathBuf>,
    /// Also aggregate each event's stacks per process name (the sample's thread's comm,
    /// as perf script names it): `EventOut::proc_*` and `Output::comm_names`. Off by
    /// default: the plain profile needs none of it.
    pub by_process: bool,
    /// Threads one file may be read on (`parallel`); 0 and 1 read it on this one. The
    /// output is the same for every number.
    pub threads: usize,
}
