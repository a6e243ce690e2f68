//! Symbol resolution: an address to a symbol id, in the symbol and DSO tables
//! the output carries. Kernel addresses through kallsyms (relocated to the
//! profiled boot when the kernel's mmap record names its reference symbol),
//! user addresses through the process's mappings and the ELF symbols of the
//! mapped file (or its debug file, found by build id, symfs and debug dirs).
use crate::abi::*;
use crate::elfsyms::{self, ElfSyms, SharedSyms};
use crate::header::BuildIds;
use crate::kallsyms::Kallsyms;
use crate::procmaps::{overlay, Map, Processes};
use crate::options::Options;
use rustc_hash::FxHashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// No id yet.
const NONE: u32 = u32::MAX;

enum SymState {
    NotTried,
    Missing,
    Loaded(Arc<ElfSyms>),
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

pub struct Symbols<'o> {
    opts: &'o Options,
    // the symbol table
    sym_names: Vec<String>,
    sym_dso: Vec<u32>,
    sym_kernel: Vec<u8>,
    /// (DSO, hash of the name) -> symbol id, the name checked against `sym_names`: a symbol's name
    /// is kept once (each run of a read on threads interns a few thousand, and a merge looks up
    /// every symbol of the run it takes in). A name whose slot holds another name's symbol (the
    /// hashes collide) is in `sym_collided`.
    sym_intern: FxHashMap<(u32, u64), u32>,
    sym_collided: FxHashMap<(u32, String), u32>,
    /// Where each symbol's name came from (`ORIGIN_KALLSYMS | index`, `ORIGIN_ELF | index in its
    /// DSO's table`, else 0): a merge maps most symbols by it instead of by name.
    sym_origin: Vec<u64>,
    /// The kernel addresses looked up by readers merged in while none of them, nor this one,
    /// failed to resolve one: their union is counted only when one does (`kernel_addrs`).
    kaddr_later: Vec<FxHashMap<u64, u32>>,
    dsos: Vec<Dso>,
    dso_by_path: FxHashMap<String, u32>,
    header_build_ids: BuildIds,
    // kernel
    kallsyms: Option<Arc<Kallsyms>>,
    kallsyms_dso: Vec<u32>,
    /// Each kallsyms symbol's id, by its index in the kallsyms table, once met: a map, since a
    /// reader meets a few thousand of a table's 100,000 or more (an array of them, zeroed, was
    /// written whole when glibc handed back memory freed before, on each run of a read on threads).
    kallsyms_sym: FxHashMap<u32, u32>,
    pub kernel_reloc: i64,
    pub kernel_ref: Option<(String, u64)>,
    /// The kernel image's mapping as recorded (start, length, pgoff), and each module's
    /// (name as kallsyms writes it, start, length): what a symbol source is checked against.
    pub kernel_map: Option<(u64, u64, u64)>,
    pub module_maps: Vec<(String, u64, u64)>,
    kaddr_cache: FxHashMap<u64, u32>,
    /// (DSO, file offset) packed by `file_key` -> symbol.
    uaddr_cache: FxHashMap<u64, u32>,
    /// In front of those two: the last symbol of an address, direct-mapped.
    recent: AddrCache,
    dso_unknown: u32,
    dso_kernel: u32,
    pub procs: Processes<'o>,
    /// The ELF symbols shared with the other threads reading the same file (`parallel`) and with
    /// the other reads of the same group (`Options::share`).
    pub shared: Option<Arc<SharedSyms>>,
    /// Kernel addresses looked up, and those kallsyms does not hold.
    pub kernel_addrs: u64,
    pub kernel_unresolved: u64,
    pub warnings: Vec<String>,
}

/// The symbol and DSO tables of the output.
pub struct Tables {
    pub sym_names: Vec<String>,
    pub sym_dso: Vec<u32>,
    pub sym_kernel: Vec<u8>,
    pub dso_names: Vec<String>,
    pub dso_paths: Vec<String>,
}

/// The address space of kernel addresses in the recent-address cache; a user
/// one is `Processes::space`.
const KERNEL_SPACE: u64 = 0;
const RECENT_BITS: u32 = 14;

/// A direct-mapped cache of (address space, address) -> symbol: one probe,
/// no chaining, an entry simply replaced by the next that maps to its slot. A reader that is
/// done gives its slots back (`give_back`), and the next reader takes them: a read on threads
/// makes a reader for every run of chunks, and 384 KB of new slots each was about 100 page
/// faults a run (a tenth of a 16-thread read's faults).
struct AddrCache {
    /// Empty once given back: every lookup then misses.
    slots: Vec<(u64, u64, u32)>,
    /// 1 << bits slots (`RECENT_BITS` on one reader; fewer for each thread of many, as its
    /// memos are: `aggregate::memo_divisor`).
    bits: u32,
}

/// A slot that holds no address.
const NO_SLOT: (u64, u64, u32) = (u64::MAX, u64::MAX, NONE);

/// The slots of the recent-address caches that readers which are done gave back.
pub static SPARE_SLOTS: crate::cleanup::Spares<Vec<(u64, u64, u32)>> = crate::cleanup::Spares::new();

impl AddrCache {
    /// A cache of `1 / divisor` of one reader's slots (rounded down to a power of two).
    fn new(divisor: usize) -> Self {
        let bits = RECENT_BITS - divisor.max(1).ilog2().min(RECENT_BITS - 1);
        match SPARE_SLOTS.take_fitting(|slots| slots.len() == 1 << bits) {
            Some(slots) => {
                let mut cache = AddrCache { slots, bits };
                cache.clear();
                cache
            }
            None => AddrCache { slots: vec![NO_SLOT; 1 << bits], bits },
        }
    }

    #[inline(always)]
    fn slot(&self, space: u64, addr: u64) -> usize {
        ((space ^ addr).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }

    /// Always inlined: asked for each frame; when its slot count became a field, the compiler
    /// stopped inlining it, which cost 5M instructions on one thread's read of the 71 MB file.
    #[inline(always)]
    fn get(&self, space: u64, addr: u64) -> Option<u32> {
        let e = self.slots.get(self.slot(space, addr))?;
        (e.0 == space && e.1 == addr).then_some(e.2)
    }

    #[inline(always)]
    fn put(&mut self, space: u64, addr: u64, id: u32) {
        let i = self.slot(space, addr);
        if let Some(e) = self.slots.get_mut(i) {
            *e = (space, addr, id);
        }
    }

    fn clear(&mut self) {
        self.slots.fill(NO_SLOT);
    }

    /// Gives the slots to the next cache made.
    fn give_back(&mut self) {
        let slots = std::mem::take(&mut self.slots);
        if slots.len() == 1 << self.bits {
            SPARE_SLOTS.give(slots);
        }
    }
}

/// `Symbols::sym_origin`: a kallsyms symbol's, an ELF symbol's.
const ORIGIN_KALLSYMS: u64 = 1 << 62;
const ORIGIN_ELF: u64 = 2 << 62;
const ORIGIN_INDEX: u64 = (1 << 62) - 1;

/// A tail key's word for a user address no mapping holds.
pub const TAIL_UNMAPPED: u64 = u64::MAX - 1;

/// A DSO and an offset in its file as one word (none when they do not fit: such an
/// address is resolved every time rather than cached).
#[inline]
pub fn file_key(dso: u32, off: u64) -> Option<u64> {
    (dso < 1 << 24 && off < 1 << 40).then(|| (dso as u64) << 40 | off)
}

/// The DSO and offset of a `file_key`.
#[inline]
fn file_of_key(key: u64) -> (u32, u64) {
    ((key >> 40) as u32, key & ((1 << 40) - 1))
}

/// The module a kernel mapping (pid -1) is of, named as kallsyms names it: `[ext4]` or
/// `/lib/modules/.../ext4.ko[.xz]` -> `ext4` (perf's `-` -> `_`); None for other kernel maps.
fn module_name(path: &str) -> Option<String> {
    let name = if let Some(inner) = path.strip_prefix('[').and_then(|p| p.strip_suffix(']')) {
        inner
    } else {
        let base = basename(path);
        let i = base.find(".ko")?;
        &base[..i]
    };
    (!name.is_empty() && !name.contains('.')).then(|| name.replace('-', "_"))
}

/// A symbol name's hash, for `Symbols::sym_intern`.
fn name_hash(name: &str) -> u64 {
    use std::hash::BuildHasher;
    let h = rustc_hash::FxBuildHasher.hash_one(name);
    #[cfg(test)]
    let h = h & tests::NAME_HASH_MASK.with(|m| m.get());
    h
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The ELF symbols of a DSO's file (`path`, with `build_id` when recorded): the first image
/// found that parses (and matches the build id), or its separate debug file's symbols when
/// that has any; None when no candidate has symbols.
fn load_elf_syms(path: &str, build_id: Option<&[u8]>, opts: &Options) -> Option<ElfSyms> {
    let (dbgs, images) = elfsyms::candidates(path, build_id, &opts.symfs, &opts.debug_dirs);
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
    let image = images.iter().find_map(|c| open(c).and_then(|m| ElfSyms::parse(m, None, build_id)))?;
    for c in &dbgs {
        if let Some(m) = open(c) {
            if let Some(s) = ElfSyms::parse(m, Some(image.bytes()), build_id) {
                if !s.is_empty() {
                    return Some(s);
                }
            }
        }
    }
    Some(image)
}

impl<'o> Symbols<'o> {
    /// `memo_divisor`: what its cache of recent addresses is of one reader's (`aggregate::memo_divisor`).
    pub fn new(opts: &'o Options, kallsyms: Option<Arc<Kallsyms>>, header_build_ids: BuildIds, memo_divisor: usize) -> Self {
        let mut s = Symbols {
            opts,
            sym_names: Vec::new(),
            sym_dso: Vec::new(),
            sym_kernel: Vec::new(),
            sym_intern: FxHashMap::default(),
            sym_collided: FxHashMap::default(),
            sym_origin: Vec::new(),
            kaddr_later: Vec::new(),
            dsos: Vec::new(),
            dso_by_path: FxHashMap::default(),
            header_build_ids,
            kallsyms_dso: Vec::new(),
            kallsyms_sym: FxHashMap::default(),
            kallsyms,
            kernel_reloc: 0,
            kernel_ref: None,
            kernel_map: None,
            module_maps: Vec::new(),
            kaddr_cache: FxHashMap::default(),
            uaddr_cache: FxHashMap::default(),
            recent: AddrCache::new(memo_divisor),
            dso_unknown: 0,
            dso_kernel: 0,
            procs: Processes::new(),
            shared: opts.share.clone(),
            kernel_addrs: 0,
            kernel_unresolved: 0,
            warnings: Vec::new(),
        };
        s.dso_kernel = s.add_dso("[kernel.kallsyms]", "[kernel.kallsyms]", true);
        s.dso_unknown = s.add_dso("[unknown]", "[unknown]", false);
        if let Some(k) = &s.kallsyms {
            let mods = k.modules.clone();
            s.kallsyms_dso = mods.iter().map(|m| s.add_dso(m, m, true)).collect();
        }
        s
    }

    /// How many symbols there are.
    pub fn len(&self) -> usize {
        self.sym_names.len()
    }

    pub fn has_kallsyms(&self) -> bool {
        self.kallsyms.is_some()
    }

    pub fn kallsyms(&self) -> Option<&Kallsyms> {
        self.kallsyms.as_deref()
    }

    /// The user files mapped with no symbols found for them.
    pub fn missing_user_files(&self) -> Vec<String> {
        self.dsos
            .iter()
            .filter(|d| !d.kernel && matches!(d.syms, SymState::Missing) && d.path.starts_with('/'))
            .map(|d| d.path.clone())
            .collect()
    }

    pub fn into_tables(self) -> Tables {
        Tables {
            sym_names: self.sym_names,
            sym_dso: self.sym_dso,
            sym_kernel: self.sym_kernel,
            dso_names: self.dsos.iter().map(|d| d.name.clone()).collect(),
            dso_paths: self.dsos.iter().map(|d| d.path.clone()).collect(),
        }
    }

    /// Takes in the symbols of a reader of a later part of the same file (`parallel`) and
    /// returns its symbol ids in this table. DSOs and symbols new to this table are added
    /// in the order the other reader met them, which is the order one reader of the whole
    /// file would have. The state (mappings, the kernel's relocation, its warnings) is the
    /// later reader's, which has seen more of the file; the kernel addresses looked up are
    /// the union of both, counted once; a DSO's symbols are what the first reader that looked
    /// for them found. Absorbing B then C gives what absorbing C into B, then that, gives.
    pub fn absorb(&mut self, other: &mut Symbols<'o>) -> Vec<u32> {
        let dso_map: Vec<u32> = other
            .dsos
            .iter()
            .map(|d| {
                let id = self.add_dso(&d.name, &d.path, d.kernel);
                let mine = &mut self.dsos[id as usize];
                if mine.build_id.is_none() {
                    mine.build_id = d.build_id.clone();
                }
                // what the first part that looked for the DSO's symbols found (one reader looks once)
                if matches!(mine.syms, SymState::NotTried) {
                    match &d.syms {
                        SymState::Missing => mine.syms = SymState::Missing,
                        SymState::Loaded(s) => {
                            mine.syms = SymState::Loaded(s.clone());
                            mine.sym_ids = Vec::new(); // sized when a symbol is looked up (`file_sym`)
                        }
                        SymState::NotTried => {}
                    }
                }
                id
            })
            .collect();
        let sym_map: Vec<u32> = (0..other.sym_names.len()).map(|i| self.take_sym(other, &dso_map, i)).collect();
        // The kernel addresses looked up, counted once: while every one resolved, only whether
        // there are any matters (`warnings`), and their union waits until one does not.
        let resolved = self.kernel_unresolved == 0 && other.kernel_unresolved == 0;
        if resolved {
            self.kernel_addrs = self.kernel_addrs.max(other.kernel_addrs);
            self.kaddr_later.push(std::mem::take(&mut other.kaddr_cache));
            self.kaddr_later.append(&mut other.kaddr_later);
        } else {
            let other_unknown = other.dsos[other.dso_kernel as usize].unknown;
            // (addresses looked up, the ids they map to here when known, the id of an unresolved one)
            type Looked<'m> = (FxHashMap<u64, u32>, Option<&'m [u32]>, u32);
            let mut maps: Vec<Looked> = std::mem::take(&mut self.kaddr_later)
                .into_iter()
                .chain(std::mem::take(&mut other.kaddr_later))
                .map(|m| (m, None, NONE))
                .collect();
            maps.push((std::mem::take(&mut other.kaddr_cache), Some(&sym_map[..]), other_unknown));
            self.kernel_addrs = self.kaddr_cache.len() as u64;
            for (m, ids, unknown) in maps {
                for (addr, id) in m {
                    if let std::collections::hash_map::Entry::Vacant(e) = self.kaddr_cache.entry(addr) {
                        // an address of a reader merged in while all resolved resolved; its id is not
                        // this table's, and is never asked again
                        e.insert(ids.map_or(NONE, |ids| ids[id as usize]));
                        self.kernel_addrs += 1;
                        self.kernel_unresolved += (id == unknown) as u64;
                    }
                }
            }
        }
        self.kernel_reloc = other.kernel_reloc;
        self.kernel_ref = other.kernel_ref.take();
        self.kernel_map = other.kernel_map;
        self.module_maps = std::mem::take(&mut other.module_maps);
        let done = std::mem::replace(&mut self.procs, std::mem::replace(&mut other.procs, Processes::new()));
        crate::cleanup::later(done.into_table());
        self.warnings = std::mem::take(&mut other.warnings);
        self.recent.clear();
        sym_map
    }

    /// Symbol `i` of a reader merged in (`absorb`), in this table: found by where its name
    /// came from (a kallsyms symbol, an ELF symbol of the same table) when this table has that
    /// one, else by its DSO and name.
    fn take_sym(&mut self, other: &Symbols, dso_map: &[u32], i: usize) -> u32 {
        let (d, name, origin) = (dso_map[other.sym_dso[i] as usize], &other.sym_names[i], other.sym_origin[i]);
        let at = (origin & ORIGIN_INDEX) as usize;
        match origin & !ORIGIN_INDEX {
            ORIGIN_KALLSYMS if self.kallsyms.as_ref().is_some_and(|k| at < k.addrs.len()) => {
                match self.kallsyms_sym.get(&(at as u32)) {
                    Some(&id) => id,
                    None => {
                        let id = self.intern_sym(d, name, origin);
                        self.kallsyms_sym.insert(at as u32, id);
                        id
                    }
                }
            }
            ORIGIN_ELF => {
                let same = match (&self.dsos[d as usize].syms, &other.dsos[other.sym_dso[i] as usize].syms) {
                    (SymState::Loaded(a), SymState::Loaded(b)) => Arc::ptr_eq(a, b) && at < a.len(),
                    _ => false,
                };
                if !same {
                    return self.intern_sym(d, name, origin);
                }
                let dso = &mut self.dsos[d as usize];
                if dso.sym_ids.is_empty() {
                    if let SymState::Loaded(s) = &dso.syms {
                        dso.sym_ids = vec![NONE; s.len()];
                    }
                }
                if dso.sym_ids[at] == NONE {
                    let id = self.intern_sym(d, name, origin);
                    self.dsos[d as usize].sym_ids[at] = id;
                }
                self.dsos[d as usize].sym_ids[at]
            }
            _ => self.intern_sym(d, name, origin),
        }
    }

    /// The tables the output carries, taken out (`into_tables` without the rest).
    pub fn take_tables(&mut self) -> Tables {
        Tables {
            sym_names: std::mem::take(&mut self.sym_names),
            sym_dso: std::mem::take(&mut self.sym_dso),
            sym_kernel: std::mem::take(&mut self.sym_kernel),
            dso_names: self.dsos.iter().map(|d| d.name.clone()).collect(),
            dso_paths: self.dsos.iter().map(|d| d.path.clone()).collect(),
        }
    }

    /// A run of a read on threads is done: its recent-address cache goes to the next run.
    pub fn run_done(&mut self) {
        self.recent.give_back();
    }

    /// What a reader that is done holds (its tables, caches and processes), taken out to be
    /// freed later (`cleanup`).
    pub fn leftovers(&mut self) -> impl Send + 'static {
        use std::mem::take;
        (
            (take(&mut self.sym_names), take(&mut self.sym_dso), take(&mut self.sym_kernel), take(&mut self.sym_intern),
             take(&mut self.sym_collided), take(&mut self.sym_origin), take(&mut self.kaddr_later)),
            (take(&mut self.dsos), take(&mut self.dso_by_path), take(&mut self.kallsyms_sym), take(&mut self.kaddr_cache)),
            (take(&mut self.uaddr_cache), take(&mut self.recent.slots), std::mem::replace(&mut self.procs, Processes::new()).into_table()),
        )
    }

    /// The DSO of a user mapping of `path` (`mmap`), added when new, taking `build_id` when it
    /// has none yet: what the mappings before a later part's reader's part gave (`history`).
    pub fn seed_dso(&mut self, path: &str, build_id: Option<&[u8]>) -> u32 {
        let d = self.add_dso(basename(path), path, false);
        if let Some(b) = build_id {
            if self.dsos[d as usize].build_id.is_none() {
                self.dsos[d as usize].build_id = Some(b.to_vec());
            }
        }
        d
    }

    fn intern_sym(&mut self, dso: u32, name: &str, origin: u64) -> u32 {
        use std::collections::hash_map::Entry;
        let id = self.sym_names.len() as u32;
        match self.sym_intern.entry((dso, name_hash(name))) {
            Entry::Occupied(e) => {
                let theirs = *e.get();
                if self.sym_names[theirs as usize] == name {
                    return theirs;
                }
                // another name with this hash holds the slot
                match self.sym_collided.entry((dso, name.to_string())) {
                    Entry::Occupied(mine) => return *mine.get(),
                    Entry::Vacant(mine) => {
                        mine.insert(id);
                    }
                }
            }
            Entry::Vacant(e) => {
                e.insert(id);
            }
        }
        self.sym_names.push(name.to_string());
        self.sym_origin.push(origin);
        self.sym_dso.push(dso);
        self.sym_kernel.push(self.dsos[dso as usize].kernel as u8);
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
        let id = self.intern_sym(dso, "[unknown]", 0);
        self.dsos[dso as usize].unknown = id;
        id
    }

    /// A key for what a user address of `pid` means now (`Processes::space`); a later part's
    /// reader meets the process first (`meet`).
    #[inline(always)]
    pub fn space(&mut self, pid: i32) -> u64 {
        if self.procs.prefix.is_some() && self.procs.unmet(pid) {
            self.meet(pid);
        }
        self.procs.space(pid)
    }

    /// A process met for the first time by a later part's reader: its mappings as the
    /// records before the part left them, their files in this table.
    #[cold]
    #[inline(never)]
    fn meet(&mut self, pid: i32) {
        let found = self.procs.prefix.as_ref().and_then(|p| p.maps(pid));
        let maps = found.map(|list| {
            list.into_iter().fold(Vec::<Map>::new(), |maps, m| {
                let d = self.seed_dso(&m.path, m.build_id.as_deref());
                overlay(&maps, m.start, m.len, m.pgoff, d)
            })
        });
        self.procs.met(pid, maps);
    }

    /// A FORK record's new process, from its parent's mappings.
    pub fn fork(&mut self, pid: i32, ppid: i32) {
        if self.procs.unmet(ppid) {
            self.meet(ppid);
        }
        self.procs.fork(pid, ppid);
    }

    /// The symbol of an address of the call chain in context `mode`, in process `pid`
    /// whose user addresses mean what they do in `space` (`Processes::space(pid)`).
    #[inline(always)]
    pub fn frame_sym(&mut self, mode: u8, pid: i32, space: u64, addr: u64) -> u32 {
        match mode {
            MODE_KERNEL => self.kernel_sym(addr),
            MODE_USER => self.user_sym(pid, space, addr),
            _ => self.other_frame_sym(mode, pid, space, addr),
        }
    }

    /// `frame_sym` in the contexts other than kernel and user.
    #[inline(never)]
    fn other_frame_sym(&mut self, mode: u8, pid: i32, space: u64, addr: u64) -> u32 {
        match mode {
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
                if in_kernel { self.kernel_sym(addr) } else { self.user_sym(pid, space, addr) }
            }
        }
    }

    #[inline(always)]
    fn kernel_sym(&mut self, addr: u64) -> u32 {
        if let Some(id) = self.recent.get(KERNEL_SPACE, addr) {
            return id;
        }
        let id = self.kernel_sym_uncached(addr);
        self.recent.put(KERNEL_SPACE, addr, id);
        id
    }

    #[inline(never)]
    fn kernel_sym_uncached(&mut self, addr: u64) -> u32 {
        if let Some(&id) = self.kaddr_cache.get(&addr) {
            return id;
        }
        self.kernel_addrs += 1;
        let id = match &self.kallsyms {
            Some(ks) => match ks.lookup((addr as i64).wrapping_sub(self.kernel_reloc) as u64) {
                Some(i) => match self.kallsyms_sym.get(&(i as u32)) {
                    Some(&id) => id,
                    None => {
                        let dso = self.kallsyms_dso[ks.module[i] as usize];
                        // the table is put back below: interning borrows the rest of `self`, and
                        // the name is then copied once, into the symbol table
                        let ks = self.kallsyms.take().expect("matched above");
                        let id = self.intern_sym(dso, ks.name(i), ORIGIN_KALLSYMS | i as u64);
                        self.kallsyms = Some(ks);
                        self.kallsyms_sym.insert(i as u32, id);
                        id
                    }
                },
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

    /// A user address's symbol: the same while the process's mappings stay the
    /// same, so the recent-address cache is keyed by pid and maps generation.
    #[inline(always)]
    fn user_sym(&mut self, pid: i32, space: u64, addr: u64) -> u32 {
        if let Some(id) = self.recent.get(space, addr) {
            return id;
        }
        let id = self.user_sym_uncached(pid, addr);
        self.recent.put(space, addr, id);
        id
    }

    #[inline(never)]
    fn user_sym_uncached(&mut self, pid: i32, addr: u64) -> u32 {
        match self.procs.map_of(pid, addr) {
            Some(m) => self.file_sym(m.dso, addr - m.start + m.pgoff),
            None => self.unknown_of(self.dso_unknown),
        }
    }

    /// The symbol at offset `off` of DSO `dso`'s file.
    pub fn file_sym(&mut self, dso: u32, off: u64) -> u32 {
        let key = file_key(dso, off);
        if let Some(&id) = key.and_then(|k| self.uaddr_cache.get(&k)) {
            return id;
        }
        self.load_dso_syms(dso);
        let found = match &self.dsos[dso as usize].syms {
            SymState::Loaded(s) => s.offset_to_vaddr(off).and_then(|v| s.lookup(v)),
            _ => None,
        };
        let id = match found {
            Some(i) => {
                let d = &mut self.dsos[dso as usize];
                if d.sym_ids.is_empty() {
                    if let SymState::Loaded(s) = &d.syms {
                        d.sym_ids = vec![NONE; s.len()];
                    }
                }
                let have = d.sym_ids[i];
                if have != NONE {
                    have
                } else {
                    let name = match &self.dsos[dso as usize].syms {
                        SymState::Loaded(s) => s.name(i).to_string(),
                        _ => unreachable!(),
                    };
                    let id = self.intern_sym(dso, &name, ORIGIN_ELF | i as u64);
                    self.dsos[dso as usize].sym_ids[i] = id;
                    id
                }
            }
            None => self.unknown_of(dso),
        };
        if let Some(k) = key {
            self.uaddr_cache.insert(k, id);
        }
        id
    }

    /// The symbol of a word of a tail key (`tail_key`) in context `ctx`.
    #[inline]
    pub fn tail_key_sym(&mut self, ctx: u8, word: u64) -> u32 {
        if ctx == MODE_KERNEL {
            self.kernel_sym(word)
        } else if word == TAIL_UNMAPPED {
            self.unknown_of(self.dso_unknown)
        } else {
            let (dso, off) = file_of_key(word);
            self.file_sym(dso, off)
        }
    }

    fn load_dso_syms(&mut self, d: u32) {
        let dso = &self.dsos[d as usize];
        if !matches!(dso.syms, SymState::NotTried) {
            return;
        }
        let (path, bid, opts) = (dso.path.clone(), dso.build_id.clone(), self.opts);
        let loaded = match &self.shared {
            Some(shared) => shared.get(&path, bid.as_deref(), &opts.symfs, &opts.debug_dirs,
                                       || load_elf_syms(&path, bid.as_deref(), opts)),
            None => load_elf_syms(&path, bid.as_deref(), opts).map(Arc::new),
        };
        let dso = &mut self.dsos[d as usize];
        match loaded {
            Some(s) => {
                dso.sym_ids = vec![NONE; s.len()];
                dso.syms = SymState::Loaded(s);
            }
            None => dso.syms = SymState::Missing,
        }
    }

    /// An MMAP or MMAP2 record. Returns whether the kernel's symbols moved
    /// (relocated to another boot), so that stacks already symbolized are stale.
    pub fn mmap(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, path: &[u8], exec: bool, build_id: Option<Vec<u8>>) -> bool {
        if pid != -1 && !exec {
            return false;
        }
        let path = String::from_utf8_lossy(path);
        if pid == -1 {
            // Kernel image: "[kernel.kallsyms]_text" with pgoff = address of _text.
            if let Some(rest) = path.strip_prefix("[kernel.kallsyms]") {
                let refname = rest.trim_start_matches('_');
                if !rest.is_empty() && self.kernel_ref.is_none() {
                    self.kernel_map = Some((start, len, pgoff));
                    self.kernel_ref = Some((format!("_{refname}"), pgoff));
                    return self.apply_kernel_ref();
                }
            } else if let Some(m) = module_name(&path) {
                if !self.module_maps.iter().any(|(n, _, _)| *n == m) {
                    self.module_maps.push((m, start, len));
                }
            }
            return false;
        }
        let d = self.add_dso(basename(&path), &path, false);
        if let Some(b) = build_id {
            if self.dsos[d as usize].build_id.is_none() {
                self.dsos[d as usize].build_id = Some(b);
            }
        }
        if self.procs.unmet(pid) {
            self.meet(pid);
        }
        self.procs.add_map(pid, start, len, pgoff, d);
        false
    }

    /// Once the kernel's mmap record has been seen, relocate kallsyms to it.
    /// Returns whether the relocation changed.
    fn apply_kernel_ref(&mut self) -> bool {
        if let (Some((name, addr)), Some(k)) = (&self.kernel_ref, &self.kallsyms) {
            if let Some(ka) = k.ref_symbol(name) {
                let delta = (*addr as i64).wrapping_sub(ka as i64);
                if delta != self.kernel_reloc {
                    self.kernel_reloc = delta;
                    self.kaddr_cache.clear();
                    self.recent.clear();
                    if delta != 0 {
                        self.warnings.push(format!(
                            "kallsyms is from another boot of the kernel (KASLR); addresses relocated by {delta:#x} using {name}"
                        ));
                    }
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A cache of recent addresses is the share of one reader's its read asked for (whatever
    /// slots another read left spare), finds what it was given, and hands on slots of its size.
    #[test]
    fn a_recent_cache_is_the_share_asked_for() {
        let mut full = AddrCache::new(1);
        assert_eq!(full.slots.len(), 1 << RECENT_BITS);
        full.give_back();
        for (d, bits) in [(4, RECENT_BITS - 2), (3, RECENT_BITS - 1), (2, RECENT_BITS - 1), (1, RECENT_BITS)] {
            let mut c = AddrCache::new(d);
            assert_eq!(c.slots.len(), 1 << bits, "a share of 1/{d}");
            for a in 0..64u64 {
                assert_eq!(c.get(7, a << 12), None);
                c.put(7, a << 12, a as u32);
            }
            let kept = (0..64u64).filter(|&a| c.get(7, a << 12) == Some(a as u32)).count();
            assert!(kept >= 60, "1/{d}: {kept} of 64 addresses found again");
            c.give_back();
            assert!(c.slots.is_empty() && c.get(7, 0).is_none(), "given back, it holds nothing");
        }
    }

    thread_local! {
        /// The bits of a name's hash `name_hash` keeps (all but in a test of collisions).
        pub static NAME_HASH_MASK: Cell<u64> = const { Cell::new(u64::MAX) };
    }

    #[test]
    fn names_whose_hashes_collide_stay_apart() {
        let opts = Options { kallsyms: None, symfs: Vec::new(), debug_dirs: Vec::new(), by_process: false, threads: 1,
                             filter: Default::default(), share: None };
        for mask in [u64::MAX, 3, 0] {
            // with a mask of 0 every name has the same hash; with 3, four hashes are shared
            NAME_HASH_MASK.with(|m| m.set(mask));
            let mut syms = Symbols::new(&opts, None, BuildIds::default(), 1);
            let (a, b) = (syms.add_dso("a", "/a", false), syms.add_dso("b", "/b", false));
            let names: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
            let mut ids = Vec::new();
            for dso in [a, b] {
                for n in &names {
                    ids.push(syms.intern_sym(dso, n, 0));
                }
            }
            // every (DSO, name) its own symbol, named so, and the same id when met again
            let mut seen = ids.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), 100, "mask {mask:#x}");
            for (k, dso) in [a, b].into_iter().enumerate() {
                for (i, n) in names.iter().enumerate() {
                    let id = ids[k * 50 + i];
                    assert_eq!(syms.sym_names[id as usize], *n);
                    assert_eq!(syms.sym_dso[id as usize], dso);
                    assert_eq!(syms.intern_sym(dso, n, 0), id, "mask {mask:#x}: {n} in DSO {dso} again");
                }
            }
            assert_eq!(syms.len(), 100);
        }
        NAME_HASH_MASK.with(|m| m.set(u64::MAX));
    }
}
