//! perf.data -> per-event aggregated profiles.
//!
//! The file header, attributes and feature sections are read with the
//! `linux-perf-data` crate; non-sample records (MMAP, MMAP2, COMM, FORK, LOST)
//! are decoded with `linux-perf-event-reader`. SAMPLE records are decoded here:
//! linux-perf-event-reader 0.10.2 swaps the grouped and single layouts of the
//! PERF_SAMPLE_READ values and drops the PERF_FORMAT_LOST flag (its
//! `ReadFormat` has no such bit and attrs are parsed with `from_bits_truncate`),
//! so group-sampled files (`-e '{a,b}:S'`) fail or lose their samples. We read
//! `sample_type` / `read_format` raw from the attr section and parse the
//! sample body ourselves; `crate_sample_read_defect()` checks whether the crate
//! still has the defect.
//!
//! Records are visited in perf's order (sorted by time within the
//! FINISHED_ROUND windows) straight from a memory map, without copying.
use crate::elfsyms::{self, ElfSyms};
use crate::intern::{self, ChainMap, SliceSet};
use crate::kallsyms::Kallsyms;
use crate::layout;
use byteorder::{BigEndian, ByteOrder, LittleEndian};
use linux_perf_data::{Endianness, PerfFileReader, PerfFileRecord};
use linux_perf_event_reader::{
    CommOrExecRecord, ForkOrExitRecord, Mmap2FileId, Mmap2Record, MmapRecord, RawData,
};
use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};

// perf_event.h constants.
const SAMPLE_IP: u64 = 1 << 0;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_ADDR: u64 = 1 << 3;
const SAMPLE_READ: u64 = 1 << 4;
const SAMPLE_CALLCHAIN: u64 = 1 << 5;
const SAMPLE_ID: u64 = 1 << 6;
const SAMPLE_CPU: u64 = 1 << 7;
const SAMPLE_PERIOD: u64 = 1 << 8;
const SAMPLE_STREAM_ID: u64 = 1 << 9;
const SAMPLE_IDENTIFIER: u64 = 1 << 16;
const FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const FORMAT_ID: u64 = 1 << 2;
const FORMAT_GROUP: u64 = 1 << 3;
const FORMAT_LOST: u64 = 1 << 4;
const ATTR_FLAG_FREQ: u64 = 1 << 10;
const ATTR_FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;

const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

const REC_MMAP: u32 = 1;
const REC_LOST: u32 = 2;
const REC_COMM: u32 = 3;
const REC_EXIT: u32 = 4;
const REC_FORK: u32 = 7;
const REC_SAMPLE: u32 = 9;
const REC_MMAP2: u32 = 10;
const REC_LOST_SAMPLES: u32 = 13;
const REC_FINISHED_ROUND: u32 = 68;
const REC_COMPRESSED: u32 = 81;
const REC_COMPRESSED2: u32 = 83;

const CTX_HV: u64 = (-32i64) as u64;
const CTX_KERNEL: u64 = (-128i64) as u64;
const CTX_USER: u64 = (-512i64) as u64;
const CTX_GUEST: u64 = (-2048i64) as u64;
const CTX_GUEST_KERNEL: u64 = (-2176i64) as u64;
const CTX_GUEST_USER: u64 = (-2560i64) as u64;
const CTX_MAX: u64 = (-4095i64) as u64;

const MODE_UNKNOWN: u8 = 0;
const MODE_KERNEL: u8 = 1;
const MODE_USER: u8 = 2;
const MODE_HV: u8 = 3;
const MODE_GUEST_KERNEL: u8 = 4;
const MODE_GUEST_USER: u8 = 5;

pub struct Options {
    pub kallsyms: Option<PathBuf>,
    pub symfs: Vec<PathBuf>,
    pub debug_dirs: Vec<PathBuf>,
}

pub enum Fact {
    Str(String),
    Int(i64),
    Bool(bool),
    List(Vec<String>),
    Pairs(Vec<(String, String)>),
}

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
}

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
}

struct Attr {
    name: String,
    type_: u32,
    config: u64,
    period_or_freq: u64,
    sample_type: u64,
    read_format: u64,
    freq: bool,
    sample_id_all: bool,
    /// Byte offset of the time field from the start of a SAMPLE body.
    time_from_start: Option<usize>,
    /// Byte offset of the time field from the end of a non-sample body.
    time_from_end: Option<usize>,
}

#[derive(Clone, Copy)]
struct Map {
    start: u64,
    end: u64,
    pgoff: u64,
    dso: u32,
}

#[derive(Default)]
struct Proc {
    maps: Vec<Map>,
    gen: u64,
}

enum SymState {
    NotTried,
    Missing,
    Loaded(ElfSyms),
}

struct Dso {
    name: String,
    path: String,
    build_id: Option<Vec<u8>>,
    kernel: bool,
    syms: SymState,
    sym_ids: Vec<u32>,
    unknown: u32,
}

#[derive(Default)]
struct Acc {
    samples: u64,
    weight: u64,
    /// (weight, count) per symbolic stack id.
    by_stack: Vec<(u64, u64)>,
}

const NONE: u32 = u32::MAX;

struct State<'o> {
    opts: &'o Options,
    attrs: Vec<Attr>,
    id_to_attr: FxHashMap<u64, usize>,
    /// The same, as a list, when there are few ids (a scan beats hashing).
    id_list: Vec<(u64, usize)>,
    all_identifier: bool,
    // symbols
    sym_names: Vec<String>,
    sym_dso: Vec<u32>,
    sym_kernel: Vec<u8>,
    sym_intern: FxHashMap<(u32, String), u32>,
    dsos: Vec<Dso>,
    dso_by_path: FxHashMap<String, u32>,
    header_build_ids: FxHashMap<String, Vec<u8>>,
    kallsyms: Option<Kallsyms>,
    kallsyms_dso: Vec<u32>,
    kallsyms_sym: Vec<u32>,
    kernel_reloc: i64,
    kernel_ref: Option<(String, u64)>,
    kaddr_cache: FxHashMap<u64, u32>,
    uaddr_cache: FxHashMap<(u32, u64), u32>,
    dso_unknown: u32,
    dso_kernel: u32,
    // processes
    procs: FxHashMap<i32, Proc>,
    next_gen: u64,
    /// (pid, maps generation, next_gen when cached), by pid % 16: valid while
    /// no process changed (every change takes a new generation).
    gen_cache: [(i32, u64, u64); 16],
    // stacks
    raw_key: Vec<u64>,
    /// Raw call chains (with mode, ip and, for user stacks, pid + maps
    /// generation) -> symbolic stack id.
    raw_chains: ChainMap,
    frames: Vec<u32>,
    /// Symbolic stacks (root first), ids in order of first appearance.
    stacks: SliceSet<u32>,
    // accumulation
    acc: Vec<Acc>,
    read_storage: FxHashMap<u64, u64>,
    read_resync: rustc_hash::FxHashSet<u64>,
    // counters
    rec_counts: [u64; 128],
    samples_seen: u64,
    malformed: u64,
    malformed_other: u64,
    read_backwards: u64,
    overflowed: u64,
    unknown_ids: u64,
    lost_events: u64,
    lost_samples: u64,
    kernel_addrs: u64,
    kernel_unresolved: u64,
    warnings: Vec<String>,
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn event_name_fallback(type_: u32, config: u64) -> String {
    let hw = ["cycles", "instructions", "cache-references", "cache-misses", "branches", "branch-misses", "bus-cycles",
              "stalled-cycles-frontend", "stalled-cycles-backend", "ref-cycles"];
    let sw = ["cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations", "minor-faults",
              "major-faults", "alignment-faults", "emulation-faults", "dummy", "bpf-output", "cgroup-switches"];
    match type_ {
        0 if (config as usize) < hw.len() => hw[config as usize].to_string(),
        1 if (config as usize) < sw.len() => sw[config as usize].to_string(),
        _ => format!("event:type={type_},config={config:#x}"),
    }
}

impl<'o> State<'o> {
    fn intern_sym(&mut self, dso: u32, name: &str) -> u32 {
        if let Some(&id) = self.sym_intern.get(&(dso, name.to_string())) {
            return id;
        }
        let id = self.sym_names.len() as u32;
        self.sym_names.push(name.to_string());
        self.sym_dso.push(dso);
        self.sym_kernel.push(self.dsos[dso as usize].kernel as u8);
        self.sym_intern.insert((dso, name.to_string()), id);
        id
    }

    fn add_dso(&mut self, name: &str, path: &str, kernel: bool) -> u32 {
        if let Some(&d) = self.dso_by_path.get(path) {
            return d;
        }
        let id = self.dsos.len() as u32;
        let build_id = self.header_build_ids.get(path).cloned();
        self.dsos.push(Dso {
            name: name.to_string(),
            path: path.to_string(),
            build_id,
            kernel,
            syms: SymState::NotTried,
            sym_ids: Vec::new(),
            unknown: NONE,
        });
        self.dso_by_path.insert(path.to_string(), id);
        id
    }

    fn unknown_of(&mut self, dso: u32) -> u32 {
        let u = self.dsos[dso as usize].unknown;
        if u != NONE {
            return u;
        }
        let id = self.intern_sym(dso, "[unknown]");
        self.dsos[dso as usize].unknown = id;
        id
    }

    fn kernel_sym(&mut self, addr: u64) -> u32 {
        if let Some(&id) = self.kaddr_cache.get(&addr) {
            return id;
        }
        self.kernel_addrs += 1;
        let id = match &self.kallsyms {
            Some(ks) => match ks.lookup((addr as i64).wrapping_sub(self.kernel_reloc) as u64) {
                Some(i) => {
                    if self.kallsyms_sym[i] == NONE {
                        let dso = self.kallsyms_dso[ks.module[i] as usize];
                        let name = ks.name(i).to_string();
                        let id = self.intern_sym(dso, &name);
                        self.kallsyms_sym[i] = id;
                    }
                    self.kallsyms_sym[i]
                }
                None => {
                    self.kernel_unresolved += 1;
                    self.unknown_of(self.dso_kernel)
                }
            },
            None => {
                self.kernel_unresolved += 1;
                self.unknown_of(self.dso_kernel)
            }
        };
        self.kaddr_cache.insert(addr, id);
        id
    }

    fn load_dso_syms(&mut self, d: u32) {
        let dso = &self.dsos[d as usize];
        if !matches!(dso.syms, SymState::NotTried) {
            return;
        }
        let (dbgs, images) = elfsyms::candidates(&dso.path, dso.build_id.as_deref(), &self.opts.symfs, &self.opts.debug_dirs);
        let bid = dso.build_id.clone();
        let open = |c: &PathBuf| -> Option<memmap2::Mmap> {
            let f = std::fs::File::open(c).ok()?;
            if !f.metadata().ok()?.is_file() {
                return None;
            }
            // SAFETY: read-only map of a regular file, parsed right away.
            unsafe { memmap2::Mmap::map(&f) }.ok()
        };
        // The first image that parses (and matches the build id); its symbols
        // are kept for when no separate debug file has any.
        let mut image: Option<(memmap2::Mmap, ElfSyms)> = None;
        for c in &images {
            if let Some(m) = open(c) {
                if let Ok(s) = ElfSyms::parse(&m, None, bid.as_deref()) {
                    image = Some((m, s));
                    break;
                }
            }
        }
        let mut state = SymState::Missing;
        if let Some((img, img_syms)) = image {
            for c in &dbgs {
                if let Some(m) = open(c) {
                    if let Ok(s) = ElfSyms::parse(&m, Some(&img), bid.as_deref()) {
                        if !s.is_empty() {
                            state = SymState::Loaded(s);
                            break;
                        }
                    }
                }
            }
            if matches!(state, SymState::Missing) {
                state = SymState::Loaded(img_syms);
            }
        }
        let dso = &mut self.dsos[d as usize];
        if let SymState::Loaded(s) = &state {
            dso.sym_ids = vec![NONE; s.len()];
        }
        dso.syms = state;
    }

    fn user_sym(&mut self, pid: i32, addr: u64) -> u32 {
        let map = self.procs.get(&pid).and_then(|p| {
            let i = p.maps.partition_point(|m| m.start <= addr);
            (i > 0 && addr < p.maps[i - 1].end).then(|| p.maps[i - 1])
        });
        let Some(m) = map else {
            return self.unknown_of(self.dso_unknown);
        };
        let off = addr - m.start + m.pgoff;
        if let Some(&id) = self.uaddr_cache.get(&(m.dso, off)) {
            return id;
        }
        self.load_dso_syms(m.dso);
        let found = match &self.dsos[m.dso as usize].syms {
            SymState::Loaded(s) => s.offset_to_vaddr(off).and_then(|v| s.lookup(v)),
            _ => None,
        };
        let id = match found {
            Some(i) => {
                let have = self.dsos[m.dso as usize].sym_ids[i];
                if have != NONE {
                    have
                } else {
                    let name = match &self.dsos[m.dso as usize].syms {
                        SymState::Loaded(s) => s.name(i).to_string(),
                        _ => unreachable!(),
                    };
                    let id = self.intern_sym(m.dso, &name);
                    self.dsos[m.dso as usize].sym_ids[i] = id;
                    id
                }
            }
            None => self.unknown_of(m.dso),
        };
        self.uaddr_cache.insert((m.dso, off), id);
        id
    }

    fn frame_sym(&mut self, mode: u8, pid: i32, addr: u64) -> u32 {
        match mode {
            MODE_KERNEL => self.kernel_sym(addr),
            MODE_USER => self.user_sym(pid, addr),
            MODE_HV => {
                let d = self.add_dso("[hypervisor]", "[hypervisor]", true);
                self.unknown_of(d)
            }
            MODE_GUEST_KERNEL => {
                let d = self.add_dso("[guest.kernel]", "[guest.kernel]", true);
                self.unknown_of(d)
            }
            MODE_GUEST_USER => {
                let d = self.add_dso("[guest.user]", "[guest.user]", false);
                self.unknown_of(d)
            }
            _ => {
                let in_kernel = self.kallsyms.as_ref().map(|k| k.lookup(addr).is_some()).unwrap_or(false);
                if in_kernel { self.kernel_sym(addr) } else { self.user_sym(pid, addr) }
            }
        }
    }

    fn new_gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    fn add_map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, dso: u32) {
        let end = start.saturating_add(len);
        let gen = self.new_gen();
        let p = self.procs.entry(pid).or_default();
        let mut maps = Vec::with_capacity(p.maps.len() + 2);
        for m in p.maps.drain(..) {
            if m.end <= start || m.start >= end {
                maps.push(m);
            } else {
                if m.start < start {
                    maps.push(Map { end: start, ..m });
                }
                if m.end > end {
                    maps.push(Map { start: end, pgoff: m.pgoff + (end - m.start), ..m });
                }
            }
        }
        maps.push(Map { start, end, pgoff, dso });
        maps.sort_unstable_by_key(|m| m.start);
        p.maps = maps;
        p.gen = gen;
    }

    fn mmap_event(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, path: &[u8], exec: bool, build_id: Option<Vec<u8>>) {
        let path = String::from_utf8_lossy(path).into_owned();
        if pid == -1 {
            // Kernel image: "[kernel.kallsyms]_text" with pgoff = address of _text.
            if let Some(rest) = path.strip_prefix("[kernel.kallsyms]") {
                let refname = rest.trim_start_matches('_');
                if !rest.is_empty() && self.kernel_ref.is_none() {
                    self.kernel_ref = Some((format!("_{refname}"), pgoff));
                    self.apply_kernel_ref();
                }
            }
            return;
        }
        if !exec {
            return;
        }
        let d = self.add_dso(basename(&path), &path, false);
        if let Some(b) = build_id {
            if self.dsos[d as usize].build_id.is_none() {
                self.dsos[d as usize].build_id = Some(b);
            }
        }
        self.add_map(pid, start, len, pgoff, d);
    }

    fn record<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], ai: usize) {
        self.rec_counts[(ty as usize).min(127)] += 1;
        let raw = RawData::Single(body);
        match ty {
            REC_SAMPLE => self.sample::<T>(misc, body, ai),
            REC_MMAP => {
                if let Ok(r) = MmapRecord::parse::<T>(raw, misc) {
                    let path = r.path.as_slice();
                    self.mmap_event(r.pid, r.address, r.length, r.page_offset, &path, r.is_executable, None);
                }
            }
            REC_MMAP2 => {
                // linux-perf-event-reader asserts (panics) on a build id longer than 20 bytes
                if misc & MISC_MMAP_BUILD_ID != 0 && body.get(32).is_some_and(|&n| n > 20) {
                    self.malformed_other += 1;
                    return;
                }
                if let Ok(r) = Mmap2Record::parse::<T>(raw, misc) {
                    let path = r.path.as_slice();
                    let bid = match r.file_id {
                        Mmap2FileId::BuildId(b) => Some(b),
                        _ => None,
                    };
                    let exec = r.protection & 4 != 0; // PROT_EXEC
                    self.mmap_event(r.pid, r.address, r.length, r.page_offset, &path, exec, bid);
                }
            }
            REC_COMM => {
                if let Ok(r) = CommOrExecRecord::parse::<T>(raw, misc) {
                    if r.is_execve && r.pid == r.tid {
                        let gen = self.new_gen();
                        let p = self.procs.entry(r.pid).or_default();
                        p.maps.clear();
                        p.gen = gen;
                    }
                }
            }
            REC_FORK => {
                if let Ok(r) = ForkOrExitRecord::parse::<T>(raw) {
                    if r.pid != r.ppid {
                        let maps = self.procs.get(&r.ppid).map(|p| p.maps.clone()).unwrap_or_default();
                        let gen = self.new_gen();
                        self.procs.insert(r.pid, Proc { maps, gen });
                    }
                }
            }
            REC_EXIT => {}
            REC_LOST => {
                if body.len() >= 16 {
                    self.lost_events += T::read_u64(&body[8..16]);
                }
            }
            REC_LOST_SAMPLES => {
                if body.len() >= 8 {
                    self.lost_samples += T::read_u64(&body[0..8]);
                }
            }
            _ => {}
        }
    }

    fn sample<T: ByteOrder>(&mut self, misc: u16, body: &[u8], ai: usize) {
        self.samples_seen += 1;
        let st = self.attrs[ai].sample_type;
        let rf = self.attrs[ai].read_format;
        let mut p = 0usize;
        macro_rules! rd {
            () => {{
                if p + 8 > body.len() {
                    self.malformed += 1;
                    return;
                }
                let v = T::read_u64(&body[p..p + 8]);
                p += 8;
                v
            }};
        }
        if st & SAMPLE_IDENTIFIER != 0 {
            rd!();
        }
        let ip = if st & SAMPLE_IP != 0 { rd!() } else { 0 };
        let pid = if st & SAMPLE_TID != 0 {
            if p + 8 > body.len() {
                self.malformed += 1;
                return;
            }
            let v = T::read_u32(&body[p..p + 4]) as i32;
            p += 8;
            v
        } else {
            -1
        };
        if st & SAMPLE_TIME != 0 {
            rd!();
        }
        if st & SAMPLE_ADDR != 0 {
            rd!();
        }
        if st & SAMPLE_ID != 0 {
            rd!();
        }
        if st & SAMPLE_STREAM_ID != 0 {
            rd!();
        }
        if st & SAMPLE_CPU != 0 {
            rd!();
        }
        let period = if st & SAMPLE_PERIOD != 0 { Some(rd!()) } else { None };
        // PERF_SAMPLE_READ: read_format decides the layout (the crate's defect).
        let mut read_at = 0usize;
        let mut read_nr = 0u64;
        let mut read_stride = 0usize;
        if st & SAMPLE_READ != 0 {
            let id_words = (rf & FORMAT_ID != 0) as usize;
            let lost_words = (rf & FORMAT_LOST != 0) as usize;
            let time_words = (rf & FORMAT_TOTAL_TIME_ENABLED != 0) as usize + (rf & FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
            if rf & FORMAT_GROUP != 0 {
                read_nr = rd!();
                p += 8 * time_words;
                read_at = p;
                read_stride = 8 * (1 + id_words + lost_words);
                let need = (read_nr as usize).checked_mul(read_stride);
                match need {
                    Some(n) if read_nr <= 4096 && p + n <= body.len() => p += n,
                    _ => {
                        self.malformed += 1;
                        return;
                    }
                }
            } else {
                read_at = p;
                read_nr = 1;
                read_stride = 8 * (1 + time_words + id_words + lost_words);
                p += read_stride;
                if p > body.len() {
                    self.malformed += 1;
                    return;
                }
                // For the single layout, the id sits after the times.
                read_stride = 0;
                let _ = time_words;
            }
        }
        let chain: &[u8] = if st & SAMPLE_CALLCHAIN != 0 {
            let nr = rd!();
            match (nr as usize).checked_mul(8) {
                Some(n) if p + n <= body.len() => &body[p..p + n],
                _ => {
                    self.malformed += 1;
                    return;
                }
            }
        } else {
            &[]
        };
        let mode = (misc & 7) as u8;
        let stack = self.resolve_stack::<T>(pid, mode, ip, chain);

        if st & SAMPLE_READ != 0 && rf & FORMAT_ID != 0 {
            let time_words = (rf & FORMAT_TOTAL_TIME_ENABLED != 0) as usize + (rf & FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
            for k in 0..read_nr as usize {
                let (v_at, id_at) = if rf & FORMAT_GROUP != 0 {
                    let at = read_at + k * read_stride;
                    (at, at + 8)
                } else {
                    (read_at, read_at + 8 + 8 * time_words)
                };
                let value = T::read_u64(&body[v_at..v_at + 8]);
                let id = T::read_u64(&body[id_at..id_at + 8]);
                let Some(ev) = self.event_of_id(id) else {
                    self.unknown_ids += 1;
                    continue;
                };
                let prev = self.read_storage.insert(id, value);
                // A counter never goes back: a value below the previous one is damaged (it
                // would wrap to an enormous weight). It is skipped, and so is the next one,
                // which only restarts counting from a sound value.
                if !self.read_resync.is_empty() && self.read_resync.remove(&id) {
                    continue;
                }
                let Some(w) = value.checked_sub(prev.unwrap_or(0)) else {
                    self.read_backwards += 1;
                    self.read_resync.insert(id);
                    continue;
                };
                if w == 0 {
                    continue;
                }
                self.deliver(ev, stack, w);
            }
        } else {
            let w = match period {
                Some(p) => p,
                None if !self.attrs[ai].freq && self.attrs[ai].period_or_freq > 0 => self.attrs[ai].period_or_freq,
                None => 1,
            };
            self.deliver(ai, stack, w);
        }
    }

    #[inline]
    fn deliver(&mut self, ev: usize, stack: u32, w: u64) {
        let a = &mut self.acc[ev];
        // The weights of an event add up in 64 bits, as perf's do; a sample that would
        // overflow them (a damaged period of 2^64-1) is skipped rather than wrapped.
        let Some(total) = a.weight.checked_add(w) else {
            self.overflowed += 1;
            return;
        };
        a.samples += 1;
        a.weight = total;
        let s = stack as usize;
        if a.by_stack.len() <= s {
            a.by_stack.resize(self.stacks.len().max(s + 1), (0, 0));
        }
        a.by_stack[s].0 += w;
        a.by_stack[s].1 += 1;
    }

    fn resolve_stack<T: ByteOrder>(&mut self, pid: i32, mode: u8, ip: u64, chain: &[u8]) -> u32 {
        let mut key = std::mem::take(&mut self.raw_key);
        key.clear();
        key.push(0);
        key.push(mode as u64);
        key.push(ip);
        let mut user = mode == MODE_USER || mode == MODE_UNKNOWN;
        for w in chain.chunks_exact(8) {
            let a = T::read_u64(w);
            if a == CTX_USER {
                user = true;
            }
            key.push(a);
        }
        // Kernel-only stacks are shared by every process; user ones depend on
        // the process's mappings at that time (pid + generation).
        key[0] = if user {
            let slot = &self.gen_cache[pid as usize & 15];
            let gen = if slot.0 == pid && slot.2 == self.next_gen {
                slot.1
            } else {
                let gen = self.procs.get(&pid).map(|p| p.gen).unwrap_or(0);
                self.gen_cache[pid as usize & 15] = (pid, gen, self.next_gen);
                gen
            };
            ((pid as u32 as u64) << 40) ^ gen ^ (1 << 63)
        } else {
            0
        };
        let h = intern::hash(&key);
        if let Some(id) = self.raw_chains.get(&key, h) {
            self.raw_key = key;
            return id;
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        frames.push(self.frame_sym(mode, pid, ip));
        if key.len() > 3 {
            let mut ctx = mode;
            let mut first = true;
            for &a in &key[3..] {
                if a >= CTX_MAX {
                    ctx = match a {
                        CTX_KERNEL => MODE_KERNEL,
                        CTX_USER => MODE_USER,
                        CTX_HV => MODE_HV,
                        CTX_GUEST_KERNEL | CTX_GUEST => MODE_GUEST_KERNEL,
                        CTX_GUEST_USER => MODE_GUEST_USER,
                        _ => ctx,
                    };
                    continue;
                }
                if first {
                    first = false;
                    if a == ip {
                        continue;
                    }
                }
                let s = self.frame_sym(ctx, pid, a);
                frames.push(s);
            }
        }
        frames.reverse();
        let id = self.stacks.intern(&frames);
        if let Err(e) = self.raw_chains.insert_new(&key, h, id) {
            panic!("{e}");
        }
        self.frames = frames;
        self.raw_key = key;
        id
    }

    fn finish(mut self, facts: Vec<(String, Fact)>) -> Output {
        let nsym = self.sym_names.len();
        let mut events = Vec::new();
        let mut stamp = vec![u32::MAX; nsym];
        let accs = std::mem::take(&mut self.acc);
        for (ai, acc) in accs.into_iter().enumerate() {
            let a = &self.attrs[ai];
            let mut out = EventOut {
                name: a.name.clone(),
                type_: a.type_,
                config: a.config,
                sample_type: a.sample_type,
                read_format: a.read_format,
                freq: a.freq,
                period_or_freq: a.period_or_freq,
                has_period: a.sample_type & SAMPLE_PERIOD != 0 || a.sample_type & SAMPLE_READ != 0,
                samples: acc.samples,
                total_weight: acc.weight,
                stack_ids: Vec::new(),
                stack_weight: Vec::new(),
                stack_count: Vec::new(),
                self_weight: vec![0.0; nsym],
                children_weight: vec![0.0; nsym],
                self_count: vec![0; nsym],
                children_count: vec![0; nsym],
                edges: Vec::new(),
                edge_weight: Vec::new(),
                edge_count: Vec::new(),
            };
            stamp.iter_mut().for_each(|s| *s = u32::MAX);
            let mut edges: FxHashMap<(u32, u32), (u64, u64)> = FxHashMap::default();
            let mut pairs: Vec<(u32, u32)> = Vec::new();
            for (s, &(w, c)) in acc.by_stack.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let st = self.stacks.get(s as u32);
                out.stack_ids.push(s as u32);
                out.stack_weight.push(w as f64);
                out.stack_count.push(c);
                let leaf = *st.last().unwrap() as usize;
                out.self_weight[leaf] += w as f64;
                out.self_count[leaf] += c;
                for &f in st.iter() {
                    if stamp[f as usize] != s as u32 {
                        stamp[f as usize] = s as u32;
                        out.children_weight[f as usize] += w as f64;
                        out.children_count[f as usize] += c;
                    }
                }
                pairs.clear();
                pairs.extend(st.windows(2).map(|p| (p[0], p[1])));
                pairs.sort_unstable();
                pairs.dedup();
                for &pr in &pairs {
                    let e = edges.entry(pr).or_insert((0, 0));
                    e.0 += w;
                    e.1 += c;
                }
            }
            let mut ev: Vec<_> = edges.into_iter().collect();
            ev.sort_unstable_by_key(|e| e.0);
            for ((a, b), (w, c)) in ev {
                out.edges.push(a);
                out.edges.push(b);
                out.edge_weight.push(w as f64);
                out.edge_count.push(c);
            }
            events.push(out);
        }
        let stacks = std::mem::replace(&mut self.stacks, SliceSet::new());
        let (stack_frames, stack_offsets) = (stacks.data, stacks.offsets);
        let mut stats = Vec::new();
        for (t, &c) in self.rec_counts.iter().enumerate() {
            if c > 0 {
                stats.push((format!("{:?}", linux_perf_event_reader::RecordType(t as u32)), c));
            }
        }
        Output {
            facts,
            events,
            sym_names: self.sym_names,
            sym_dso: self.sym_dso,
            sym_kernel: self.sym_kernel,
            dso_names: self.dsos.iter().map(|d| d.name.clone()).collect(),
            dso_paths: self.dsos.iter().map(|d| d.path.clone()).collect(),
            stack_frames,
            stack_offsets,
            warnings: self.warnings,
            stats,
        }
    }
}

/// Whether linux-perf-event-reader's own SampleRecord parser still mishandles
/// PERF_SAMPLE_READ with PERF_FORMAT_GROUP|ID|LOST (true for 0.10.2). We never
/// use that parser for samples; this is reported so an upgrade can be judged.
pub fn crate_sample_read_defect() -> bool {
    use linux_perf_event_reader::{
        BranchSampleFormat, ReadFormat, RecordIdParseInfo, RecordParseInfo, SampleFormat, SampleRecord,
    };
    let info = RecordParseInfo {
        endian: Endianness::LittleEndian,
        sample_format: SampleFormat::IP | SampleFormat::READ | SampleFormat::CALLCHAIN,
        branch_sample_format: BranchSampleFormat::empty(),
        read_format: ReadFormat::from_bits_retain(FORMAT_GROUP | FORMAT_ID | FORMAT_LOST),
        common_data_offset_from_end: None,
        sample_regs_user: 0,
        user_regs_count: 0,
        sample_regs_intr: 0,
        intr_regs_count: 0,
        id_parse_info: RecordIdParseInfo { nonsample_record_id_offset_from_end: None, sample_record_id_offset_from_start: None },
        nonsample_record_time_offset_from_end: None,
        sample_record_time_offset_from_start: None,
    };
    // ip; read {nr=2; {value, id, lost} x 2}; callchain {nr=1; ip}
    let words: [u64; 10] = [0x1234, 2, 10, 100, 0, 20, 101, 0, 1, 0x1234];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    match SampleRecord::parse::<LittleEndian>(RawData::Single(&bytes), 2, &info) {
        Ok(s) => s.callchain.map(|c| c.len() != 1 || c.get(0) != Some(0x1234)).unwrap_or(true),
        Err(_) => true,
    }
}

pub fn read(path: &Path, opts: &Options) -> Result<Output, String> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {name}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {name}: {e}"))?;
    if meta.is_dir() {
        return Err(format!("{name} is a directory, not a perf.data file"));
    }
    if meta.len() == 0 {
        return Err(format!("{name} is empty; perf record wrote nothing to it"));
    }
    // SAFETY: read-only private map; a file changed underneath would give
    // wrong numbers but every access is bounds-checked against the map length.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot map {name}: {e}"))?;
    read_data(&name, &map, Some(&map), opts)
}

/// Reads a perf.data file already in memory (`name` is used in messages).
pub fn read_bytes(name: &str, data: &[u8], opts: &Options) -> Result<Output, String> {
    read_data(name, data, None, opts)
}

fn read_data(name: &str, data: &[u8], map: Option<&memmap2::Mmap>, opts: &Options) -> Result<Output, String> {
    if data.len() < 8 {
        return Err(format!("{name} is not a perf.data file (too short)"));
    }
    match &data[..8] {
        b"PERFILE2" => read_impl::<LittleEndian>(name, data, map, opts, Endianness::LittleEndian),
        b"2ELIFREP" => read_impl::<BigEndian>(name, data, map, opts, Endianness::BigEndian),
        b"PERFFILE" => Err(format!("{name} is a perf.data in the old version-1 format, which is not supported")),
        _ => Err(format!("{name} is not a perf.data file (it does not start with the PERFILE2 magic)")),
    }
}

/// Records are read through a window of the map: the pages ahead are mapped
/// in one call per chunk (fewer page faults) and the pages behind, once no
/// pending record needs them, are released, so the file does not all count
/// in the process's resident memory at the end.
const WINDOW_CHUNK: usize = 8 << 20;

/// Offsets in the pending list share a u64 with the event index.
const PENDING_OFF_BITS: u32 = 40;
const PENDING_OFF_MASK: u64 = (1 << PENDING_OFF_BITS) - 1;

fn read_impl<T: ByteOrder>(
    name: &str,
    data: &[u8],
    map: Option<&memmap2::Mmap>,
    opts: &Options,
    endian: Endianness,
) -> Result<Output, String> {
    let layout = layout::check::<T>(name, data)?;
    let (file_len, data_off, data_size) = (layout.file_len, layout.data_off, layout.data_size);
    let (expected_end, truncated_at, features_ok) = (layout.expected_end, layout.truncated_at, layout.features_ok);
    let PerfFileReader { mut perf_file, mut record_iter } = PerfFileReader::parse_file(layout.patched(data))
        .map_err(|e| format!("{name} is not a readable perf.data file: {e}"))?;

    // The attributes as the attribute section has them (the crate drops unknown
    // sample_type / read_format bits), named from the event description when
    // it lists the same events, each with the ids of both.
    let descs = perf_file.event_attributes();
    let named = descs.len() == layout.attrs.len();
    let mut attrs = Vec::new();
    let mut id_to_attr = FxHashMap::default();
    for (i, a) in layout.attrs.iter().enumerate() {
        let name = named.then(|| descs[i].name.clone()).flatten().unwrap_or_else(|| event_name_fallback(a.type_, a.config));
        for id in a.ids.iter().chain(if named { descs[i].event_ids.iter() } else { [].iter() }) {
            id_to_attr.entry(*id).or_insert(i);
        }
        let st = a.sample_type;
        let sample_id_all = a.flags & ATTR_FLAG_SAMPLE_ID_ALL != 0;
        let time_from_start = (st & SAMPLE_TIME != 0)
            .then(|| 8 * (st & (SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID)).count_ones() as usize);
        let time_from_end = (sample_id_all && st & SAMPLE_TIME != 0).then(|| {
            8 * (st & (SAMPLE_TIME | SAMPLE_ID | SAMPLE_STREAM_ID | SAMPLE_CPU | SAMPLE_IDENTIFIER)).count_ones() as usize
        });
        attrs.push(Attr {
            name,
            type_: a.type_,
            config: a.config,
            period_or_freq: a.period_or_freq,
            sample_type: st,
            read_format: a.read_format,
            freq: a.flags & ATTR_FLAG_FREQ != 0,
            sample_id_all,
            time_from_start,
            time_from_end,
        });
    }
    let warnings = layout.warnings;
    if attrs.is_empty() {
        return Err(format!("{name} describes no events"));
    }
    let all_identifier = attrs.iter().all(|a| a.sample_type & SAMPLE_IDENTIFIER != 0);

    // Header facts.
    let mut facts: Vec<(String, Fact)> = Vec::new();
    let s = |v: Result<Option<&str>, linux_perf_data::Error>| v.ok().flatten().map(|x| Fact::Str(x.to_string()));
    if let Some(f) = s(perf_file.arch()) { facts.push(("arch".into(), f)); }
    if let Some(f) = s(perf_file.hostname()) { facts.push(("hostname".into(), f)); }
    if let Some(f) = s(perf_file.os_release()) { facts.push(("os_release".into(), f)); }
    if let Some(f) = s(perf_file.perf_version()) { facts.push(("perf_version".into(), f)); }
    if let Some(f) = s(perf_file.cpu_desc()) { facts.push(("cpu_desc".into(), f)); }
    if let Some(f) = s(perf_file.cpu_id()) { facts.push(("cpu_id".into(), f)); }
    if let Ok(Some(n)) = perf_file.nr_cpus() {
        facts.push(("nr_cpus_online".into(), Fact::Int(n.nr_cpus_online as i64)));
        facts.push(("nr_cpus_available".into(), Fact::Int(n.nr_cpus_available as i64)));
    }
    if let Ok(Some(c)) = perf_file.cmdline() {
        facts.push(("cmdline".into(), Fact::List(c.iter().map(|x| x.to_string()).collect())));
    }
    if let Ok(Some(m)) = perf_file.total_mem() {
        facts.push(("total_mem_kb".into(), Fact::Int(m as i64)));
    }
    if let Ok(Some(r)) = perf_file.sample_time_range() {
        facts.push(("first_sample_time".into(), Fact::Int(r.first_sample_time as i64)));
        facts.push(("last_sample_time".into(), Fact::Int(r.last_sample_time as i64)));
    }
    let mut header_build_ids = FxHashMap::default();
    let mut bid_pairs = Vec::new();
    if let Ok(b) = perf_file.build_ids() {
        for info in b.values() {
            let p = String::from_utf8_lossy(&info.path).into_owned();
            bid_pairs.push((p.clone(), elfsyms::build_id_hex(&info.build_id)));
            header_build_ids.insert(p, elfsyms::trim_build_id(&info.build_id).to_vec());
        }
    }
    bid_pairs.sort();
    facts.push(("build_ids".into(), Fact::Pairs(bid_pairs)));
    facts.push(("endian".into(), Fact::Str(if endian == Endianness::LittleEndian { "little" } else { "big" }.into())));
    facts.push(("features_read".into(), Fact::Bool(features_ok)));
    facts.push(("crate_sample_read_defect".into(), Fact::Bool(crate_sample_read_defect())));

    // Kernel symbols.
    let kallsyms = match &opts.kallsyms {
        Some(p) => Some(Kallsyms::load(p)?),
        None => None,
    };
    if let Some(p) = &opts.kallsyms {
        facts.push(("kallsyms".into(), Fact::Str(p.display().to_string())));
    }

    let mut st = State {
        opts,
        attrs,
        id_list: id_to_attr.iter().map(|(&k, &v)| (k, v)).collect(),
        id_to_attr,
        all_identifier,
        sym_names: Vec::new(),
        sym_dso: Vec::new(),
        sym_kernel: Vec::new(),
        sym_intern: FxHashMap::default(),
        dsos: Vec::new(),
        dso_by_path: FxHashMap::default(),
        header_build_ids,
        kallsyms_dso: Vec::new(),
        kallsyms_sym: vec![NONE; kallsyms.as_ref().map(|k| k.addrs.len()).unwrap_or(0)],
        kallsyms,
        kernel_reloc: 0,
        kernel_ref: None,
        kaddr_cache: FxHashMap::default(),
        uaddr_cache: FxHashMap::default(),
        dso_unknown: 0,
        dso_kernel: 0,
        procs: FxHashMap::default(),
        next_gen: 0,
        gen_cache: [(0, 0, u64::MAX); 16],
        raw_key: Vec::new(),
        raw_chains: ChainMap::new(),
        frames: Vec::new(),
        stacks: SliceSet::new(),
        acc: Vec::new(),
        read_storage: FxHashMap::default(),
        read_resync: Default::default(),
        rec_counts: [0; 128],
        samples_seen: 0,
        malformed: 0,
        malformed_other: 0,
        read_backwards: 0,
        overflowed: 0,
        unknown_ids: 0,
        lost_events: 0,
        lost_samples: 0,
        kernel_addrs: 0,
        kernel_unresolved: 0,
        warnings,
    };
    st.acc = (0..st.attrs.len()).map(|_| Acc::default()).collect();
    st.dso_kernel = st.add_dso("[kernel.kallsyms]", "[kernel.kallsyms]", true);
    st.dso_unknown = st.add_dso("[unknown]", "[unknown]", false);
    if let Some(k) = &st.kallsyms {
        let mods = k.modules.clone();
        st.kallsyms_dso = mods.iter().map(|m| st.add_dso(m, m, true)).collect();
    }

    let compressed = perf_file.features().has_feature(linux_perf_data::Feature::COMPRESSED);
    let data_end = (data_off + data_size) as usize;
    let mut cut_reason: Option<String> = None;
    if compressed {
        // Compressed (perf record -z) files go through the crate's reader, which inflates them.
        loop {
            match record_iter.next_record(&mut perf_file) {
                Ok(Some(PerfFileRecord::EventRecord { attr_index, record })) => {
                    let body = record.data.as_slice();
                    let ty = record.record_type.0;
                    if ty == REC_SAMPLE || ty < 64 {
                        st.record::<T>(ty, record.misc, &body, attr_index);
                    }
                }
                Ok(Some(PerfFileRecord::UserRecord(r))) => {
                    st.rec_counts[(r.record_type.record_type().0 as usize).min(127)] += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    cut_reason = Some(format!("a record could not be read ({e})"));
                    break;
                }
            }
        }
    } else {
        let region = &data[data_off as usize..data_end];
        if region.len() as u64 > PENDING_OFF_MASK || st.attrs.len() as u64 >= 1 << (64 - PENDING_OFF_BITS) {
            return Err(format!("{name} has more than 1 TiB of records or 16M events, which is not supported"));
        }
        let mut pos = 0usize;
        // (time, offset | event index << 40) of the records of the rounds not yet flushed.
        let mut pending: Vec<(u64, u64)> = Vec::new();
        let mut prev_max = 0u64;
        let mut cur_max = 0u64;
        // Window over the map, in file offsets: populated up to `ahead`, released up to `behind`.
        let base = data_off as usize;
        let mut ahead = base;
        let mut behind = base;
        while pos < region.len() {
            if let Some(m) = map {
                if base + pos + WINDOW_CHUNK / 2 > ahead && ahead < data_end {
                    let len = WINDOW_CHUNK.min(data_end - ahead);
                    // Only a hint: on kernels without MADV_POPULATE_READ the pages fault in as usual.
                    let _ = m.advise_range(memmap2::Advice::PopulateRead, ahead, len);
                    ahead += len;
                }
            }
            if pos + 8 > region.len() {
                cut_reason = Some(format!("a record header is cut at byte {}", data_off as usize + pos));
                break;
            }
            let ty = T::read_u32(&region[pos..pos + 4]);
            let size = T::read_u16(&region[pos + 6..pos + 8]) as usize;
            if size < 8 {
                cut_reason = Some(format!("a record at byte {} has an impossible size {size}", data_off as usize + pos));
                break;
            }
            if pos + size > region.len() {
                cut_reason = Some(format!("a record is cut at byte {}", data_off as usize + pos));
                break;
            }
            let body = &region[pos + 8..pos + size];
            if ty == REC_FINISHED_ROUND {
                st.rec_counts[REC_FINISHED_ROUND as usize] += 1;
                st.flush::<T>(region, &mut pending, Some(prev_max));
                prev_max = cur_max;
                if let Some(m) = map {
                    let keep = pending.iter().map(|e| (e.1 & PENDING_OFF_MASK) as usize).min().unwrap_or(pos);
                    let upto = (base + keep) & !(WINDOW_CHUNK - 1);
                    if upto >= behind + WINDOW_CHUNK {
                        // SAFETY: a read-only file map: released pages read back
                        // from the file (page cache) if touched again; no reference
                        // into them is kept past this point except the pending
                        // records, which are all at or after `keep`.
                        let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, behind, upto - behind) };
                        behind = upto;
                    }
                }
            } else if ty == REC_COMPRESSED || ty == REC_COMPRESSED2 {
                return Err(format!("{name} holds compressed records but its header does not say so"));
            } else if ty >= 64 {
                st.rec_counts[(ty as usize).min(127)] += 1;
            } else {
                let ai = st.attr_index::<T>(ty, body);
                let a = &st.attrs[ai];
                let t = if ty == REC_SAMPLE {
                    a.time_from_start.filter(|&o| o + 8 <= body.len()).map(|o| T::read_u64(&body[o..o + 8]))
                } else {
                    a.time_from_end
                        .filter(|&o| o <= body.len())
                        .map(|o| T::read_u64(&body[body.len() - o..body.len() - o + 8]))
                }
                .unwrap_or(0);
                cur_max = cur_max.max(t);
                pending.push((t, pos as u64 | (ai as u64) << PENDING_OFF_BITS));
            }
            pos += size;
        }
        st.flush::<T>(region, &mut pending, None);
    }
    if let Some(reason) = cut_reason {
        st.warnings.push(format!(
            "{name} is truncated ({reason}); read {} samples before the cut",
            st.samples_seen
        ));
    } else if let Some(at) = truncated_at {
        if expected_end > file_len {
            st.warnings.push(format!(
                "{name} is truncated at byte {at} (its header says the data runs to byte {expected_end}); read {} samples before the cut",
                st.samples_seen
            ));
        }
    }
    if !features_ok {
        st.warnings.push(if truncated_at.is_some() {
            format!("{name}: the header sections (hostname, kernel release, event names) were lost with the cut")
        } else {
            format!("{name}: the header sections (hostname, kernel release, event names) are missing or lie outside the file; events are named by their type")
        });
    }
    if st.malformed > 0 {
        st.warnings.push(format!("{name}: {} sample records were malformed and skipped", st.malformed));
    }
    if st.malformed_other > 0 {
        st.warnings.push(format!("{name}: {} mapping records were malformed and skipped", st.malformed_other));
    }
    if st.read_backwards > 0 {
        st.warnings.push(format!(
            "{name}: {} read values were below the event's previous value (damaged) and were skipped",
            st.read_backwards
        ));
    }
    if st.overflowed > 0 {
        st.warnings.push(format!(
            "{name}: {} samples were skipped because their period would overflow the event's 64-bit total (damaged)",
            st.overflowed
        ));
    }
    if st.unknown_ids > 0 {
        st.warnings.push(format!("{name}: {} read values named an unknown event id and were skipped", st.unknown_ids));
    }
    if st.kernel_addrs > 0 {
        if st.kallsyms.is_none() {
            st.warnings.push(format!(
                "{name}: no kallsyms file was given or found beside it, so kernel addresses are [unknown]"
            ));
        } else if st.kernel_unresolved * 2 > st.kernel_addrs && st.kernel_addrs >= 20 {
            st.warnings.push(format!(
                "{name}: {} of {} kernel addresses are outside the kallsyms file; it is probably not the kernel that was profiled",
                st.kernel_unresolved, st.kernel_addrs
            ));
        }
    }
    let missing: Vec<String> = st
        .dsos
        .iter()
        .filter(|d| !d.kernel && matches!(d.syms, SymState::Missing) && d.path.starts_with('/'))
        .map(|d| d.path.clone())
        .collect();
    if !missing.is_empty() {
        let shown: Vec<_> = missing.iter().take(5).cloned().collect();
        st.warnings.push(format!(
            "{name}: no symbols for {} user file(s) ({}{}); their addresses are [unknown] (use symfs)",
            missing.len(),
            shown.join(", "),
            if missing.len() > 5 { ", ..." } else { "" }
        ));
    }
    facts.push(("samples".into(), Fact::Int(st.samples_seen as i64)));
    facts.push(("unique_raw_stacks".into(), Fact::Int(st.raw_chains.len() as i64)));
    facts.push(("lost_events".into(), Fact::Int(st.lost_events as i64)));
    facts.push(("lost_samples".into(), Fact::Int(st.lost_samples as i64)));
    facts.push(("truncated".into(), Fact::Bool(truncated_at.is_some())));
    facts.push(("kernel_reloc".into(), Fact::Int(st.kernel_reloc)));
    if let Some((n, a)) = &st.kernel_ref {
        facts.push(("kernel_ref_symbol".into(), Fact::Str(format!("{n}={a:#x}"))));
    }
    Ok(st.finish(facts))
}

impl State<'_> {
    /// Once the kernel's mmap record has been seen, relocate kallsyms to it.
    fn apply_kernel_ref(&mut self) {
        if let (Some((name, addr)), Some(k)) = (&self.kernel_ref, &self.kallsyms) {
            if let Some(ka) = k.ref_symbol(name) {
                let delta = (*addr as i64).wrapping_sub(ka as i64);
                if delta != self.kernel_reloc {
                    self.kernel_reloc = delta;
                    self.kaddr_cache.clear();
                    self.raw_chains.clear();
                    if delta != 0 {
                        self.warnings.push(format!(
                            "kallsyms is from another boot of the kernel (KASLR); addresses relocated by {delta:#x} using {name}"
                        ));
                    }
                }
            }
        }
    }

    fn attr_index<T: ByteOrder>(&self, ty: u32, body: &[u8]) -> usize {
        if self.attrs.len() == 1 {
            return 0;
        }
        let id = if self.all_identifier {
            if ty == REC_SAMPLE {
                (body.len() >= 8).then(|| T::read_u64(&body[..8]))
            } else if self.attrs[0].sample_id_all && body.len() >= 8 {
                Some(T::read_u64(&body[body.len() - 8..]))
            } else {
                None
            }
        } else {
            let st = self.attrs[0].sample_type;
            if ty == REC_SAMPLE {
                (st & SAMPLE_ID != 0).then(|| {
                    8 * (st & (SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR)).count_ones() as usize
                }).filter(|&o| o + 8 <= body.len()).map(|o| T::read_u64(&body[o..o + 8]))
            } else if self.attrs[0].sample_id_all && st & SAMPLE_ID != 0 {
                let o = 8 * (st & (SAMPLE_ID | SAMPLE_STREAM_ID | SAMPLE_CPU | SAMPLE_IDENTIFIER)).count_ones() as usize;
                (o <= body.len()).then(|| T::read_u64(&body[body.len() - o..body.len() - o + 8]))
            } else {
                None
            }
        };
        id.and_then(|id| self.event_of_id(id)).unwrap_or(0)
    }

    #[inline]
    fn event_of_id(&self, id: u64) -> Option<usize> {
        if self.id_list.len() <= 16 {
            self.id_list.iter().find(|e| e.0 == id).map(|e| e.1)
        } else {
            self.id_to_attr.get(&id).copied()
        }
    }

    fn flush<T: ByteOrder>(&mut self, region: &[u8], pending: &mut Vec<(u64, u64)>, limit: Option<u64>) {
        if pending.is_empty() {
            return;
        }
        // A round is a concatenation of per-CPU runs already in time order:
        // the stable sort merges those runs and keeps file order for equal times.
        pending.sort_by_key(|e| e.0);
        let n = match limit {
            Some(l) => pending.partition_point(|e| e.0 <= l),
            None => pending.len(),
        };
        for &(_, packed) in &pending[..n] {
            let pos = (packed & PENDING_OFF_MASK) as usize;
            let ai = (packed >> PENDING_OFF_BITS) as usize;
            let ty = T::read_u32(&region[pos..pos + 4]);
            let misc = T::read_u16(&region[pos + 4..pos + 6]);
            let size = T::read_u16(&region[pos + 6..pos + 8]) as usize;
            let body = &region[pos + 8..pos + size];
            self.record::<T>(ty, misc, body, ai);
        }
        pending.drain(..n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Documents the upstream defect our own sample parser works around; when
    /// this fails after an upgrade, the crate may have been fixed.
    #[test]
    fn linux_perf_event_reader_0_10_2_misreads_group_read_values() {
        assert!(crate_sample_read_defect());
    }

    #[test]
    fn kallsyms_relocation_symbol() {
        let k = Kallsyms::parse("ffffffff81000000 T _text\nffffffff81000100 T f\n").unwrap();
        assert_eq!(k.ref_symbol("_text"), Some(0xffffffff81000000));
        assert_eq!(k.ref_symbol("_stext"), Some(0xffffffff81000000));
    }
}
