//! What the reader is asked to do: where to find symbols, whether to name processes, and
//! which samples to keep. The driver (`reader`) takes it and `symbolize` keeps it while it
//! resolves addresses.
use rustc_hash::FxHashSet;
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
    /// Which samples to keep (perf report's --comms, --pid, --tid, --cpu); the default
    /// keeps every one, at no cost.
    pub filter: SampleFilter,
    /// The ELF symbol tables of other reads made at the same time (the two sides of a diff): a
    /// file both need is parsed once, by the first to need it. None: this read's own.
    pub share: Option<std::sync::Arc<crate::elfsyms::SharedSyms>>,
}

/// perf report's sample filters: a sample is kept when every given set holds its value
/// (its thread's comm at the time of the sample, as perf script names it; its pid, tid,
/// cpu). A sample without a CPU field has no CPU any set holds.
#[derive(Default, Clone)]
pub struct SampleFilter {
    pub comms: Option<FxHashSet<String>>,
    pub pids: Option<FxHashSet<i32>>,
    pub tids: Option<FxHashSet<i32>>,
    pub cpus: Option<FxHashSet<u32>>,
}

impl SampleFilter {
    /// Whether any set is given (else every sample is kept, unchecked).
    pub fn active(&self) -> bool {
        self.comms.is_some() || self.pids.is_some() || self.tids.is_some() || self.cpus.is_some()
    }

    /// Whether a sample of these pid, tid and cpu is kept, before its comm is asked.
    #[inline]
    pub fn keeps_ids(&self, pid: i32, tid: i32, cpu: Option<u32>) -> bool {
        self.pids.as_ref().is_none_or(|s| s.contains(&pid))
            && self.tids.as_ref().is_none_or(|s| s.contains(&tid))
            && self.cpus.as_ref().is_none_or(|s| cpu.is_some_and(|c| s.contains(&c)))
    }
}
